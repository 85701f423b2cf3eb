package bucket

import (
	"errors"
	"testing"
)

// cellReply converts a gcra Decision to redis-cell's CL.THROTTLE reply
// [limited, limit, remaining, retry_after, reset_after], with durations in
// seconds rounded as redis-cell v0.4.0+ does.
func cellReply(d Decision) [5]int64 {
	limited := int64(1)
	if d.Allowed {
		limited = 0
	}
	return [5]int64{limited, d.Limit, d.Remaining, cellSeconds(d.RetryAfter), cellSeconds(d.ResetAfter)}
}

// cellSeconds is redis-cell's duration rounding (src/lib.rs, v0.4.0+): whole
// seconds, plus 1 if the sub-second part has a non-zero millisecond, so a
// ceiling at millisecond granularity; -1 stays -1.
func cellSeconds(d int64) int64 {
	if d == -1 {
		return -1
	}
	s := d / sec
	if (d%sec)/ms > 0 {
		s++
	}
	return s
}

func TestCellSeconds(t *testing.T) {
	for _, tt := range []struct{ d, want int64 }{
		{-1, -1}, {0, 0}, {166 * 1000, 0}, {1999700 * 1000, 2}, {2 * sec, 2}, {2*sec + 400*1000, 2}, {2*sec + ms, 3},
	} {
		if got := cellSeconds(tt.d); got != tt.want {
			t.Errorf("cellSeconds(%d) = %d, want %d", tt.d, got, tt.want)
		}
	}
}

type cellStep struct {
	cmd  string
	at   int64 // offset from t0 of the injected clock
	cost int64
	want [5]int64
}

// runCell replays CL.THROTTLE vectors against one key, starting empty: a
// missing key reads as tat = now.
func runCell(t *testing.T, l Limit, steps []cellStep) {
	t.Helper()
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	s := newBucket(l, t0+steps[0].at)
	for i, st := range steps {
		d, _ := l.Apply(t0+st.at, s, st.cost, 0)
		if got := cellReply(d); got != st.want {
			t.Errorf("step %d: %s at %d ms = %v, want %v (%+v)", i+1, st.cmd, st.at/ms, got, st.want, d)
		}
	}
}

// TestGCRACellItRateLimits is redis-cell's it_rate_limits
// (anchor-semantics.md C1): limit 5 (B=4), 1 per 1 s.
func TestGCRACellItRateLimits(t *testing.T) {
	runCell(t, Limit{Algorithm: GCRA, Burst: 4, Count: 1, Period: sec}, []cellStep{
		{"CL.THROTTLE foo 4 1 1 6", 0, 6, [5]int64{1, 5, 5, -1, 0}},
		{"CL.THROTTLE foo 4 1 1 1", 0, 1, [5]int64{0, 5, 4, -1, 1}},
		{"CL.THROTTLE foo 4 1 1 1", 0, 1, [5]int64{0, 5, 3, -1, 2}},
		{"CL.THROTTLE foo 4 1 1 1", 0, 1, [5]int64{0, 5, 2, -1, 3}},
		{"CL.THROTTLE foo 4 1 1 1", 0, 1, [5]int64{0, 5, 1, -1, 4}},
		{"CL.THROTTLE foo 4 1 1 1", 0, 1, [5]int64{0, 5, 0, -1, 5}},
		{"CL.THROTTLE foo 4 1 1 1", 0, 1, [5]int64{1, 5, 0, 1, 5}},
		{"CL.THROTTLE foo 4 1 1 1", 3000 * ms, 1, [5]int64{0, 5, 2, -1, 3}},
		{"CL.THROTTLE foo 4 1 1 1", 3100 * ms, 1, [5]int64{0, 5, 1, -1, 4}}, // raw reset 3.9 s
		{"CL.THROTTLE foo 4 1 1 1", 4000 * ms, 1, [5]int64{0, 5, 1, -1, 4}},
		{"CL.THROTTLE foo 4 1 1 1", 8000 * ms, 1, [5]int64{0, 5, 4, -1, 1}},
		{"CL.THROTTLE foo 4 1 1 1", 9500 * ms, 1, [5]int64{0, 5, 4, -1, 1}},
		{"CL.THROTTLE foo 4 1 1 0", 9500 * ms, 0, [5]int64{0, 5, 4, -1, 1}}, // peek
		{"CL.THROTTLE foo 4 1 1 2", 9500 * ms, 2, [5]int64{0, 5, 2, -1, 3}},
		{"CL.THROTTLE foo 4 1 1 5", 9500 * ms, 5, [5]int64{1, 5, 2, 3, 3}},
	})
}

// TestGCRACellReadme is redis-cell's README example (C2).
func TestGCRACellReadme(t *testing.T) {
	runCell(t, Limit{Algorithm: GCRA, Burst: 15, Count: 30, Period: 60 * sec}, []cellStep{
		{"CL.THROTTLE user123 15 30 60", 0, 1, [5]int64{0, 16, 15, -1, 2}},
		{"CL.THROTTLE user123 15 30 60", 0, 1, [5]int64{0, 16, 14, -1, 4}},
		{"CL.THROTTLE user123 15 30 60", 1000 * ms, 1, [5]int64{0, 16, 13, -1, 5}},
		{"CL.THROTTLE user123 15 30 60", 2000 * ms, 1, [5]int64{0, 16, 13, -1, 6}},
	})
}

// TestGCRACellE2E is redis-cell's tests/e2e.rs it_works (C3), with both
// timings of step 2.
func TestGCRACellE2E(t *testing.T) {
	l := Limit{Algorithm: GCRA, Burst: 0, Count: 1, Period: 2 * sec}
	for _, second := range []int64{0, ms} {
		runCell(t, l, []cellStep{
			{"CL.THROTTLE user123 0 1 2 1", 0, 1, [5]int64{0, 1, 0, -1, 2}},
			{"CL.THROTTLE user123 0 1 2 1", second, 1, [5]int64{1, 1, 0, 2, 2}},
			{"CL.THROTTLE user123 0 1 2 1", 1999 * ms, 1, [5]int64{1, 1, 0, 1, 1}},
			{"CL.THROTTLE user123 0 1 2 1", 2000 * ms, 1, [5]int64{0, 1, 0, -1, 2}},
		})
	}
}

// TestGCRAInterval: redis-cell's rate unit vectors (src/cell/mod.rs).
func TestGCRAInterval(t *testing.T) {
	for _, tt := range []struct {
		count, period, want int64
	}{
		{24, 24 * hour, hour},        // per_day(24)
		{6, hour, 10 * minute},       // per_hour(6)
		{6, minute, 10 * sec},        // per_minute(6)
		{6, 2 * minute, 20 * sec},    // per_period(6, 2 min)
		{5, sec, 200 * ms},           // per_second(5)
		{3, sec, 333_333_333},        // truncated, as redis-cell
		{6000, sec, 166_666},         // issue #50's rate
		{1_000_000_000, sec, 1 * ns}, // the fastest rate
	} {
		l := Limit{Algorithm: GCRA, Count: tt.count, Period: tt.period}
		if err := l.Validate(); err != nil {
			t.Errorf("Validate(%d per %d) = %v", tt.count, tt.period, err)
		}
		if got := l.interval(); got != tt.want {
			t.Errorf("interval(%d per %d ns) = %d, want %d", tt.count, tt.period, got, tt.want)
		}
	}
	for _, l := range []Limit{
		{Algorithm: GCRA, Count: 0, Period: sec},               // per_period(0, ...)
		{Algorithm: GCRA, Count: 1, Period: 0},                 // per_period(..., 0)
		{Algorithm: GCRA, Count: 1_000_000_001, Period: sec},   // T truncates to 0
		{Algorithm: GCRA, Burst: 3, Count: 2001, Period: 2000}, // T truncates to 0
	} {
		if err := l.Validate(); !errors.Is(err, ErrZeroRate) {
			t.Errorf("Validate(%+v) = %v, want ErrZeroRate", l, err)
		}
	}
}

func TestGCRANative(t *testing.T) {
	l := Limit{Algorithm: GCRA, Burst: 2, Count: 1, Period: sec} // T 1 s, tau 3 s
	s := newBucket(l, t0)
	run(t, l, s, []step{
		{t0, 1, 0, allow(2, sec), true},
		{t0, 2, 0, allow(0, 3*sec), true},
		{t0, 1, 0, deny(0, sec, 3*sec), false},
		{t0 + 500*ms, 0, 0, allow(0, 2500*ms), false}, // a peek writes nothing (redis-cell would)
		{t0 + sec, 1, 0, allow(0, 3*sec), true},
		{t0 - sec, 1, 0, deny(0, 3*sec, 5*sec), false}, // backwards: more debt, not less
		{t0 + 2500*ms, 4, 0, deny(1, -1, 1500*ms), false},
		{t0 + 4*sec, 3, 0, allow(0, 3*sec), true}, // cost = Burst+1 on a full bucket
		{t0 + 7*sec, 0, 0, allow(3, 0), false},
	})
	if *s != (State{t0 + 7*sec, 0, 0}) {
		t.Errorf("state = %v", *s)
	}
}

// TestGCRARemainingNeverAboveLimit: issue #50 of redis-cell, where T is not
// a whole number of microseconds: CL.THROTTLE a 6000 6000 1 replied
// remaining 6024 > limit 6001. Exact nanoseconds cannot.
func TestGCRARemainingNeverAboveLimit(t *testing.T) {
	l := Limit{Algorithm: GCRA, Burst: 6000, Count: 6000, Period: sec} // T 166666 ns
	s := newBucket(l, t0)
	run(t, l, s, []step{
		{t0, 0, 0, allow(6001, 0), false},
		{t0, 1, 0, allow(6000, 166_666), true},
		{t0 + 166_666, 1, 0, allow(6000, 166_666), true},
	})
}

// TestGCRAParametersChange: the parameters are not part of the bucket, so a
// stored tat is read under whatever the request brings (a peek after the
// burst was lowered can be denied, as in redis-cell).
func TestGCRAParametersChange(t *testing.T) {
	wide := Limit{Algorithm: GCRA, Burst: 9, Count: 1, Period: sec}
	s := newBucket(wide, t0)
	run(t, wide, s, []step{{t0, 6, 0, allow(4, 6*sec), true}})
	narrow := Limit{Algorithm: GCRA, Burst: 1, Count: 1, Period: sec}
	run(t, narrow, s, []step{
		{t0, 0, 0, deny(0, 4*sec, 6*sec), false},
		{t0 + 5*sec, 1, 0, allow(0, 2*sec), true},
	})
}

// TestGCRAExtremes: values near math.MaxInt64 saturate, and Validate rejects
// a tolerance that does not fit in an int64.
func TestGCRAExtremes(t *testing.T) {
	// T 1 ns, a tolerance of exactly MaxDuration.
	l := Limit{Algorithm: GCRA, Burst: MaxDuration - 1, Count: 1, Period: 1}
	s := newBucket(l, MaxTime)
	end := MaxTime + MaxDuration
	run(t, l, s, []step{
		{MaxTime, MaxDuration + 1, 0, deny(MaxDuration, -1, 0), false}, // more than the limit: never
		{MaxTime, MaxDuration, 0, allow(0, MaxDuration), true},         // tat = MaxTime+MaxDuration
		{MaxTime, 1, 0, deny(0, 1, MaxDuration), false},
		{end, 1, 0, allow(MaxDuration-1, 1), true},
		// Past MaxTime: a tat past MaxInt64 is denied, never stored saturated.
		{maxI64, 1, 0, deny(MaxDuration, -1, 0), false},
		// tat-now does not fit an int64: saturated at MaxInt64, still denied.
		{minI64, 1, 0, deny(0, maxI64-MaxDuration+1, maxI64), false},
	})

	big := Limit{Algorithm: GCRA, Burst: 0, Count: 1, Period: MaxDuration}
	s = newBucket(big, 0)
	run(t, big, s, []step{
		{0, 1, 0, allow(0, MaxDuration), true},
		{1, 1, 0, deny(0, MaxDuration-1, MaxDuration-1), false},
		{0, maxI64, 0, deny(0, -1, MaxDuration), false},
	})

	for _, l := range []Limit{
		{Algorithm: GCRA, Burst: maxI64, Count: 1, Period: 1},
		{Algorithm: GCRA, Burst: MaxDuration, Count: 1, Period: 1},
		{Algorithm: GCRA, Burst: 1 << 62, Count: 1, Period: 2},
		{Algorithm: GCRA, Burst: 1, Count: 1, Period: MaxDuration},
		// Limits that admitted until their tat reached the int64 range and
		// then denied forever, with Remaining > 0 and RetryAfter -1:
		{Algorithm: GCRA, Burst: 900, Count: 1, Period: 10_000_000_000_000_000},
		{Algorithm: GCRA, Burst: 9_223_372_035, Count: 1, Period: sec},
	} {
		if err := l.Validate(); !errors.Is(err, ErrOverflow) {
			t.Errorf("Validate(%+v) = %v, want ErrOverflow", l, err)
		}
	}
}

func TestGCRARefundAndDrained(t *testing.T) {
	l := Limit{Algorithm: GCRA, Burst: 2, Count: 1, Period: sec}
	var s State
	l.Drained(t0, &s, nil)
	if s != (State{t0 + 3*sec, 0, 0}) {
		t.Fatalf("Drained = %v", s)
	}
	run(t, l, &s, []step{{t0, 1, 0, deny(0, sec, 3*sec), false}})

	d, changed := l.Refund(t0, &s, 1, 0)
	want := allow(1, 2*sec)
	want.Limit = 3
	if d != want || !changed {
		t.Errorf("Refund 1 = %+v, %v", d, changed)
	}
	d, changed = l.Refund(t0, &s, maxI64, 0) // capped at fresh: tat = now
	if d.Remaining != 3 || d.ResetAfter != 0 || !changed || s[gcraTAT] != t0 {
		t.Errorf("Refund MaxInt64 = %+v, %v, state %v", d, changed, s)
	}
	if _, changed = l.Refund(t0, &s, 1, 0); changed {
		t.Errorf("Refund on a fresh bucket changed it to %v", s)
	}
}

// TestGCRACellRefund is redis-cell's negative quantity, decided like a
// request: "CL.THROTTLE rk 10 1 60 10" leaves 1; "CL.THROTTLE rk 0 1 60 -1"
// (tolerance 60 s, the tat 600 s ahead) would still leave the bucket 540 s
// past its tolerance, so it is limited and changes nothing, twice; a
// "CL.THROTTLE rk 10 1 60 0" then still finds 1 left, as redis-cell does.
func TestGCRACellRefund(t *testing.T) {
	wide := Limit{Algorithm: GCRA, Burst: 10, Count: 1, Period: minute}
	narrow := Limit{Algorithm: GCRA, Burst: 0, Count: 1, Period: minute}
	for _, l := range []*Limit{&wide, &narrow} {
		if err := l.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	s := newBucket(wide, t0)
	if d, _ := wide.Apply(t0, s, 10, 0); !d.Allowed || d.Remaining != 1 {
		t.Fatalf("take 10: %+v", d)
	}
	for i := range 2 {
		d, changed := narrow.Refund(t0, s, 1, Cell)
		want := Decision{Remaining: 0, Limit: 1, RetryAfter: 480 * sec, ResetAfter: 600 * sec}
		if d != want || changed || s[gcraTAT] != t0+600*sec {
			t.Fatalf("refund %d under the narrow limit: %+v, changed %v, tat t0%+d; want %+v, unchanged", i, d, changed, s[gcraTAT]-t0, want)
		}
	}
	if d, _ := wide.Apply(t0, s, 0, 0); d.Remaining != 1 {
		t.Errorf("after two limited refunds: %+v, want remaining 1", d)
	}
	// Allowed, the tat moves back by amount*T, but never before now.
	want := allow(4, 420*sec)
	want.Limit = 11
	d, changed := wide.Refund(t0, s, 3, Cell)
	if d != want || !changed || s[gcraTAT] != t0+420*sec {
		t.Errorf("refund 3: %+v, changed %v, tat t0%+d; want %+v", d, changed, s[gcraTAT]-t0, want)
	}
	want = allow(11, 0)
	want.Limit = 11
	d, changed = wide.Refund(t0, s, maxI64, Cell)
	if d != want || !changed || s[gcraTAT] != t0 {
		t.Errorf("refund MaxInt64: %+v, changed %v, tat t0%+d; want %+v at now", d, changed, s[gcraTAT]-t0, want)
	}
}
