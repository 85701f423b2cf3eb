package bucket

import (
	"errors"
	"strings"
	"testing"
)

func TestAlgorithmString(t *testing.T) {
	for _, tt := range []struct {
		a    Algorithm
		want string
	}{
		{Invalid, "invalid"}, {TokenBucket, "token_bucket"}, {GCRA, "gcra"}, {FixedWindow, "fixed_window"},
		{SlidingWindow, "sliding_window"}, {Pacer, "pacer"}, {SlidingLog, "sliding_log"},
		{WindowCounters, "window_counters"}, {Concurrency, "concurrency"}, {Quota, "quota"}, {10, "algorithm(10)"}, {255, "algorithm(255)"},
	} {
		if got := tt.a.String(); got != tt.want {
			t.Errorf("Algorithm(%d).String() = %q, want %q", uint8(tt.a), got, tt.want)
		}
		a, err := ParseAlgorithm(tt.want)
		if valid := tt.a != Invalid && tt.a < numAlgorithms; valid != (err == nil) || (valid && a != tt.a) {
			t.Errorf("ParseAlgorithm(%q) = %v, %v", tt.want, a, err)
		}
	}
	for _, s := range []string{"", "TOKEN_BUCKET", "token-bucket", " gcra", "invalid"} {
		if a, err := ParseAlgorithm(s); !errors.Is(err, ErrUnknownAlgorithm) || a != Invalid {
			t.Errorf("ParseAlgorithm(%q) = %v, %v; want Invalid, ErrUnknownAlgorithm", s, a, err)
		}
	}
}

func TestFlagNames(t *testing.T) {
	for f, want := range map[Flags]string{0: "0", Strict: "Strict", Smyte: "Smyte", Strict | Smyte: "Strict|Smyte", Smyte | 0x80: "Smyte|0x80"} {
		if got := flagNames(f); got != want {
			t.Errorf("flagNames(%#x) = %q, want %q", uint8(f), got, want)
		}
	}
}

// TestValidate covers each range check, in Validate's order. The
// token_bucket rows match smyte/ratelimit's range checks (anchor-semantics.md
// S3 and section 1.2: max < 1, refill time < 1 ms, refill amount < 1; take
// and AT are not parameters of a Limit).
func TestValidate(t *testing.T) {
	tb := func(max, refillTime, refillAmount int64) Limit {
		return Limit{Algorithm: TokenBucket, Max: max, RefillTime: refillTime, RefillAmount: refillAmount}
	}
	for _, tt := range []struct {
		l    Limit
		err  error  // nil: valid
		text string // in the message
	}{
		{Limit{}, ErrUnknownAlgorithm, "invalid"},
		{Limit{Algorithm: 10, Max: 1}, ErrUnknownAlgorithm, "algorithm(10)"},

		{tb(10, 60*sec, 10), nil, ""},
		{tb(1, ms, 1), nil, ""},
		{tb(0, 60*sec, 1), ErrOutOfRange, "token_bucket max = 0, want >= 1"}, // rl.pget abc 0 60
		{tb(-1, 60*sec, 1), ErrOutOfRange, "max = -1"},
		{tb(10, 0, 1), ErrOutOfRange, "refill_time = 0"},
		{tb(10, ms-1, 1), ErrOutOfRange, "refill_time = 999999, want >= 1000000 ns (1 ms)"},
		{tb(10, 60*sec, 0), ErrZeroRate, "refill_amount = 0"},
		{tb(10, MaxDuration, 1), nil, ""},
		{tb(10, MaxDuration+1, 1), ErrOutOfRange, "refill_time = 2147483648000000001 ns, want <= 2147483648000000000 ns (2147483648 s)"},
		{tb(10, 60*sec, -1), ErrOutOfRange, "refill_amount = -1"},
		{tb(0, 0, 0), ErrOutOfRange, "max"}, // the first field wins
		{Limit{Algorithm: TokenBucket, Max: 1, RefillTime: ms, RefillAmount: 1, Window: sec}, ErrUnusedParameter, "token_bucket does not use window, got 1000000000"},

		{Limit{Algorithm: GCRA, Burst: 0, Count: 1, Period: 1}, nil, ""},
		{Limit{Algorithm: GCRA, Burst: MaxDuration - 1, Count: 1, Period: 1}, nil, ""},
		{Limit{Algorithm: GCRA, Burst: MaxDuration, Count: 1, Period: 1}, ErrOverflow, "gcra tolerance (burst+1)*period/count = 2147483648000000001*1 ns, want <= 2147483648000000000 ns (2147483648 s)"},
		{Limit{Algorithm: GCRA, Burst: -1, Count: 1, Period: sec}, ErrOutOfRange, "gcra burst = -1, want >= 0"},
		{Limit{Algorithm: GCRA, Count: 0, Period: sec}, ErrZeroRate, "gcra count = 0"},
		{Limit{Algorithm: GCRA, Count: -1, Period: sec}, ErrOutOfRange, "count = -1"},
		{Limit{Algorithm: GCRA, Count: 1, Period: 0}, ErrZeroRate, "period = 0"},
		{Limit{Algorithm: GCRA, Count: 1, Period: -sec}, ErrOutOfRange, "period = -1000000000"},
		{Limit{Algorithm: GCRA, Count: 10, Period: 9}, ErrZeroRate, "period/count = 9/10 truncates to 0 ns"},
		{Limit{Algorithm: GCRA, Burst: maxI64, Count: 1, Period: 1}, ErrOverflow, "burst+1"},
		{Limit{Algorithm: GCRA, Burst: 9, Count: 1, Period: maxI64 / 9}, ErrOverflow, "(burst+1)*period/count"},
		{Limit{Algorithm: GCRA, Burst: 1, Count: 1, Period: MaxDuration + 1}, ErrOutOfRange, "gcra period = 2147483648000000001 ns"},
		{Limit{Algorithm: GCRA, Count: 1, Period: 1, Max: 5}, ErrUnusedParameter, "gcra does not use max"},

		{Limit{Algorithm: FixedWindow, Max: 1, Window: ms}, nil, ""},
		{Limit{Algorithm: FixedWindow, Max: 0, Window: sec}, ErrOutOfRange, "fixed_window limit = 0"},
		{Limit{Algorithm: FixedWindow, Max: 1, Window: 0}, ErrOutOfRange, "window = 0"},
		{Limit{Algorithm: SlidingWindow, Max: 1, Window: ms - 1}, ErrOutOfRange, "sliding_window window = 999999"},
		{Limit{Algorithm: SlidingWindow, Max: 1, Window: MaxDuration}, nil, ""},
		{Limit{Algorithm: FixedWindow, Max: 1, Window: MaxDuration + 1}, ErrOutOfRange, "fixed_window window = 2147483648000000001 ns"},
		{Limit{Algorithm: SlidingWindow, Max: 1, Window: sec, RefillAmount: 1}, ErrUnusedParameter, "refill_amount"},

		{Limit{Algorithm: Pacer, Count: 1, Period: 1, MaxDelay: 0}, nil, ""},
		{Limit{Algorithm: Pacer, Count: maxI64, Period: 1, MaxDelay: MaxDuration - 1}, nil, ""},
		{Limit{Algorithm: Pacer, Count: maxI64, Period: 1, MaxDelay: maxI64}, ErrOutOfRange, "pacer max_delay = 9223372036854775807 ns"},
		{Limit{Algorithm: Pacer, Count: 1, Period: MaxDuration + 1}, ErrOutOfRange, "pacer period"},
		{Limit{Algorithm: Pacer, Count: 1, Period: sec, MaxDelay: MaxDuration}, ErrOverflow, "pacer max_delay + period/rate = 2147483648000000000 + 1000000000 ns"},
		{Limit{Algorithm: Pacer, Count: 0, Period: 1}, ErrZeroRate, "pacer rate = 0"},
		{Limit{Algorithm: Pacer, Count: 1, Period: 0}, ErrZeroRate, "pacer period = 0"},
		{Limit{Algorithm: Pacer, Count: 1, Period: 1, MaxDelay: -1}, ErrOutOfRange, "pacer max_delay = -1"},
		{Limit{Algorithm: Pacer, Count: 1, Period: 1, Burst: 1}, ErrUnusedParameter, "pacer does not use burst"},
		{Limit{Algorithm: Pacer, Count: 1, Period: 1, Lease: sec}, ErrUnusedParameter, "pacer does not use lease, got 1000000000"},
		{Limit{Algorithm: FixedWindow, Max: 1, Window: sec, CountDenied: true}, ErrUnusedParameter, "fixed_window does not use count_denied, got 1"},

		{Limit{Algorithm: SlidingLog, Max: 1, Window: ms}, nil, ""},
		{Limit{Algorithm: SlidingLog, Max: MaxLogLimit, Window: MaxDuration}, nil, ""},
		{Limit{Algorithm: SlidingLog, Max: 0, Window: sec}, ErrOutOfRange, "sliding_log limit = 0, want >= 1"},
		{Limit{Algorithm: SlidingLog, Max: MaxLogLimit + 1, Window: sec}, ErrOutOfRange, "sliding_log limit = 4097, want <= 4096 (the most requests a sliding log remembers)"},
		{Limit{Algorithm: SlidingLog, Max: 1, Window: ms - 1}, ErrOutOfRange, "sliding_log window = 999999, want >= 1000000 ns (1 ms)"},
		{Limit{Algorithm: SlidingLog, Max: 1, Window: MaxDuration + 1}, ErrOutOfRange, "sliding_log window = 2147483648000000001 ns"},
		{Limit{Algorithm: SlidingLog, Max: 1, Window: sec, Counters: 60}, ErrUnusedParameter, "sliding_log does not use counters, got 60"},
		{Limit{Algorithm: SlidingLog, Max: 1, Window: sec, CountDenied: true}, ErrUnusedParameter, "sliding_log does not use count_denied"},

		{Limit{Algorithm: WindowCounters, Max: 1, Window: ms, Counters: 1}, nil, ""},
		{Limit{Algorithm: WindowCounters, Max: maxI64, Window: sec, Counters: MaxCounters, CountDenied: true}, nil, ""},
		{Limit{Algorithm: WindowCounters, Max: 0, Window: sec, Counters: 60}, ErrOutOfRange, "window_counters limit = 0"},
		{Limit{Algorithm: WindowCounters, Max: 1, Window: 0, Counters: 60}, ErrOutOfRange, "window_counters window = 0"},
		{Limit{Algorithm: WindowCounters, Max: 1, Window: sec, Counters: 0}, ErrOutOfRange, "window_counters counters = 0, want >= 1"},
		{Limit{Algorithm: WindowCounters, Max: 1, Window: sec, Counters: MaxCounters + 1}, ErrOutOfRange, "window_counters counters = 65, want <= 64 (the most counters a bucket keeps)"},
		{Limit{Algorithm: WindowCounters, Max: 1, Window: MaxDuration / 2, Counters: 1}, nil, ""},
		{Limit{Algorithm: WindowCounters, Max: 1, Window: MaxDuration/2 + 1, Counters: 1}, ErrOverflow,
			"window_counters window + window/counters = 1073741824000000001 + 1073741824000000001 ns, want <= 2147483648000000000 ns"},
		{Limit{Algorithm: WindowCounters, Max: 1, Window: MaxDuration, Counters: MaxCounters}, ErrOverflow, "window + window/counters"},
		{Limit{Algorithm: WindowCounters, Max: 1, Window: sec, Counters: 60, Lease: sec}, ErrUnusedParameter, "window_counters does not use lease"},

		{Limit{Algorithm: Concurrency, Max: 1, Lease: ms}, nil, ""},
		{Limit{Algorithm: Concurrency, Max: MaxConcurrency, Lease: MaxDuration}, nil, ""},
		{Limit{Algorithm: Concurrency, Max: 0, Lease: sec}, ErrOutOfRange, "concurrency limit = 0, want >= 1"},
		{Limit{Algorithm: Concurrency, Max: MaxConcurrency + 1, Lease: sec}, ErrOutOfRange, "concurrency limit = 1025, want <= 1024 (the most leases a bucket holds)"},
		{Limit{Algorithm: Concurrency, Max: 1, Lease: ms - 1}, ErrOutOfRange, "concurrency lease = 999999, want >= 1000000 ns (1 ms)"},
		{Limit{Algorithm: Concurrency, Max: 1, Lease: MaxDuration + 1}, ErrOutOfRange, "concurrency lease = 2147483648000000001 ns"},
		{Limit{Algorithm: Concurrency, Max: 1, Lease: sec, Window: sec}, ErrUnusedParameter, "concurrency does not use window"},
	} {
		err := tt.l.Validate()
		if tt.err == nil {
			if err != nil {
				t.Errorf("Validate(%+v) = %v, want nil", tt.l, err)
			}
			continue
		}
		if !errors.Is(err, tt.err) || !strings.Contains(err.Error(), tt.text) {
			t.Errorf("Validate(%+v) = %v; want %v containing %q", tt.l, err, tt.err, tt.text)
		}
	}
}

func TestIdentity(t *testing.T) {
	for _, tt := range []struct {
		l    Limit
		want [3]int64
	}{
		{Limit{Algorithm: TokenBucket, Max: 2, RefillTime: 60 * sec, RefillAmount: 1}, [3]int64{2, 60 * sec, 1}},
		{Limit{Algorithm: GCRA, Burst: 4, Count: 1, Period: sec}, [3]int64{}},
		{Limit{Algorithm: FixedWindow, Max: 5, Window: sec}, [3]int64{sec, 0, 0}},
		{Limit{Algorithm: SlidingWindow, Max: 5, Window: minute}, [3]int64{minute, 0, 0}},
		{Limit{Algorithm: Pacer, Count: 5, Period: sec, MaxDelay: sec}, [3]int64{}},
		{Limit{Algorithm: SlidingLog, Max: 5, Window: minute}, [3]int64{5, minute, 0}},
		{Limit{Algorithm: WindowCounters, Max: 5, Window: hour, Counters: 60, CountDenied: true}, [3]int64{hour, 60, 0}},
		{Limit{Algorithm: Concurrency, Max: 5, Lease: minute}, [3]int64{5, 0, 0}},
		{Limit{}, [3]int64{}},
	} {
		if got := tt.l.Identity(); got != tt.want {
			t.Errorf("%v.Identity() = %v, want %v", tt.l.Algorithm, got, tt.want)
		}
	}
	// smyte: RL.REDUCE k 2 60 and RL.PREDUCE k 2 60000 share a bucket;
	// RL.REDUCE k 3 60 does not.
	a := Limit{Algorithm: TokenBucket, Max: 2, RefillTime: 60 * sec, RefillAmount: 2}
	b := Limit{Algorithm: TokenBucket, Max: 2, RefillTime: 60000 * ms, RefillAmount: 2}
	c := Limit{Algorithm: TokenBucket, Max: 3, RefillTime: 60 * sec, RefillAmount: 3}
	if a.Identity() != b.Identity() || a.Identity() == c.Identity() {
		t.Errorf("identities: %v %v %v", a.Identity(), b.Identity(), c.Identity())
	}
}

// TestInvalidAlgorithmPanics: using a Limit that did not pass Validate is a
// broken invariant of the caller.
func TestInvalidAlgorithmPanics(t *testing.T) {
	for name, f := range map[string]func(l *Limit, s *State){
		"Init":    func(l *Limit, s *State) { l.Init(0, s, nil) },
		"Drained": func(l *Limit, s *State) { l.Drained(0, s, nil) },
		"Apply":   func(l *Limit, s *State) { l.Apply(0, s, 1, 0) },
		"Refund":  func(l *Limit, s *State) { l.Refund(0, s, 1, 0) },
		"FreshAt": func(l *Limit, s *State) { l.FreshAt(s, nil) },
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.HasPrefix(r.(string), "bucket: ") {
					t.Errorf("%s on Invalid: recovered %v, want a bucket panic", name, r)
				}
			}()
			f(&Limit{}, &State{})
		}()
	}
}

// TestAllocs: the hot path allocates nothing, for every algorithm.
func TestAllocs(t *testing.T) {
	for _, l := range testLimits {
		var s State
		now := t0
		allocs := testing.AllocsPerRun(1000, func() {
			now += 7 * ms
			l.Init(now, &s, nil)
			l.Apply(now, &s, 3, Strict)
			l.Apply(now, &s, 100, Smyte) // denied
			l.Apply(now, &s, 0, 0)
			l.Refund(now, &s, 1, 0)
			l.FreshAt(&s, nil)
			l.Drained(now, &s, nil)
			l.Apply(now, &s, 1, 0)
		})
		if allocs != 0 {
			t.Errorf("%v: %v allocs per run, want 0", l.Algorithm, allocs)
		}
	}
}

// TestNegativeCost: a negative cost is treated as 0, a peek.
func TestNegativeCost(t *testing.T) {
	for _, l := range testLimits {
		s := newBucket(l, t0)
		l.Apply(t0, s, 1, 0)
		before := *s
		peek, _ := l.Apply(t0, s, 0, 0)
		d, changed := l.Apply(t0, s, -5, Smyte|Strict)
		if d != peek || changed || *s != before {
			t.Errorf("%v: Apply(cost -5) = %+v, %v, state %v; want the peek %+v, unchanged %v", l.Algorithm, d, changed, *s, peek, before)
		}
	}
}
