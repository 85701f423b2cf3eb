package bucket

import (
	"math/big"
	"math/rand/v2"
	"testing"
)

// Property and brute-force model tests. Every random test uses fixed seeds
// and logs them, so a failure replays with the same numbers.

const seeds = 40

func newRand(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, 0x5111ce))
}

// randomLimit returns a small valid limit of algorithm a.
func randomLimit(r *rand.Rand, a Algorithm) Limit {
	l := Limit{Algorithm: a}
	switch a {
	case TokenBucket:
		l.Max = 1 + r.Int64N(20)
		l.RefillTime = ms * (1 + r.Int64N(50))
		l.RefillAmount = 1 + r.Int64N(l.Max)
	case GCRA:
		l.Burst = r.Int64N(10)
		l.Count = 1 + r.Int64N(5)
		l.Period = ms * (1 + r.Int64N(100))
	case FixedWindow, SlidingWindow:
		l.Max = 1 + r.Int64N(20)
		l.Window = ms * (1 + r.Int64N(50))
	case Pacer:
		l.Count = 1 + r.Int64N(7)
		l.Period = ms*(1+r.Int64N(100)) + r.Int64N(1000)
		l.MaxDelay = r.Int64N(4 * l.Period)
	case Quota:
		l = randomQuota(r)
	}
	return l
}

// span is the natural time scale of l: its refill step, interval or window.
func span(l Limit) int64 {
	switch l.Algorithm {
	case TokenBucket:
		return l.RefillTime
	case FixedWindow, SlidingWindow:
		return l.Window
	case Quota:
		return l.Every * 24 * 3600 * sec * [...]int64{CalDay: 1, CalWeek: 7, CalMonth: 31, CalYear: 366}[l.Calendar]
	}
	return l.Period
}

// traffic applies n random requests to a new bucket of l, stepping time
// forward by up to 2 spans (and, if backwards, sometimes back by up to one),
// and returns the state, the requests, the creation time and the latest time
// seen.
type request struct{ at, cost, took, slot int64 }

func traffic(r *rand.Rand, l Limit, f Flags, n int, backwards bool) (s State, reqs []request, start, latest int64) {
	start = t0 + r.Int64N(span(l))
	l.Init(start, &s, nil)
	now, latest := start, start
	for range n {
		now += r.Int64N(2 * span(l) / max(1, l.Count))
		if backwards && r.IntN(4) == 0 {
			now -= r.Int64N(span(l))
		}
		latest = max(latest, now)
		cost := r.Int64N(wantLimit(l) + 2)
		d, _ := l.Apply(now, &s, cost, f)
		req := request{at: now, cost: cost, slot: now + d.Delay}
		if d.Allowed {
			req.took = cost
		}
		reqs = append(reqs, req)
	}
	return s, reqs, start, latest
}

// TestTokenBucketAdmitsAtMostRefills: over any interval [t_i, t_j] a token
// bucket admits no more than Max + (refills in the interval)*RefillAmount,
// and since its creation no more than Max + floor(elapsed/RefillTime)*RefillAmount,
// even with time going backwards (except Strict|Smyte, which reproduces
// smyte's backwards clock).
func TestTokenBucketAdmitsAtMostRefills(t *testing.T) {
	for seed := uint64(1); seed <= seeds; seed++ {
		r := newRand(seed)
		l := randomLimit(r, TokenBucket)
		for _, f := range []Flags{0, Strict, Smyte, Strict | Smyte} {
			for _, backwards := range []bool{false, true} {
				if backwards && f == Strict|Smyte {
					continue
				}
				_, reqs, start, _ := traffic(r, l, f, 200, backwards)
				latest, total := start, int64(0)
				for j, rj := range reqs {
					latest = max(latest, rj.at)
					total += rj.took
					if bound := l.Max + (latest-start)/l.RefillTime*l.RefillAmount; total > bound {
						t.Fatalf("seed %d %+v %s backwards=%v: %d admitted by t0%+d, bound %d", seed, l, flagNames(f), backwards, total, rj.at-t0, bound)
					}
					if backwards {
						continue
					}
					sum := int64(0)
					for i := j; i >= 0; i-- {
						sum += reqs[i].took
						// At most floor(L/RefillTime)+1 refill steps fall in (t_i, t_j].
						if bound := l.Max + ((rj.at-reqs[i].at)/l.RefillTime+1)*l.RefillAmount; sum > bound {
							t.Fatalf("seed %d %+v %s: %d admitted in [t0%+d, t0%+d], bound %d", seed, l, flagNames(f), sum, reqs[i].at-t0, rj.at-t0, bound)
						}
					}
				}
			}
		}
	}
	t.Logf("seeds 1..%d", seeds)
}

// TestGCRAAdmitsAtMostBurst: over any interval [t_i, t_j] gcra admits no
// more than Burst+1 + floor((t_j-t_i)/T), and time going backwards never
// adds to that.
func TestGCRAAdmitsAtMostBurst(t *testing.T) {
	for seed := uint64(1); seed <= seeds; seed++ {
		r := newRand(seed)
		l := randomLimit(r, GCRA)
		T := l.interval()
		for _, backwards := range []bool{false, true} {
			_, reqs, start, _ := traffic(r, l, 0, 200, backwards)
			latest, total := start, int64(0)
			for j, rj := range reqs {
				latest = max(latest, rj.at)
				total += rj.took
				if bound := l.Burst + 1 + (latest-start)/T; total > bound {
					t.Fatalf("seed %d %+v backwards=%v: %d admitted by t0%+d, bound %d", seed, l, backwards, total, rj.at-t0, bound)
				}
				if backwards {
					continue
				}
				sum := int64(0)
				for i := j; i >= 0; i-- {
					sum += reqs[i].took
					if bound := l.Burst + 1 + (rj.at-reqs[i].at)/T; sum > bound {
						t.Fatalf("seed %d %+v: %d admitted in [t0%+d, t0%+d], bound %d", seed, l, sum, reqs[i].at-t0, rj.at-t0, bound)
					}
				}
			}
		}
	}
	t.Logf("seeds 1..%d", seeds)
}

// TestPacerSpacing: a pacer never schedules two events closer than 1/rate
// (an allowed request of cost n takes n slots), never asks for a delay above
// MaxDelay, and never schedules before the request.
func TestPacerSpacing(t *testing.T) {
	for seed := uint64(1); seed <= seeds; seed++ {
		r := newRand(seed)
		l := randomLimit(r, Pacer)
		for _, backwards := range []bool{false, true} {
			_, reqs, _, _ := traffic(r, l, 0, 300, backwards)
			var prev *request
			for i := range reqs {
				q := &reqs[i]
				if q.took == 0 {
					continue
				}
				if q.slot < q.at || q.slot-q.at > l.MaxDelay {
					t.Fatalf("seed %d %+v: request at t0%+d given slot t0%+d", seed, l, q.at-t0, q.slot-t0)
				}
				// slot gap >= cost/rate  <=>  gap*Count >= cost*Period
				if prev != nil && (q.slot-prev.slot)*l.Count < prev.took*l.Period {
					t.Fatalf("seed %d %+v: slots t0%+d (cost %d) and t0%+d closer than 1/rate", seed, l, prev.slot-t0, prev.took, q.slot-t0)
				}
				prev = q
			}
		}
	}
	t.Logf("seeds 1..%d", seeds)
}

// slidingModel decides a sliding_window request with exact rationals,
// independently of the package's integer arithmetic.
func slidingModel(l Limit, s State, now, cost int64) bool {
	start := now - ((now%l.Window)+l.Window)%l.Window
	prev, curr, elapsed := int64(0), int64(0), now-start
	switch {
	case s[winStart] >= start:
		start, prev, curr, elapsed = s[winStart], s[swPrev], s[swCurr], max(now-s[winStart], 0)
	case start-s[winStart] == l.Window:
		prev = s[swCurr]
	}
	est := big.NewRat(prev*(l.Window-elapsed), l.Window)
	est.Add(est, big.NewRat(curr+cost, 1))
	return est.Cmp(big.NewRat(l.Max, 1)) <= 0
}

// TestSlidingWindowModel checks sliding_window against the rational model
// and RetryAfter against the earliest passing time found by stepping time
// 1 ns at a time. Windows of a few ns (below Validate's 1 ms minimum, which
// the arithmetic does not need) keep the stepping cheap.
func TestSlidingWindowModel(t *testing.T) {
	for seed := uint64(1); seed <= 4*seeds; seed++ {
		r := newRand(seed)
		l := Limit{Algorithm: SlidingWindow, Max: 1 + r.Int64N(6), Window: 1 + r.Int64N(12)}
		for range 50 {
			s := State{l.Window * (r.Int64N(20) - 10), r.Int64N(l.Max + 1), r.Int64N(l.Max + 1)}
			now := s[winStart] + r.Int64N(4*l.Window) - l.Window
			cost := r.Int64N(l.Max + 2)
			orig := s
			d, _ := l.Apply(now, &s, cost, 0)
			if want := slidingModel(l, orig, now, cost); d.Allowed != want {
				t.Fatalf("seed %d %+v state %v: Apply(%d, cost %d).Allowed = %v, model %v", seed, l, orig, now, cost, d.Allowed, want)
			}
			first, found := int64(0), false // the first time the request passes, stepping 1 ns
			for at := now; at <= now+4*l.Window; at++ {
				probe := orig
				pd, _ := l.Apply(at, &probe, cost, 0)
				if pd.Allowed != slidingModel(l, orig, at, cost) {
					t.Fatalf("seed %d %+v state %v: at %d disagrees with the model", seed, l, orig, at)
				}
				if !found && pd.Allowed {
					first, found = at, true
				} else if found && !pd.Allowed {
					t.Fatalf("seed %d %+v state %v cost %d: allowed at %d, denied again at %d", seed, l, orig, cost, first, at)
				}
			}
			want := int64(-1)
			if !d.Allowed && found {
				want = first - now
			}
			if d.RetryAfter != want {
				t.Fatalf("seed %d %+v state %v: Apply(%d, cost %d).RetryAfter = %d, stepping finds %d", seed, l, orig, now, cost, d.RetryAfter, want)
			}
		}
	}
	t.Logf("seeds 1..%d", 4*seeds)
}

// TestSlidingWindowRetryAfterLarge: with realistic windows, a denied request
// is still denied 1 ns before RetryAfter and allowed at it (the weighted
// count only falls with time, which TestSlidingWindowModel checks).
func TestSlidingWindowRetryAfterLarge(t *testing.T) {
	for seed := uint64(1); seed <= 10*seeds; seed++ {
		r := newRand(seed)
		l := Limit{Algorithm: SlidingWindow, Max: 1 + r.Int64N(1000), Window: ms + r.Int64N(hour)}
		start := windowStart(t0, l.Window)
		s := State{start, r.Int64N(l.Max + 1), r.Int64N(l.Max + 1)}
		now := start + r.Int64N(2*l.Window)
		cost := 1 + r.Int64N(l.Max)
		orig := s
		d, _ := l.Apply(now, &s, cost, 0)
		if d.Allowed {
			continue
		}
		at := now + d.RetryAfter
		before, after := orig, orig
		if db, _ := l.Apply(at-1, &before, cost, 0); db.Allowed && d.RetryAfter > 1 {
			t.Fatalf("seed %d %+v state %v: cost %d allowed at %d, before RetryAfter %d", seed, l, orig, cost, at-1, d.RetryAfter)
		}
		if da, _ := l.Apply(at, &after, cost, 0); !da.Allowed {
			t.Fatalf("seed %d %+v state %v: cost %d denied at now+RetryAfter (%d)", seed, l, orig, cost, d.RetryAfter)
		}
	}
	t.Logf("seeds 1..%d", 10*seeds)
}

// TestFreshAtNeverEarly: at FreshAt (and later) every request gets the
// Decision a new bucket would give; for token_bucket, ResetAfter may differ
// after FreshAt because the refill phase differs.
func TestFreshAtNeverEarly(t *testing.T) {
	for seed := uint64(1); seed <= seeds; seed++ {
		r := newRand(seed)
		for a := TokenBucket; a < numAlgorithms; a++ {
			if a.Extended() {
				continue // TestExtFreshAtNeverEarly
			}
			l := randomLimit(r, a)
			f := Flags(r.IntN(4))
			s, _, _, latest := traffic(r, l, f, 1+r.IntN(40), true)
			fresh := l.FreshAt(&s, nil)
			at, exact := fresh, true
			if fresh == minI64 {
				at, exact = latest, false
			}
			for _, when := range []int64{at, at + 1 + r.Int64N(3*span(l))} {
				for cost := int64(0); cost <= wantLimit(l)+1; cost++ {
					old, nw := s, *newBucket(l, when)
					got, _ := l.Apply(when, &old, cost, f)
					want, _ := l.Apply(when, &nw, cost, f)
					if a == TokenBucket && (when != fresh || !exact) {
						got.ResetAfter, want.ResetAfter = 0, 0
					}
					if got != want {
						t.Fatalf("seed %d %+v %s: state %v FreshAt t0%+d: at t0%+d cost %d got %+v, a new bucket %+v",
							seed, l, flagNames(f), s, fresh-t0, when-t0, cost, got, want)
					}
				}
			}
		}
	}
	t.Logf("seeds 1..%d", seeds)
}

// TestPeekNeverChanges: Apply with cost 0 (or negative) never changes any
// state, including corrupt ones and extreme times.
func TestPeekNeverChanges(t *testing.T) {
	words := []int64{minI64, minI64 + 1, -sec, -1, 0, 1, 3, t0, maxI64 - 1, maxI64}
	r := newRand(1)
	for a := TokenBucket; a < numAlgorithms; a++ {
		if a.Extended() {
			continue // TestExtCorruptState
		}
		l := randomLimit(r, a)
		for range 2000 {
			s := State{words[r.IntN(len(words))], words[r.IntN(len(words))], words[r.IntN(len(words))]}
			now := words[r.IntN(len(words))] + r.Int64N(3) - 1
			before := s
			for _, cost := range []int64{0, -1, minI64} {
				if _, changed := l.Apply(now, &s, cost, Flags(r.IntN(4))); changed || s != before {
					t.Fatalf("%+v: Apply(%d, %v, cost %d) changed the state to %v", l, now, before, cost, s)
				}
			}
		}
	}
	t.Log("seed 1")
}
