package bucket

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// randomQuota returns a valid quota of a random unit, multiple, anchor or
// week start and zone.
func randomQuota(r *rand.Rand) Limit {
	l := Limit{Algorithm: Quota, Max: 1 + r.Int64N(20), Calendar: CalendarUnit(1 + r.IntN(4)), Every: 1 + r.Int64N(3)}
	switch l.Calendar {
	case CalWeek:
		l.WeekStart = r.Int64N(7)
	case CalMonth, CalYear:
		l.Anchor = r.Int64N(32)
	}
	l.Loc = propertyZones[r.IntN(len(propertyZones))]
	if err := l.Validate(); err != nil {
		panic(err)
	}
	return l
}

// propertyZones are the zones the property tests draw from: testZones and
// a spread of others, DST or not, on every continent.
var propertyZones = append(append([]*time.Location(nil), testZones...),
	mustZone("Europe/London"), mustZone("Europe/Moscow"), mustZone("Europe/Dublin"),
	mustZone("America/Los_Angeles"), mustZone("America/St_Johns"), mustZone("America/Caracas"),
	mustZone("America/Godthab"), mustZone("America/Asuncion"), mustZone("Africa/Casablanca"),
	mustZone("Africa/Cairo"), mustZone("Asia/Tehran"), mustZone("Asia/Kathmandu"),
	mustZone("Asia/Tokyo"), mustZone("Asia/Gaza"), mustZone("Asia/Amman"), mustZone("Asia/Damascus"),
	mustZone("Pacific/Chatham"), mustZone("Pacific/Kiritimati"), mustZone("Pacific/Kwajalein"),
	mustZone("Pacific/Auckland"), mustZone("Pacific/Pago_Pago"), mustZone("Antarctica/Troll"),
	mustZone("Atlantic/Azores"), mustZone("America/Scoresbysund"), mustZone("Asia/Manila"))

// localDay returns the local date of t as a day number.
func localDay(t int64, loc *time.Location) int64 {
	y, m, d := time.Unix(0, t).In(loc).Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix() / 86400
}

// startsADay reports whether t is the first instant of a local day: a
// midnight, or an instant where a change of offset carried the local date
// forward (past a skipped midnight, or a whole skipped day).
func startsADay(t int64, loc *time.Location) bool {
	return localDay(t-1, loc) < localDay(t, loc)
}

// TestCalendarPeriodProperties: for random quotas and random instants in
// [0, MaxTime], the period containing t contains it, starts at the first
// instant of a local day (which is the anchor's day, or the week's first
// day, unless a zone skipped that day), is the period its own start, last
// nanosecond and any instant inside report, and the next begins where it
// ends.
func TestCalendarPeriodProperties(t *testing.T) {
	for seed := uint64(1); seed <= seeds; seed++ {
		r := newRand(seed)
		for range 200 {
			l := randomQuota(r)
			now := r.Int64N(MaxTime)
			if r.IntN(2) == 0 {
				now = t0 + r.Int64N(40*365*24*3600*sec) // the decades that matter most
			}
			start, end := l.CalendarPeriod(now)
			name := fmt.Sprintf("seed %d: %s every %d anchor %d week_start %d in %v at %d (%v)", seed, l.Calendar, l.Every, l.Anchor, l.WeekStart, l.Loc, now, time.Unix(0, now).In(l.Loc))
			if !(start <= now && now < end) {
				t.Fatalf("%s: period [%d, %d) does not contain it", name, start, end)
			}
			for _, b := range []int64{start, end} {
				if b == 0 {
					continue // the first period starts at 0, the earliest time
				}
				if !startsADay(b, l.Loc) {
					t.Fatalf("%s: boundary %v is not the first instant of a local day", name, time.Unix(0, b).In(l.Loc))
				}
				lt := time.Unix(0, b).In(l.Loc)
				skipped := localDay(b, l.Loc)-localDay(b-1, l.Loc) > 1
				switch l.Calendar {
				case CalWeek:
					if want := time.Weekday((1 + l.WeekStart) % 7); lt.Weekday() != want && !skipped {
						t.Fatalf("%s: boundary %v is not a %v", name, lt, want)
					}
				case CalMonth, CalYear:
					last := time.Date(lt.Year(), lt.Month()+1, 0, 0, 0, 0, 0, time.UTC).Day()
					if want := min(int(max(l.Anchor, 1)), last); lt.Day() != want && !skipped {
						t.Fatalf("%s: boundary %v is not day %d of its month", name, lt, want)
					}
					if l.Calendar == CalYear && lt.Month() != time.January && !skipped {
						t.Fatalf("%s: boundary %v is not in January", name, lt)
					}
				}
			}
			for _, at := range []int64{start, end - 1, start + r.Int64N(end-start)} {
				if s, e := l.CalendarPeriod(at); s != start || e != end {
					t.Fatalf("%s: CalendarPeriod(%d) = [%d, %d), want [%d, %d)", name, at, s, e, start, end)
				}
			}
			if s, _ := l.CalendarPeriod(end); s != end && end <= MaxTime {
				t.Fatalf("%s: the next period starts at %d, want %d", name, s, end)
			}
			if start-1 >= 0 {
				if _, e := l.CalendarPeriod(start - 1); e != start {
					t.Fatalf("%s: the previous period ends at %d, want %d", name, e, start)
				}
			}
		}
	}
	t.Logf("seeds 1..%d", seeds)
}

// at returns the instant of a local time in loc.
func at(loc *time.Location, y int, m time.Month, d, h, min int) int64 {
	return time.Date(y, m, d, h, min, 0, 0, loc).UnixNano()
}

// TestCalendarPeriodExact: periods whose boundaries are known, across DST
// changes, skipped midnights and days, leap years and short months.
func TestCalendarPeriodExact(t *testing.T) {
	ny, syd, sp, apia := mustZone("America/New_York"), mustZone("Australia/Sydney"), mustZone("America/Sao_Paulo"), mustZone("Pacific/Apia")
	h := 3600 * sec
	for _, tt := range []struct {
		name       string
		l          Limit
		now        int64
		start, end int64
	}{
		{"a 23-hour day", Limit{Calendar: CalDay, Every: 1, Loc: ny}, at(ny, 2024, 3, 10, 12, 0), at(ny, 2024, 3, 10, 0, 0), at(ny, 2024, 3, 10, 0, 0) + 23*h},
		{"a 25-hour day", Limit{Calendar: CalDay, Every: 1, Loc: ny}, at(ny, 2024, 11, 3, 23, 0), at(ny, 2024, 11, 3, 0, 0), at(ny, 2024, 11, 3, 0, 0) + 25*h},
		{"Sydney's 25-hour day", Limit{Calendar: CalDay, Every: 1, Loc: syd}, at(syd, 2024, 4, 7, 1, 0), at(syd, 2024, 4, 7, 0, 0), at(syd, 2024, 4, 7, 0, 0) + 25*h},
		{"a skipped midnight", Limit{Calendar: CalDay, Every: 1, Loc: sp}, at(sp, 2018, 11, 4, 12, 0),
			time.Date(2018, 11, 4, 3, 0, 0, 0, time.UTC).UnixNano(), time.Date(2018, 11, 5, 2, 0, 0, 0, time.UTC).UnixNano()},
		{"the day before a skipped day", Limit{Calendar: CalDay, Every: 1, Loc: apia}, at(apia, 2011, 12, 29, 23, 0),
			at(apia, 2011, 12, 29, 0, 0), at(apia, 2011, 12, 31, 0, 0)},
		{"February of a leap year, anchor 31", Limit{Calendar: CalMonth, Every: 1, Anchor: 31}, at(time.UTC, 2024, 3, 1, 0, 0),
			at(time.UTC, 2024, 2, 29, 0, 0), at(time.UTC, 2024, 3, 31, 0, 0)},
		{"April, anchor 31", Limit{Calendar: CalMonth, Every: 1, Anchor: 31}, at(time.UTC, 2023, 5, 30, 0, 0),
			at(time.UTC, 2023, 4, 30, 0, 0), at(time.UTC, 2023, 5, 31, 0, 0)},
		{"anchor 15, before the 15th", Limit{Calendar: CalMonth, Every: 1, Anchor: 15, Loc: ny}, at(ny, 2024, 3, 14, 23, 59),
			at(ny, 2024, 2, 15, 0, 0), at(ny, 2024, 3, 15, 0, 0)},
		{"quarters", Limit{Calendar: CalMonth, Every: 3}, at(time.UTC, 2024, 6, 30, 23, 0), at(time.UTC, 2024, 4, 1, 0, 0), at(time.UTC, 2024, 7, 1, 0, 0)},
		{"a leap year", Limit{Calendar: CalYear, Every: 1, Loc: syd}, at(syd, 2024, 12, 31, 23, 59), at(syd, 2024, 1, 1, 0, 0), at(syd, 2025, 1, 1, 0, 0)},
		{"a Monday week", Limit{Calendar: CalWeek, Every: 1}, at(time.UTC, 2024, 3, 10, 12, 0), at(time.UTC, 2024, 3, 4, 0, 0), at(time.UTC, 2024, 3, 11, 0, 0)},
		{"a Sunday week over DST", Limit{Calendar: CalWeek, Every: 1, WeekStart: 6, Loc: ny}, at(ny, 2024, 3, 10, 12, 0), at(ny, 2024, 3, 10, 0, 0), at(ny, 2024, 3, 17, 0, 0)},
		{"two weeks, the first from 1970", Limit{Calendar: CalWeek, Every: 2}, at(time.UTC, 1970, 1, 1, 0, 0), 0, at(time.UTC, 1970, 1, 12, 0, 0)},
		{"two weeks", Limit{Calendar: CalWeek, Every: 2}, at(time.UTC, 2024, 3, 10, 0, 0), at(time.UTC, 2024, 2, 26, 0, 0), at(time.UTC, 2024, 3, 11, 0, 0)}, // week 2827 since 1969-12-29 is odd
	} {
		l := tt.l
		l.Algorithm, l.Max = Quota, 1
		if err := l.Validate(); err != nil {
			t.Fatal(err)
		}
		if s, e := l.CalendarPeriod(tt.now); s != tt.start || e != tt.end {
			loc := l.location()
			t.Errorf("%s: [%v, %v), want [%v, %v)", tt.name, time.Unix(0, s).In(loc), time.Unix(0, e).In(loc), time.Unix(0, tt.start).In(loc), time.Unix(0, tt.end).In(loc))
		}
	}
}

// TestQuotaYearWalk walks a leap year hour by hour (and the minutes
// around each DST change) in three zones with DST changes, spending a daily
// quota of 3 and a monthly one anchored on the 31st: each local day admits
// exactly 3, each anchored month exactly its limit, reset_after is the time
// to the local boundary, and the DST days are 23 and 25 hours long.
func TestQuotaYearWalk(t *testing.T) {
	for _, zone := range []string{"America/New_York", "Europe/London", "Australia/Sydney"} {
		loc := mustZone(zone)
		daily := Limit{Algorithm: Quota, Max: 3, Calendar: CalDay, Every: 1, Loc: loc}
		monthly := Limit{Algorithm: Quota, Max: 40, Calendar: CalMonth, Every: 1, Anchor: 31, Loc: loc}
		for _, l := range []*Limit{&daily, &monthly} {
			if err := l.Validate(); err != nil {
				t.Fatal(err)
			}
		}
		var ds, ms State
		begin, stop := at(loc, 2024, 1, 1, 0, 0), at(loc, 2025, 1, 1, 0, 0)
		daily.Init(begin, &ds, nil)
		monthly.Init(begin, &ms, nil)
		perDay := map[[3]int]int64{}
		perMonth := map[[2]int]int64{}
		dayLen := map[[3]int]int64{}
		for now := begin; now < stop; now += 15 * 60 * sec {
			lt := time.Unix(0, now).In(loc)
			day := [3]int{lt.Year(), int(lt.Month()), lt.Day()}
			d, _ := daily.Apply(now, &ds, 1, 0)
			mid := time.Date(lt.Year(), lt.Month(), lt.Day()+1, 0, 0, 0, 0, loc).UnixNano()
			if d.ResetAfter != mid-now {
				t.Fatalf("%s %v: reset_after %d, want %d", zone, lt, d.ResetAfter, mid-now)
			}
			if d.Allowed {
				perDay[day]++
			} else if d.RetryAfter != mid-now {
				t.Fatalf("%s %v: retry_after %d, want %d", zone, lt, d.RetryAfter, mid-now)
			}
			dayLen[day] = mid - time.Date(lt.Year(), lt.Month(), lt.Day(), 0, 0, 0, 0, loc).UnixNano()
			// The anchored month: from the 31st, or the month's last day.
			anchorMonth := [2]int{lt.Year(), int(lt.Month())}
			last := time.Date(lt.Year(), lt.Month()+1, 0, 0, 0, 0, 0, time.UTC).Day()
			if lt.Day() < min(31, last) {
				pm := lt.AddDate(0, 0, -lt.Day()) // the previous month's last day
				anchorMonth = [2]int{pm.Year(), int(pm.Month())}
			}
			if m, _ := monthly.Apply(now, &ms, 1, 0); m.Allowed {
				perMonth[anchorMonth]++
			}
		}
		if len(perDay) != 366 {
			t.Fatalf("%s: %d days, want 366", zone, len(perDay))
		}
		for day, n := range perDay {
			if n != 3 {
				t.Errorf("%s %v: %d admitted, want 3", zone, day, n)
			}
		}
		for m, n := range perMonth {
			if n != 40 && m != [2]int{2023, 12} {
				t.Errorf("%s month from %v: %d admitted, want 40", zone, m, n)
			}
		}
		var short, long int
		for _, n := range dayLen {
			switch n {
			case 23 * 3600 * sec:
				short++
			case 25 * 3600 * sec:
				long++
			}
		}
		if short != 1 || long != 1 {
			t.Errorf("%s: %d days of 23 hours and %d of 25, want 1 and 1", zone, short, long)
		}
	}
}

// TestQuotaBackwards: a request at a time before the stored period (a
// client replaying history) is decided in the stored period: going back
// cannot reopen a spent one.
func TestQuotaBackwards(t *testing.T) {
	l := Limit{Algorithm: Quota, Max: 2, Calendar: CalDay, Every: 1, Loc: mustZone("Europe/Paris")}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	var s State
	day2 := at(l.Loc, 2024, 5, 2, 10, 0)
	l.Init(day2, &s, nil)
	for range 2 {
		if d, _ := l.Apply(day2, &s, 1, 0); !d.Allowed {
			t.Fatal("denied within the limit")
		}
	}
	if d, _ := l.Apply(day2-24*3600*sec, &s, 1, 0); d.Allowed {
		t.Fatal("a request a day earlier was admitted past the spent quota")
	}
}

// BenchmarkQuota measures a quota's decision beside a token bucket's: in
// a period (the stored period decides: no calendar), and the calendar's
// cost where it is computed, a request in a new period (or a new bucket),
// in UTC and in a zone with DST, at times from 2023 to 2033.
func BenchmarkQuota(b *testing.B) {
	tb := Limit{Algorithm: TokenBucket, Max: 1 << 40, RefillTime: sec, RefillAmount: 1}
	paris := mustZone("Europe/Paris")
	day := Limit{Algorithm: Quota, Max: 1 << 40, Calendar: CalDay, Every: 1, Loc: paris}
	month := Limit{Algorithm: Quota, Max: 1 << 40, Calendar: CalMonth, Every: 1, Anchor: 31, Loc: paris}
	utc := Limit{Algorithm: Quota, Max: 1 << 40, Calendar: CalMonth, Every: 1}
	for _, l := range []*Limit{&tb, &day, &month, &utc} {
		if err := l.Validate(); err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		l    Limit
		step int64 // between requests
	}{
		{"token_bucket", tb, 50_000},
		{"quota_day_paris_in_period", day, 50_000},
		{"quota_month_paris_in_period", month, 50_000},
		{"quota_day_paris_new_period", day, 24 * 3600 * sec},
		{"quota_month_paris_new_period", month, 31 * 24 * 3600 * sec},
		{"quota_month_utc_new_period", utc, 31 * 24 * 3600 * sec},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var s State
			c.l.Init(t0, &s, nil)
			now := t0
			var d Decision
			for b.Loop() {
				now += c.step
				if now > t0+10*366*24*3600*sec { // 2023 to 2033: the zone's table, as requests see it
					now = t0
					c.l.Init(now, &s, nil)
				}
				c.l.Decide(now, &s, nil, 1, 0, &d)
			}
		})
	}
}
