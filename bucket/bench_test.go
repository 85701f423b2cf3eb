package bucket

import "testing"

// BenchmarkApply measures one decision per algorithm, with traffic that
// mixes allowed and denied requests (one request every 50 µs against limits
// of 5 or 10 per second). The baseline sub-benchmark is a continuous float64
// token bucket, the arithmetic of golang.org/x/time/rate's advance and
// reserveN without its mutex, for scale.
func BenchmarkApply(b *testing.B) {
	for _, l := range testLimits {
		if err := l.Validate(); err != nil { // prepares its divisions
			b.Fatal(err)
		}
		b.Run(l.Algorithm.String(), func(b *testing.B) {
			b.ReportAllocs()
			s := newBucket(l, t0)
			now := t0
			for b.Loop() {
				now += 50_000
				l.Apply(now, s, 1, 0)
			}
		})
	}
	b.Run("token_bucket_smyte_strict", func(b *testing.B) {
		b.ReportAllocs()
		l := testLimits[0]
		s := newBucket(l, t0)
		now := t0
		for b.Loop() {
			now += 50_000
			l.Apply(now, s, 1, Smyte|Strict)
		}
	})
	b.Run("baseline_float_token_bucket", func(b *testing.B) {
		b.ReportAllocs()
		fb := floatBucket{limit: 10, burst: 10, tokens: 10, last: t0}
		now := t0
		for b.Loop() {
			now += 50_000
			fb.allowN(now, 1)
		}
	})
}

// floatBucket is the baseline: x/time/rate's continuous refill in float64.
type floatBucket struct {
	limit, burst, tokens float64 // tokens per second, capacity, current
	last                 int64   // ns
}

func (fb *floatBucket) allowN(now int64, n float64) bool {
	last := min(fb.last, now)
	tokens := min(fb.tokens+float64(now-last)/1e9*fb.limit, fb.burst)
	fb.last = now
	if tokens < n {
		fb.tokens = tokens
		return false
	}
	fb.tokens = tokens - n
	return true
}

// BenchmarkDecideExt measures one decision of an extended algorithm, with
// the traffic of BenchmarkApply (one request every 50 µs against 10 or 1000
// per second), beside token_bucket's Decide for scale. window_counters_60
// sums up to 61 counters per decision; sliding_log searches its log for
// Remaining.
func BenchmarkDecideExt(b *testing.B) {
	tb := testLimits[0]
	if err := tb.Validate(); err != nil {
		b.Fatal(err)
	}
	b.Run("token_bucket", func(b *testing.B) {
		b.ReportAllocs()
		s := newBucket(tb, t0)
		var d Decision
		now := t0
		for b.Loop() {
			now += 50_000
			tb.Decide(now, s, nil, 1, 0, &d)
		}
	})
	for _, c := range []struct {
		name string
		l    Limit
	}{
		{"sliding_log_10", Limit{Algorithm: SlidingLog, Max: 10, Window: sec}},
		{"sliding_log_1000", Limit{Algorithm: SlidingLog, Max: 1000, Window: sec}},
		{"window_counters_60", Limit{Algorithm: WindowCounters, Max: 10, Window: sec, Counters: 60}},
	} {
		l := c.l
		if err := l.Validate(); err != nil { // prepares its divisions
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			e := newExtBucket(l, t0)
			var d Decision
			now := t0
			for b.Loop() {
				now += 50_000
				l.Decide(now, &e.s, e.ext, 1, 0, &d)
			}
		})
	}
	b.Run("concurrency_16", func(b *testing.B) {
		b.ReportAllocs()
		l := Limit{Algorithm: Concurrency, Max: 16, Lease: sec}
		if err := l.Validate(); err != nil {
			b.Fatal(err)
		}
		e := newExtBucket(l, t0)
		var d Decision
		now := t0
		for b.Loop() {
			now += 50_000
			if lease, _ := l.AcquireLease(now, &e.s, e.ext, now, &d); lease != 0 {
				l.ReleaseLease(now, &e.s, e.ext, lease, &d)
			}
		}
	})
}

// BenchmarkValidate: the server validates each request's limit.
func BenchmarkValidate(b *testing.B) {
	for _, l := range testLimits {
		if err := l.Validate(); err != nil { // prepares its divisions
			b.Fatal(err)
		}
		b.Run(l.Algorithm.String(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := l.Validate(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
