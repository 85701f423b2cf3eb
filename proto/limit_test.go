package proto

import (
	"errors"
	"testing"
	"time"
)

func TestParseLimit(t *testing.T) {
	for _, tc := range []struct {
		spec      string
		want      Limit
		canonical string
	}{
		{"token_bucket:max=10,refill_time=1h,refill_amount=1", TokenBucketLimit(10, time.Hour, 1),
			"token_bucket:max=10,refill_time=1h0m0s,refill_amount=1"},
		{"token_bucket:refill_time=1s,max=5", TokenBucketLimit(5, time.Second, 5),
			"token_bucket:max=5,refill_time=1s,refill_amount=5"},
		{"gcra:burst=4,count=1,period=1s", GCRALimit(4, 1, time.Second), "gcra:burst=4,count=1,period=1s"},
		{"gcra:period=1500000000,count=+3,burst=0", GCRALimit(0, 3, 1500*time.Millisecond), "gcra:burst=0,count=3,period=1.5s"},
		{"fixed_window:limit=100,window=1m", FixedWindowLimit(100, time.Minute), "fixed_window:limit=100,window=1m0s"},
		{"sliding_window:window=250ms,limit=7", SlidingWindowLimit(7, 250*time.Millisecond), "sliding_window:limit=7,window=250ms"},
		{"pacer:rate=4,period=1s,max_delay=2s", PacerLimit(4, time.Second, 2*time.Second), "pacer:rate=4,period=1s,max_delay=2s"},
		{"pacer:rate=0,period=0,max_delay=1ns", PacerLimit(0, 0, 1), "pacer:rate=0,period=0s,max_delay=1ns"},
		{"pacer:rate=9223372036854775807,period=2562047h47m16.854775807s,max_delay=10us",
			PacerLimit(1<<63-1, 1<<63-1, 10*time.Microsecond),
			"pacer:rate=9223372036854775807,period=2562047h47m16.854775807s,max_delay=10µs"},
		{"sliding_log:limit=100,window=1m", SlidingLogLimit(100, time.Minute), "sliding_log:limit=100,window=1m0s"},
		{"window_counters:limit=100,window=1h", WindowCountersLimit(100, time.Hour, DefaultCounters, false),
			"window_counters:limit=100,window=1h0m0s,counters=60"},
		{"window_counters:count_denied=true,window=1h,counters=+12,limit=100", WindowCountersLimit(100, time.Hour, 12, true),
			"window_counters:limit=100,window=1h0m0s,counters=12,count_denied=true"},
		{"window_counters:limit=1,window=1s,count_denied=false", WindowCountersLimit(1, time.Second, 60, false),
			"window_counters:limit=1,window=1s,counters=60"},
		{"window_counters:limit=1,window=1s,counters=0,count_denied=true", Limit{Algorithm: WindowCounters, P: [3]int64{1, 1e9, CountDeniedBit}},
			"window_counters:limit=1,window=1s,counters=0,count_denied=true"},
		{"window_counters:limit=1,window=1s,counters=255", WindowCountersLimit(1, time.Second, 255, false),
			"window_counters:limit=1,window=1s,counters=255"},
		{"concurrency:lease=30s,limit=10", ConcurrencyLimit(10, 30*time.Second), "concurrency:limit=10,lease=30s"},
		{"concurrency:limit=0,lease=0", ConcurrencyLimit(0, 0), "concurrency:limit=0,lease=0s"},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			got, err := ParseLimit(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("ParseLimit = %+v, want %+v", got, tc.want)
			}
			if s := got.String(); s != tc.canonical {
				t.Fatalf("String() = %q, want %q", s, tc.canonical)
			}
			if again, err := ParseLimit(got.String()); err != nil || again != got {
				t.Fatalf("ParseLimit(String()) = %+v, %v", again, err)
			}
		})
	}
}

func TestParseLimitErrors(t *testing.T) {
	for _, tc := range []struct{ spec, want string }{
		{"gcra:burst=x,count=1,period=1s", `proto: limit "gcra:burst=x,count=1,period=1s": burst: invalid integer "x"`},
		{"", `proto: limit "": not a limit spec (ALGORITHM:name=value,...) nor a limit's name`},
		{"leaky:rate=1", `proto: limit "leaky:rate=1": unknown algorithm "leaky"`},
		{"GCRA:burst=1,count=1,period=1s", `proto: limit "GCRA:burst=1,count=1,period=1s": unknown algorithm "GCRA"`},
		{"gcra", `proto: limit "gcra": missing parameter "burst"`},
		{"gcra:", `proto: limit "gcra:": empty parameter`},
		{"gcra:burst=1,,count=1", `proto: limit "gcra:burst=1,,count=1": empty parameter`},
		{"gcra:burst=1,count=1", `proto: limit "gcra:burst=1,count=1": missing parameter "period"`},
		{"gcra:burst=1,count=1,period=1s,", `proto: limit "gcra:burst=1,count=1,period=1s,": empty parameter`},
		{"gcra:burst=1,count=1,period=1s,rate=2", `proto: limit "gcra:burst=1,count=1,period=1s,rate=2": unknown parameter "rate" for gcra (want burst, count, period)`},
		{"gcra:burst=1,burst=2,count=1,period=1s", `proto: limit "gcra:burst=1,burst=2,count=1,period=1s": duplicate parameter "burst"`},
		{"gcra:burst,count=1,period=1s", `proto: limit "gcra:burst,count=1,period=1s": burst: missing "=value"`},
		{"gcra:burst=-1,count=1,period=1s", `proto: limit "gcra:burst=-1,count=1,period=1s": burst: negative value -1`},
		{"gcra:burst=1,count=1,period=-1s", `proto: limit "gcra:burst=1,count=1,period=-1s": period: negative value -1s`},
		{"gcra:burst=1,count=1,period=1 s", `proto: limit "gcra:burst=1,count=1,period=1 s": period: invalid duration "1 s"`},
		{"gcra:burst=1,count=1s,period=1s", `proto: limit "gcra:burst=1,count=1s,period=1s": count: invalid integer "1s"`},
		{"gcra:burst=99999999999999999999,count=1,period=1s", `proto: limit "gcra:burst=99999999999999999999,count=1,period=1s": burst: integer out of range "99999999999999999999"`},
		{"gcra:burst=1,count=1,period=99999999999999999999", `proto: limit "gcra:burst=1,count=1,period=99999999999999999999": period: integer out of range "99999999999999999999"`},
		{"gcra:burst=1,count=1,period=3000000h", `proto: limit "gcra:burst=1,count=1,period=3000000h": period: invalid duration "3000000h"`},
		{"fixed_window:limit=1,window=1s,p2=0", `proto: limit "fixed_window:limit=1,window=1s,p2=0": unknown parameter "p2" for fixed_window (want limit, window)`},
		{"token_bucket:max=1, refill_time=1s", `proto: limit "token_bucket:max=1, refill_time=1s": unknown parameter " refill_time" for token_bucket (want max, refill_time, refill_amount)`},
		{"sliding_log:limit=1", `proto: limit "sliding_log:limit=1": missing parameter "window"`},
		{"sliding_log:limit=1,window=1s,counters=2", `proto: limit "sliding_log:limit=1,window=1s,counters=2": unknown parameter "counters" for sliding_log (want limit, window)`},
		{"window_counters:limit=1,window=1s,counters=256", `proto: limit "window_counters:limit=1,window=1s,counters=256": counters: value 256 out of range, want 0..255`},
		{"window_counters:limit=1,window=1s,counters=-1", `proto: limit "window_counters:limit=1,window=1s,counters=-1": counters: negative value -1`},
		{"window_counters:limit=1,window=1s,counters=1s", `proto: limit "window_counters:limit=1,window=1s,counters=1s": counters: invalid integer "1s"`},
		{"window_counters:limit=1,window=1s,count_denied=1", `proto: limit "window_counters:limit=1,window=1s,count_denied=1": count_denied: invalid boolean "1", want true or false`},
		{"window_counters:limit=1,window=1s,count_denied=True", `proto: limit "window_counters:limit=1,window=1s,count_denied=True": count_denied: invalid boolean "True", want true or false`},
		{"window_counters:limit=1,window=1s,count_denied", `proto: limit "window_counters:limit=1,window=1s,count_denied": count_denied: missing "=value"`},
		{"window_counters:limit=1,window=1s,counters=1,counters=2", `proto: limit "window_counters:limit=1,window=1s,counters=1,counters=2": duplicate parameter "counters"`},
		{"window_counters:limit=1,counters=1", `proto: limit "window_counters:limit=1,counters=1": missing parameter "window"`},
		{"window_counters:limit=1,window=1s,p2=1", `proto: limit "window_counters:limit=1,window=1s,p2=1": unknown parameter "p2" for window_counters (want limit, window, counters, count_denied)`},
		{"concurrency:limit=1", `proto: limit "concurrency:limit=1": missing parameter "lease"`},
		{"concurrency:limit=1,window=1s", `proto: limit "concurrency:limit=1,window=1s": unknown parameter "window" for concurrency (want limit, lease)`},
		{"concurrency:limit=1,lease=forever", `proto: limit "concurrency:limit=1,lease=forever": lease: invalid duration "forever"`},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			l, err := ParseLimit(tc.spec)
			if err == nil {
				t.Fatalf("ParseLimit = %+v, want an error", l)
			}
			if !errors.Is(err, ErrInvalidLimit) || StatusOf(err) != StatusInvalidLimit {
				t.Fatalf("error %v does not wrap ErrInvalidLimit", err)
			}
			if err.Error() != tc.want {
				t.Fatalf("error\n  %s\nwant\n  %s", err, tc.want)
			}
		})
	}
}

func TestLimitStringUnparseable(t *testing.T) {
	for _, tc := range []struct {
		l    Limit
		want string
	}{
		{Limit{}, "algorithm(0):p0=0,p1=0,p2=0"},
		{Limit{Algorithm: 10, P: [3]int64{1, 2, 3}}, "algorithm(10):p0=1,p1=2,p2=3"},
		{Limit{Algorithm: FixedWindow, P: [3]int64{1, 2, 3}}, "fixed_window:limit=1,window=2ns,p2=3"},
		{GCRALimit(-1, 1, -time.Second), "gcra:burst=-1,count=1,period=-1s"},
		{Limit{Algorithm: WindowCounters, P: [3]int64{1, 2, 1 << 9}}, "window_counters:limit=1,window=2ns,p2=512"},
		{Limit{Algorithm: WindowCounters, P: [3]int64{1, 2, -1}}, "window_counters:limit=1,window=2ns,p2=-1"},
		{Limit{Algorithm: SlidingLog, P: [3]int64{1, 2, 3}}, "sliding_log:limit=1,window=2ns,p2=3"},
		{Limit{Algorithm: Concurrency, P: [3]int64{1, 2, 3}}, "concurrency:limit=1,lease=2ns,p2=3"},
	} {
		if got := tc.l.String(); got != tc.want {
			t.Errorf("%+v.String() = %q, want %q", tc.l, got, tc.want)
		}
		if _, err := ParseLimit(tc.l.String()); err == nil {
			t.Errorf("ParseLimit(%q) succeeded", tc.l.String())
		}
	}
}

func TestParseAlgorithm(t *testing.T) {
	for a := TokenBucket; a <= Concurrency; a++ {
		got, err := ParseAlgorithm(a.String())
		if err != nil || got != a {
			t.Fatalf("ParseAlgorithm(%q) = %v, %v", a.String(), got, err)
		}
	}
	if _, err := ParseAlgorithm("invalid"); !errors.Is(err, ErrInvalidLimit) {
		t.Fatalf("ParseAlgorithm(invalid): %v", err)
	}
	names := map[Algorithm]string{TokenBucket: "token_bucket", GCRA: "gcra", FixedWindow: "fixed_window",
		SlidingWindow: "sliding_window", Pacer: "pacer", SlidingLog: "sliding_log", WindowCounters: "window_counters",
		Concurrency: "concurrency", Quota: "quota", 0: "invalid", 10: "algorithm(10)"}
	for a, want := range names {
		if a.String() != want {
			t.Errorf("Algorithm(%d).String() = %q, want %q", a, a.String(), want)
		}
	}
	// The version each algorithm needs.
	for a := Algorithm(0); a < 11; a++ {
		for v := uint8(1); v <= Version; v++ {
			want := a >= TokenBucket && (a <= Pacer || v >= 3 && a <= Concurrency || v >= 5 && a == Quota)
			if a.ValidIn(v) != want {
				t.Errorf("Algorithm(%d).ValidIn(%d) = %v", a, v, !want)
			}
		}
	}
}
