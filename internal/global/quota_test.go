package global

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/redistest"
)

// Redis's clock, not the host's, decides which period a global quota's
// request counts in: a host whose clock is behind by an hour across a
// local midnight sends the periods around its own time, and the script
// counts the request in the period of its time; a host a period or more
// away is refused, and nothing is written.
func TestQuotaRedisClockDecidesThePeriod(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	loadLibrary(t, rdb)
	ctx := context.Background()
	paris := mustZone("Europe/Paris")
	l := bucket.Limit{Algorithm: bucket.Quota, Max: 2, Calendar: bucket.CalDay, Every: 1, Loc: paris}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	g := lookup(bucket.Quota)
	redisNow := time.Date(2024, 3, 31, 0, 30, 0, 0, paris).UnixNano() // the day of a 23-hour day, just after midnight
	call := func(key string, hostNow int64) (any, error) {
		args := appendPeriods([]any{"a" + strconv.FormatInt(redisNow, 10), int64(1), l.Max}, &l, hostNow)
		return runForm(ctx, rdb, "function", g, []string{key}, args, nil).Result()
	}
	for _, key := range []string{"behind", "ahead"} {
		host := redisNow - int64(time.Hour) // yesterday on the host's clock
		if key == "ahead" {
			host = redisNow + 5*int64(time.Hour)
		}
		for i := range 3 {
			v, err := call(key, host)
			if err != nil {
				t.Fatal(err)
			}
			allowed := v.([]any)[0].(int64) == 1
			if allowed != (i < 2) {
				t.Fatalf("%s: request %d allowed %v", key, i, allowed)
			}
		}
		s, ok := stored(t, rdb, key)
		start, end := l.CalendarPeriod(redisNow)
		if !ok || s != (bucket.State{start, 2, end}) {
			t.Fatalf("%s: stored %v %v, want the period of Redis's time [%d, %d) with 2", key, s, ok, start, end)
		}
		if end-start != 23*int64(time.Hour) {
			t.Fatalf("the day is %v long, want 23h", time.Duration(end-start))
		}
	}
	if _, err := call("far", redisNow-3*24*int64(time.Hour)); err == nil || !errors.Is(classify(err), ErrScript) {
		t.Fatalf("a host three days behind: %v, want a refusal", err)
	}
	if _, ok := stored(t, rdb, "far"); ok {
		t.Fatal("a refused request wrote its bucket")
	}
}

// A global quota's period must fit the scripts' longest duration: a day,
// a week or a month, not a year.
func TestQuotaCheck(t *testing.T) {
	for _, c := range []struct {
		l  bucket.Limit
		ok bool
	}{
		{bucket.Limit{Algorithm: bucket.Quota, Max: 1, Calendar: bucket.CalMonth, Every: 1}, true},
		{bucket.Limit{Algorithm: bucket.Quota, Max: 1, Calendar: bucket.CalDay, Every: 45}, true},
		{bucket.Limit{Algorithm: bucket.Quota, Max: 1, Calendar: bucket.CalMonth, Every: 2}, false},
		{bucket.Limit{Algorithm: bucket.Quota, Max: 1, Calendar: bucket.CalYear, Every: 1}, false},
		{bucket.Limit{Algorithm: bucket.Quota, Max: MaxCount + 1, Calendar: bucket.CalDay, Every: 1}, false},
	} {
		if err := Check(c.l); (err == nil) != c.ok {
			t.Errorf("Check(%v every %d, limit %d) = %v", c.l.Calendar, c.l.Every, c.l.Max, err)
		}
	}
}
