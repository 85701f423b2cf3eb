package bucket

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The range promises of the package documentation, over the whole range of
// every parameter: within [0, MaxTime], a bucket that reports Remaining > 0
// admits a cost of 1, a denied cost that fits the limit has a finite
// RetryAfter at which it passes, and no accepted limit wedges a bucket.

// wide returns a value in [lo, hi]: either end one time in eight each,
// otherwise log-uniform, so every order of magnitude is drawn as often.
func wide(r *rand.Rand, lo, hi int64) int64 {
	switch r.IntN(8) {
	case 0:
		return lo
	case 1:
		return hi
	}
	span := uint64(hi - lo)
	if span == 0 {
		return lo
	}
	bits := 1 + r.IntN(64)
	v := r.Uint64() >> (64 - bits)
	return lo + int64(v%(span+1))
}

// wideLimit returns a valid limit of algorithm a with parameters drawn over
// their whole accepted range.
func wideLimit(r *rand.Rand, a Algorithm) Limit {
	l := Limit{Algorithm: a}
	switch a {
	case TokenBucket:
		l.Max = wide(r, 1, maxI64)
		l.RefillTime = wide(r, ms, MaxDuration)
		l.RefillAmount = wide(r, 1, maxI64)
	case GCRA:
		l.Period = wide(r, 1, MaxDuration)
		l.Count = wide(r, 1, l.Period)
		l.Burst = wide(r, 0, MaxDuration/(l.Period/l.Count)-1)
	case FixedWindow, SlidingWindow:
		l.Max = wide(r, 1, maxI64)
		l.Window = wide(r, ms, MaxDuration)
	case Pacer:
		l.Period = wide(r, 1, MaxDuration)
		l.Count = wide(r, 1, maxI64)
		l.MaxDelay = wide(r, 0, MaxDuration-ceilDiv(l.Period, l.Count))
	case SlidingLog:
		l.Max = wide(r, 1, MaxLogLimit)
		l.Window = wide(r, ms, MaxDuration)
	case WindowCounters:
		l.Max = wide(r, 1, maxI64)
		l.Counters = wide(r, 1, MaxCounters)
		l.Window = wide(r, ms, widestCounters(l.Counters))
		l.CountDenied = r.IntN(2) == 0
	case Concurrency:
		l.Max = wide(r, 1, MaxConcurrency)
		l.Lease = wide(r, ms, MaxDuration)
	case Quota:
		l = randomQuota(r)
		l.Max = wide(r, 1, maxI64)
		l.Every = wide(r, 1, maxEvery[l.Calendar])
	}
	return l
}

// capacity is the largest cost l is sure to admit some time: the limit, or
// for the pacer 1 (a larger cost takes as many slots, and may not fit).
func capacity(l Limit) int64 {
	switch l.Algorithm {
	case GCRA:
		return l.Burst + 1
	case Pacer:
		return 1
	}
	return l.Max
}

func TestNeverWedges(t *testing.T) {
	const steps = 60
	for a := TokenBucket; a < numAlgorithms; a++ {
		if a.Extended() {
			continue // TestExtNeverWedges
		}
		for seed := range uint64(300) {
			r := newRand(seed)
			l := wideLimit(r, a)
			if err := l.Validate(); err != nil {
				t.Fatalf("seed %d: drawn limit %+v is invalid: %v", seed, l, err)
			}
			flags := []Flags{0, Strict, Smyte, Strict | Smyte}[r.IntN(4)]
			if a != TokenBucket {
				flags = 0
			}
			now := wide(r, 0, MaxTime)
			var s State
			l.Init(now, &s, nil)
			for i := range steps {
				switch r.IntN(5) {
				case 0: // same instant
				case 1:
					now = min(now+wide(r, 0, span(l)), MaxTime)
				case 2:
					now = wide(r, 0, MaxTime) // anywhere, backwards included
				case 3:
					now = max(now-wide(r, 0, span(l)), 0)
				case 4:
					now = MaxTime
				}
				cost := []int64{0, 1, 1, capacity(l), wide(r, 0, maxI64)}[r.IntN(5)]
				before := s
				d, _ := l.Apply(now, &s, cost, flags)
				check := func(what string, st State, cost int64) {
					t.Helper()
					if cost < 1 || cost > capacity(l) {
						return
					}
					c := st
					got, _ := l.Apply(now, &c, cost, 0)
					if got.Allowed {
						return
					}
					if got.RetryAfter < 1 || got.RetryAfter > math.MaxInt64-now {
						t.Fatalf("seed %d step %d %v %+v: %s at %d: cost %d denied with RetryAfter %d (state %v)",
							seed, i, a, l, what, now, cost, got.RetryAfter, st)
					}
					if later := now + got.RetryAfter; later <= MaxTime {
						c = st
						if again, _ := l.Apply(later, &c, cost, 0); !again.Allowed {
							t.Fatalf("seed %d step %d %v %+v: %s at %d: cost %d denied, RetryAfter %d, still denied then: %+v (state %v)",
								seed, i, a, l, what, now, cost, got.RetryAfter, again, st)
						}
					}
				}
				if !d.Allowed && cost <= capacity(l) && cost >= 1 && d.RetryAfter == -1 {
					t.Fatalf("seed %d step %d %v %+v: cost %d at %d denied for ever (state %v)", seed, i, a, l, cost, now, before)
				}
				check("after the request", s, 1)
				check("the request itself", before, cost)
				peek := s
				p, _ := l.Apply(now, &peek, 0, 0)
				one := s
				if d1, _ := l.Apply(now, &one, 1, 0); p.Remaining > 0 && !d1.Allowed {
					t.Fatalf("seed %d step %d %v %+v: Remaining %d at %d but a cost of 1 is denied: %+v (state %v)",
						seed, i, a, l, p.Remaining, now, d1, s)
				}
			}
		}
	}
}

// TestExtNeverWedges is TestNeverWedges for the extended algorithms: within
// [0, MaxTime], a bucket that reports Remaining > 0 admits a cost of 1 (for
// concurrency: a lease), and a denied cost that fits the limit has a finite
// RetryAfter at which it passes with no other traffic (for window_counters
// with CountDenied, no other traffic after the denied request, which
// counted).
func TestExtNeverWedges(t *testing.T) {
	const steps = 60
	for a := SlidingLog; a <= Concurrency; a++ {
		for seed := range uint64(300) {
			r := newRand(seed)
			l := wideLimit(r, a)
			if err := l.Validate(); err != nil {
				t.Fatalf("seed %d: drawn limit %+v is invalid: %v", seed, l, err)
			}
			sp := extSpan(l)
			now := wide(r, 0, MaxTime)
			b := newExtBucket(l, now)
			// request applies a request of cost at now to c: a lease for
			// concurrency, whatever the cost.
			request := func(c *extBucket, at, cost int64) (d Decision) {
				if a == Concurrency {
					l.AcquireLease(at, &c.s, c.ext, at, &d)
				} else {
					l.Decide(at, &c.s, c.ext, cost, 0, &d)
				}
				return d
			}
			for i := range steps {
				switch r.IntN(5) {
				case 0: // same instant
				case 1:
					now = min(now+wide(r, 0, sp), MaxTime)
				case 2:
					now = wide(r, 0, MaxTime) // anywhere, backwards included
				case 3:
					now = max(now-wide(r, 0, sp), 0)
				case 4:
					now = MaxTime
				}
				cost := []int64{0, 1, 1, l.Max, wide(r, 0, maxI64)}[r.IntN(5)]
				if a == Concurrency {
					cost = 1
				}
				if r.IntN(6) == 0 {
					var d Decision
					l.DecideRefund(now, &b.s, b.ext, cost, 0, &d)
					continue
				}
				before := b.clone()
				d := request(b, now, cost)
				if !d.Allowed && cost >= 1 && cost <= l.Max {
					if d.RetryAfter < 1 || d.RetryAfter > maxI64-now {
						t.Fatalf("seed %d step %d %v %+v: cost %d at %d denied with RetryAfter %d (state %v %v)",
							seed, i, a, l, cost, now, d.RetryAfter, before.s, before.ext)
					}
					if later := now + d.RetryAfter; later <= MaxTime {
						if again := request(b.clone(), later, cost); !again.Allowed {
							t.Fatalf("seed %d step %d %v %+v: cost %d at %d denied, RetryAfter %d, still denied then: %+v (state %v %v)",
								seed, i, a, l, cost, now, d.RetryAfter, again, b.s, b.ext)
						}
					}
				}
				var p Decision
				l.Peek(now, &b.s, b.ext, &p)
				if one := request(b.clone(), now, 1); p.Remaining > 0 && !one.Allowed {
					t.Fatalf("seed %d step %d %v %+v: Remaining %d at %d but a cost of 1 is denied: %+v (state %v %v)",
						seed, i, a, l, p.Remaining, now, one, b.s, b.ext)
				}
				checkExtSum(t, b)
			}
		}
	}
}

// TestMaxTime: the exact ranges fit the int64 range together, and MaxTime
// is the documented instant.
func TestMaxTime(t *testing.T) {
	if MaxTime > math.MaxInt64-MaxDuration {
		t.Fatalf("MaxTime %d + MaxDuration %d overflows int64", MaxTime, MaxDuration)
	}
	if !ValidTime(0) || !ValidTime(MaxTime) || ValidTime(-1) || ValidTime(MaxTime+1) {
		t.Errorf("ValidTime disagrees with [0, MaxTime]")
	}
}
