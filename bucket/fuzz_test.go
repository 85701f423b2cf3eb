package bucket

import "testing"

// fuzzLimit maps fuzz inputs to a Limit: alg picks the algorithm (Invalid
// and unknown values included) and a, b, c fill the parameters it uses in
// field order.
func fuzzLimit(alg uint8, a, b, c int64) Limit {
	l := Limit{Algorithm: Algorithm(alg % (uint8(numAlgorithms) + 1))}
	switch l.Algorithm {
	case TokenBucket:
		l.Max, l.RefillTime, l.RefillAmount = a, b, c
	case GCRA:
		l.Burst, l.Count, l.Period = a, b, c
	case FixedWindow, SlidingWindow:
		l.Max, l.Window = a, b
	case Pacer:
		l.Count, l.Period, l.MaxDelay = a, b, c
	}
	return l
}

// FuzzApply feeds random limits, states (corrupt ones included), times,
// costs and flags to every entry point and checks the invariants that hold
// for any input: no panic on a validated limit, determinism, changed tells
// the truth, cost <= 0 changes nothing, an allowed cost > 0 always changes
// the state, Remaining in [0, Limit], RetryAfter -1 or >= 1, ResetAfter
// never beyond what FreshAt tells the table, a refund never lowers
// Remaining, and a new bucket is fresh.
func FuzzApply(f *testing.F) {
	for _, l := range testLimits {
		p := fuzzParams(l)
		f.Add(uint8(l.Algorithm), p[0], p[1], p[2], t0, int64(3), int64(0), t0+sec/3, int64(1), uint8(0))
		f.Add(uint8(l.Algorithm), p[0], p[1], p[2], t0, int64(0), int64(5), t0-sec, int64(4), uint8(Strict))
		f.Add(uint8(l.Algorithm), p[0], p[1], p[2], minI64, maxI64, minI64, maxI64, maxI64, uint8(Smyte|Strict))
		f.Add(uint8(l.Algorithm), p[0], p[1], p[2], maxI64, int64(-1), maxI64, minI64, int64(-1), uint8(0xff))
	}
	f.Add(uint8(TokenBucket), maxI64, maxI64, maxI64, int64(0), minI64, int64(0), maxI64, maxI64, uint8(Smyte))
	f.Add(uint8(GCRA), maxI64-1, int64(1), int64(1), maxI64-10, int64(0), int64(0), maxI64-10, maxI64, uint8(0))
	f.Add(uint8(SlidingWindow), maxI64, maxI64, int64(0), -maxI64, maxI64, maxI64, maxI64, maxI64, uint8(0))
	f.Add(uint8(Pacer), int64(1), int64(1), maxI64, int64(0), int64(0), int64(0), int64(0), maxI64-1, uint8(0))
	f.Fuzz(func(t *testing.T, alg uint8, a, b, c, s0, s1, s2, now, cost int64, flags uint8) {
		l := fuzzLimit(alg, a, b, c)
		if l.Validate() != nil {
			return
		}
		fl := Flags(flags)
		orig := State{s0, s1, s2}
		s := orig
		d, changed := l.Apply(now, &s, cost, fl)

		again := orig
		if d2, c2 := l.Apply(now, &again, cost, fl); d2 != d || c2 != changed || again != s {
			t.Fatalf("not deterministic: %+v %v %v, then %+v %v %v", d, changed, s, d2, c2, again)
		}
		if changed != (s != orig) {
			t.Fatalf("changed = %v, state %v -> %v", changed, orig, s)
		}
		if cost <= 0 && changed {
			t.Fatalf("cost %d changed the state %v -> %v", cost, orig, s)
		}
		if d.Allowed && cost > 0 && !changed {
			t.Fatalf("allowed cost %d did not change the state %v", cost, orig)
		}
		if d.Limit != wantLimit(l) || d.Remaining < 0 || d.Remaining > d.Limit {
			t.Fatalf("Remaining %d, Limit %d (want %d)", d.Remaining, d.Limit, wantLimit(l))
		}
		if (d.Allowed && d.RetryAfter != -1) || (!d.Allowed && d.RetryAfter != -1 && d.RetryAfter < 1) {
			t.Fatalf("Allowed %v with RetryAfter %d", d.Allowed, d.RetryAfter)
		}
		if fresh := resetAfter(l.FreshAt(&s), now); d.ResetAfter < 0 || d.ResetAfter > fresh {
			t.Fatalf("ResetAfter %d, FreshAt-now %d", d.ResetAfter, fresh)
		}
		if l.Algorithm == Pacer {
			if d.Delay < 0 || d.Delay > l.MaxDelay || (!d.Allowed && d.Delay != 0) {
				t.Fatalf("pacer Delay %d (MaxDelay %d, Allowed %v)", d.Delay, l.MaxDelay, d.Allowed)
			}
		} else if d.Delay != 0 {
			t.Fatalf("Delay %d from %v", d.Delay, l.Algorithm)
		}

		peekState := s
		peek, _ := l.Apply(now, &peekState, 0, 0)
		refunded := s
		rd, rchanged := l.Refund(now, &refunded, cost, fl)
		if rd.Remaining < peek.Remaining || rchanged != (refunded != s) || (cost <= 0 && rchanged) {
			t.Fatalf("Refund(%d) of %v: %+v, %v, state %v; the peek before: %+v", cost, s, rd, rchanged, refunded, peek)
		}

		var fresh, drained State
		l.Init(now, &fresh)
		if at := l.FreshAt(&fresh); at > now {
			t.Fatalf("a new bucket %v is fresh only at %d > now %d", fresh, at, now)
		}
		l.Drained(now, &drained)
	})
}

// fuzzParams returns the parameters of l in the order fuzzLimit reads them.
func fuzzParams(l Limit) [3]int64 {
	switch l.Algorithm {
	case TokenBucket:
		return [3]int64{l.Max, l.RefillTime, l.RefillAmount}
	case GCRA:
		return [3]int64{l.Burst, l.Count, l.Period}
	case FixedWindow, SlidingWindow:
		return [3]int64{l.Max, l.Window, 0}
	case Pacer:
		return [3]int64{l.Count, l.Period, l.MaxDelay}
	}
	return [3]int64{}
}
