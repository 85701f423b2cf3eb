package bucket

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/vocab"
)

// fuzzLimit maps fuzz inputs to a Limit: alg picks the algorithm (Invalid
// and unknown values included) and a, b, c fill the parameters it uses in
// field order (window_counters' CountDenied is the top bit of alg).
func fuzzLimit(alg uint8, a, b, c int64) Limit {
	l := Limit{Algorithm: Algorithm((alg & 0x7f) % (uint8(numAlgorithms) + 1))}
	switch l.Algorithm {
	case TokenBucket:
		l.Max, l.RefillTime, l.RefillAmount = a, b, c
	case GCRA:
		l.Burst, l.Count, l.Period = a, b, c
	case FixedWindow, SlidingWindow:
		l.Max, l.Window = a, b
	case Pacer:
		l.Count, l.Period, l.MaxDelay = a, b, c
	case SlidingLog:
		l.Max, l.Window = a, b
	case WindowCounters:
		l.Max, l.Window, l.Counters, l.CountDenied = a, b, c, alg&0x80 != 0
	case Concurrency:
		l.Max, l.Lease = a, b
	case Quota:
		l.Max = a
		l.Calendar, l.Every = CalendarUnit(b&0xff), b>>8&0xffff
		l.Anchor, l.WeekStart = b>>24&0xff, b>>32&0xff
		if c != 0 {
			l.Loc = testZones[uint64(c)%uint64(len(testZones))]
		}
	}
	return l
}

// FuzzApply feeds random limits, states (corrupt ones included), times,
// costs and flags to every entry point and checks the invariants that hold
// for any input: no panic on a validated limit, determinism, changed tells
// the truth, cost <= 0 changes nothing, an allowed cost > 0 always changes
// the state, Remaining in [0, Limit], RetryAfter -1 or >= 1, ResetAfter
// never beyond what FreshAt tells the table, a refund never lowers
// Remaining, and a new bucket is fresh. The extended algorithms go to
// fuzzExt.
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
	for _, l := range extLimits {
		p := fuzzParams(l)
		alg := uint8(l.Algorithm)
		if l.CountDenied {
			alg |= 0x80
		}
		f.Add(alg, p[0], p[1], p[2], int64(3<<32|7), int64(0), int64(0), t0+sec/3, int64(1), uint8(0))
		f.Add(alg, p[0], p[1], p[2], t0/p[1], int64(5), int64(9), t0-sec, int64(4), uint8(1))
		f.Add(alg, p[0], p[1], p[2], minI64, maxI64, minI64, maxI64, maxI64, uint8(2))
		f.Add(alg, p[0], p[1], p[2], maxI64, int64(-1), maxI64, minI64, int64(-1), uint8(3))
	}
	f.Add(uint8(SlidingLog), int64(MaxLogLimit), MaxDuration, int64(0), int64(MaxLogLimit-1)<<32|5, int64(0), int64(0), MaxTime, int64(MaxLogLimit), uint8(1))
	f.Add(uint8(WindowCounters)|0x80, maxI64, ms, int64(MaxCounters), int64(-1), int64(0), int64(0), int64(0), maxI64, uint8(1))
	f.Add(uint8(Concurrency), int64(MaxConcurrency), MaxDuration, int64(0), t0, int64(0), int64(0), MaxTime, int64(1), uint8(0))
	f.Fuzz(func(t *testing.T, alg uint8, a, b, c, s0, s1, s2, now, cost int64, flags uint8) {
		l := fuzzLimit(alg, a, b, c)
		if l.Validate() != nil {
			return
		}
		if l.Algorithm.Extended() {
			fuzzExt(t, l, State{s0, s1, s2}, now, cost, flags)
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
		if fresh := resetAfter(l.FreshAt(&s, nil), now); d.ResetAfter < 0 || d.ResetAfter > fresh {
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
		l.Init(now, &fresh, nil)
		if at := l.FreshAt(&fresh, nil); at > now {
			t.Fatalf("a new bucket %v is fresh only at %d > now %d", fresh, at, now)
		}
		l.Drained(now, &drained, nil)
	})
}

// fuzzExtWords returns an extension for l drawn from the fuzz inputs: each
// word, from a generator seeded with them, is one of the state words, a time
// near now or one Window or Lease before it, a small count, or an extreme
// value; with the low bit of pick clear, the entries of a sliding_log are
// in order from the ring's head in s, as a sound log's are.
func fuzzExtWords(l Limit, s State, now int64, pick uint8) []int64 {
	r := rand.New(rand.NewPCG(uint64(s[0])^uint64(s[1])<<1^uint64(s[2])<<2, uint64(now)^uint64(pick)<<56))
	sp := max(l.Window, l.Lease)
	choices := []int64{s[0], s[1], s[2], now, now - 1, now + 1, satSub(now, sp), satSub(now, sp) + 1, satAdd(now, sp),
		0, 1, 2, l.Max - 1, l.Max, l.Max + 1, minI64, maxI64}
	ext := make([]int64, l.ExtWords())
	for i := range ext {
		ext[i] = choices[r.IntN(len(choices))]
	}
	if l.Algorithm == SlidingLog && pick&1 == 0 {
		sorted := slices.Clone(ext)
		slices.Sort(sorted)
		head, _ := logRing(&s, len(ext))
		for k := 1; k <= len(ext); k++ { // the k-th most recent is the k-th largest
			ext[logIndex(head, k, len(ext))] = sorted[len(ext)-k]
		}
	}
	return ext
}

// soundExt reports whether s and ext could have been written by the Ext
// methods: word 1 is the extension's ExtSum and a sliding_log's entries are
// in order.
func soundExt(l Limit, s *State, ext []int64) bool {
	if s[1] != vocab.BlockSum(ext) {
		return false
	}
	if l.Algorithm == SlidingLog {
		head, fill := logRing(s, len(ext))
		for k := 1; k < fill; k++ {
			if ext[logIndex(head, k, len(ext))] < ext[logIndex(head, k+1, len(ext))] {
				return false
			}
		}
	}
	return true
}

// fuzzExt checks the methods of an extended algorithm on any State,
// with an extension drawn from the inputs: the invariants of FuzzApply
// (except that a concurrency Decide is a peek and never changes
// anything), and besides: word 2 is never touched, every method keeps the
// difference between word 1 and vocab.BlockSum(ext) (a sound block stays sound, a
// torn one stays detectably torn), a peek changes nothing, a lease taken is
// released by its id, and Init and Drained leave a sound block. With
// bit 1 of flags set, word 1 is the input's (most likely a torn block);
// otherwise it is the extension's ExtSum (a sound one).
func fuzzExt(t *testing.T, l Limit, orig State, now, cost int64, flags uint8) {
	origExt := fuzzExtWords(l, orig, now, flags)
	if flags&2 == 0 {
		orig[1] = vocab.BlockSum(origExt)
	}
	b := &extBucket{s: orig, ext: origExt}
	start := b.clone()
	var d Decision
	changed := l.Decide(now, &b.s, b.ext, cost, Flags(flags), &d)

	again := start.clone()
	var d2 Decision
	if c2 := l.Decide(now, &again.s, again.ext, cost, Flags(flags), &d2); d2 != d || c2 != changed || !again.equal(b) {
		t.Fatalf("not deterministic: %+v %v %v, then %+v %v %v", d, changed, b.s, d2, c2, again.s)
	}
	if changed == b.equal(start) {
		t.Fatalf("changed = %v, state %v %v -> %v %v", changed, start.s, start.ext, b.s, b.ext)
	}
	if changed && (cost <= 0 || l.Algorithm == Concurrency) {
		t.Fatalf("cost %d changed the state %v %v -> %v %v", cost, start.s, start.ext, b.s, b.ext)
	}
	if d.Allowed && cost > 0 && l.Algorithm != Concurrency && !changed {
		t.Fatalf("allowed cost %d did not change the state %v %v", cost, start.s, start.ext)
	}
	checkExtDecision(t, l, b, now, d)
	checkExtWords(t, start, b)

	peek := b.clone()
	var p Decision
	l.Peek(now, &peek.s, peek.ext, &p)
	if !peek.equal(b) {
		t.Fatalf("Peek changed the state %v %v -> %v %v", b.s, b.ext, peek.s, peek.ext)
	}
	checkExtDecision(t, l, peek, now, p)

	var cur, rd Decision
	l.Decide(now, &b.s, b.ext, 0, 0, &cur)
	refunded := b.clone()
	rchanged := l.DecideRefund(now, &refunded.s, refunded.ext, cost, Flags(flags), &rd)
	if rchanged == refunded.equal(b) || (cost <= 0 && rchanged) {
		t.Fatalf("DecideRefund(%d) of %v %v: changed %v, state %v %v", cost, b.s, b.ext, rchanged, refunded.s, refunded.ext)
	}
	if soundExt(l, &start.s, start.ext) && rd.Remaining < cur.Remaining {
		// Only for a sound block: a refund of a log found out of order
		// may count differently.
		t.Fatalf("DecideRefund(%d) of %v %v: %+v; the peek before: %+v", cost, b.s, b.ext, rd, cur)
	}
	checkExtDecision(t, l, refunded, now, rd)
	checkExtWords(t, b, refunded)

	if l.Algorithm == Concurrency {
		leased := b.clone()
		lease, lchanged := l.AcquireLease(now, &leased.s, leased.ext, now^cost, &d)
		if lchanged == leased.equal(b) || d.Allowed != (lease != 0) || (d.Allowed && d.Remaining != p.Remaining-1) {
			t.Fatalf("AcquireLease at %d of %v %v: lease %d, %+v, changed %v; the peek before %+v", now, b.s, b.ext, lease, d, lchanged, p)
		}
		checkExtDecision(t, l, leased, now, d)
		checkExtWords(t, b, leased)
		if lease != 0 && now < maxI64-l.Lease {
			released := leased.clone()
			if ok, rc := l.ReleaseLease(now, &released.s, released.ext, lease, &d); !ok || !rc {
				t.Fatalf("ReleaseLease(%d) at %d of %v %v: %v %v", lease, now, leased.s, leased.ext, ok, rc)
			}
			checkExtDecision(t, l, released, now, d)
			checkExtWords(t, leased, released)
		}
	}

	fresh := b.clone()
	l.Init(now, &fresh.s, fresh.ext)
	if at := l.FreshAt(&fresh.s, fresh.ext); at > now || fresh.s[1] != vocab.BlockSum(fresh.ext) || fresh.s[2] != b.s[2] {
		t.Fatalf("a new bucket %v %v is fresh only at %d > now %d", fresh.s, fresh.ext, at, now)
	}
	drained := b.clone()
	l.Drained(now, &drained.s, drained.ext)
	if drained.s[1] != vocab.BlockSum(drained.ext) || drained.s[2] != b.s[2] {
		t.Fatalf("a drained bucket %v %v", drained.s, drained.ext)
	}
}

// checkExtDecision checks what holds for any Decision of an Ext method.
func checkExtDecision(t *testing.T, l Limit, b *extBucket, now int64, d Decision) {
	t.Helper()
	if d.Limit != l.Max || d.Remaining < 0 || d.Remaining > d.Limit || d.Delay != 0 {
		t.Fatalf("Remaining %d, Limit %d (want %d), Delay %d", d.Remaining, d.Limit, l.Max, d.Delay)
	}
	if (d.Allowed && d.RetryAfter != -1) || (!d.Allowed && d.RetryAfter != -1 && d.RetryAfter < 1) {
		t.Fatalf("Allowed %v with RetryAfter %d", d.Allowed, d.RetryAfter)
	}
	if fresh := resetAfter(l.FreshAt(&b.s, b.ext), now); d.ResetAfter < 0 || d.ResetAfter > fresh {
		t.Fatalf("ResetAfter %d, FreshAt-now %d", d.ResetAfter, fresh)
	}
}

// checkExtWords checks that an Ext method kept word 2 and the difference
// between word 1 and vocab.BlockSum(ext).
func checkExtWords(t *testing.T, before, after *extBucket) {
	t.Helper()
	if after.s[2] != before.s[2] || after.s[1]-vocab.BlockSum(after.ext) != before.s[1]-vocab.BlockSum(before.ext) {
		t.Fatalf("words 1 and 2 went %v -> %v, ExtSum %d -> %d", before.s, after.s, vocab.BlockSum(before.ext), vocab.BlockSum(after.ext))
	}
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
	case SlidingLog:
		return [3]int64{l.Max, l.Window, 0}
	case WindowCounters:
		return [3]int64{l.Max, l.Window, l.Counters}
	case Concurrency:
		return [3]int64{l.Max, l.Lease, 0}
	case Quota:
		b := int64(l.Calendar) | l.Every<<8 | l.Anchor<<24 | l.WeekStart<<32
		var c int64
		for i, z := range testZones {
			if z == l.Loc && l.Loc != nil {
				c = int64(i)
			}
		}
		return [3]int64{l.Max, b, c}
	}
	return [3]int64{}
}
