package bucket

import "time"

// quota's calendar: the period [start, end) of a Limit's calendar that
// contains a time. Everything here is a pure function of the Limit and the
// time; the time zone's rules are Go's (the Limit's Loc).

// CalendarUnit is the unit of a quota's period: a local day, week, month
// or year. The zero value, NoCalendar, is every other algorithm's.
type CalendarUnit uint8

// The units of a quota's period.
const (
	NoCalendar CalendarUnit = iota
	CalDay
	CalWeek
	CalMonth
	CalYear
)

var calendarNames = [...]string{"", "day", "week", "month", "year"}

// String returns the unit's name in a spec: "day", "week", "month" or
// "year"; "" for NoCalendar and values past CalYear.
func (u CalendarUnit) String() string {
	if int(u) < len(calendarNames) {
		return calendarNames[u]
	}
	return ""
}

// maxEvery caps Every per unit so that a period, however long its local
// days are (a day is at most 48 hours even across the largest historical
// offset change, a month at most 33 such days' worth, a year 368), stays
// within MaxDuration.
var maxEvery = [...]int64{
	CalDay:   MaxDuration / (48 * 3600e9),
	CalWeek:  MaxDuration / (8 * 24 * 3600e9),
	CalMonth: MaxDuration / (33 * 24 * 3600e9),
	CalYear:  MaxDuration / (368 * 24 * 3600e9),
}

// secondsPerDay is the length of a civil day in the proleptic calendar that
// numbers days (not of a local day, which DST can lengthen or shorten).
const secondsPerDay = 86400

// weekEpoch returns the day number (days since 1970-01-01) of the first
// day of the week that contains 1970-01-01, a Thursday, for weeks that
// start WeekStart days after Monday. Weeks are counted from it.
func (l *Limit) weekEpoch() int64 {
	e := -3 + l.WeekStart // Monday 1969-12-29 is day -3
	if e > 0 {
		e -= 7
	}
	return e
}

// location returns the Limit's time zone: Loc, UTC if nil.
func (l *Limit) location() *time.Location {
	if l.Loc == nil {
		return time.UTC
	}
	return l.Loc
}

// localDate returns the local civil date of now: its day number (days
// since 1970-01-01), its year and month (1-12).
func (l *Limit) localDate(now int64) (day, y int64, m int) {
	yy, mm, dd := time.Unix(0, now).In(l.location()).Date()
	day = time.Date(yy, mm, dd, 0, 0, 0, 0, time.UTC).Unix() / secondsPerDay
	return day, int64(yy), int(mm)
}

// dayStart returns the first instant (Unix ns) of the local day numbered
// day: the earliest instant whose local date is that day or later. It is a
// local midnight, or the instant a transition skipped midnight to (the day
// then starts at the transition); a day that a zone skipped entirely (its
// date never shows) starts where the next one does, so it is empty.
//
// Offsets and transitions are whole seconds, so the day starts on a whole
// second c with the date before the day at c-1s and on it at c. Go's local
// midnight is that instant unless midnight is skipped or repeated; then,
// and only then, a binary search over the seconds within 30 hours of the
// day's midnight as if in UTC (no offset reaches 30 hours) finds it.
func (l *Limit) dayStart(day int64) int64 {
	base := day * secondsPerDay
	loc := l.location()
	if loc == time.UTC {
		return base * 1e9
	}
	y, m, d := time.Unix(base, 0).UTC().Date()
	c := time.Date(y, m, d, 0, 0, 0, 0, loc).Unix()
	if l.dayOf(c) >= day && l.dayOf(c-1) < day {
		return c * 1e9
	}
	lo, hi := base-30*3600, base+30*3600 // dayOf(lo) < day <= dayOf(hi)
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if l.dayOf(mid) >= day {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi * 1e9
}

// dayOf returns the day number of the local date at Unix second u.
func (l *Limit) dayOf(u int64) int64 {
	y, m, d := time.Unix(u, 0).In(l.location()).Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix() / secondsPerDay
}

// monthDay returns the day number of the day month number month (months
// since January 1970) starts on under the Limit's anchor: the anchor's day
// of that month, or its last day if the month is shorter.
func (l *Limit) monthDay(month int64) int64 {
	y, m := 1970+floorDiv(month, 12), time.Month(month-12*floorDiv(month, 12)+1)
	a := int(max(l.Anchor, 1))
	last := time.Date(int(y), m+1, 0, 0, 0, 0, 0, time.UTC) // day 0: the month's last day
	return time.Date(int(y), m, min(a, last.Day()), 0, 0, 0, 0, time.UTC).Unix() / secondsPerDay
}

// periodUnits returns how many units of the period's counting (days for a
// day, weeks for a week, months for a month or a year) one period spans.
func (l *Limit) periodUnits() int64 {
	if l.Calendar == CalYear {
		return 12 * l.Every
	}
	return l.Every
}

// boundary returns the start of period number p (counted from the period
// that holds 1970-01-01's start, or the anchor's day of January 1970).
func (l *Limit) boundary(p int64) int64 {
	k := l.periodUnits()
	switch l.Calendar {
	case CalDay:
		return l.dayStart(p * k)
	case CalWeek:
		return l.dayStart(l.weekEpoch() + 7*p*k)
	}
	return l.dayStart(l.monthDay(p * k))
}

// CalendarPeriod returns the period [start, end) of the Limit's calendar that
// contains now, in Unix ns: start is the first instant of a local day (a
// midnight, or where a transition that skipped midnight lands), the
// anchor's day for months and years, the week's first day for weeks; end is
// the next period's start. The Limit must be a quota that passed Validate.
// A time outside [0, MaxTime] gets the period of the nearer end of that
// range, and the period that holds 1970-01-01T00:00:00Z starts there
// (times are never earlier).
func (l *Limit) CalendarPeriod(now int64) (start, end int64) {
	now = clamp(now, 0, MaxTime)
	day, y, m := l.localDate(now)
	k := l.periodUnits()
	var p int64
	switch l.Calendar {
	case CalDay:
		p = floorDiv(day, k)
	case CalWeek:
		p = floorDiv(floorDiv(day-l.weekEpoch(), 7), k)
	default:
		month := (y-1970)*12 + int64(m-1)
		if day < l.monthDay(month) {
			month-- // before this month's anchor: the period began in an earlier month
		}
		p = floorDiv(month, k)
	}
	start, end = l.boundary(p), l.boundary(p+1)
	// The local date can step back across a transition (a fall back over
	// midnight), so the period of now's date may lie just beside now.
	for i := 0; i < 4 && now < start; i++ {
		p--
		start, end = l.boundary(p), start
	}
	for i := 0; i < 4 && now >= end; i++ {
		p++
		start, end = end, l.boundary(p+1)
	}
	return max(start, 0), end
}
