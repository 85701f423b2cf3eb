package bucket

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/vocab"
)

func TestWindowCounters(t *testing.T) {
	// Sub-windows of 250 ms; t0 starts one, j0.
	l := Limit{Algorithm: WindowCounters, Max: 3, Window: sec, Counters: 4}
	b := newExtBucket(l, t0)
	runExt(t, l, b, []extStep{
		{opDecide, t0 + 100*ms, 2, allow(1, 1150*ms), true}, // j0 counts until t0+1250ms
		{opDecide, t0 + 600*ms, 2, deny(1, 650*ms, 650*ms), false},
		{opDecide, t0 + 600*ms, 1, allow(0, 1150*ms), true}, // into j0+2
		// j0 ends 1 s before t0+1250ms: it still overlaps the window.
		{opDecide, t0 + 1249*ms, 1, deny(0, 1*ms, 501*ms), false},
		{opPeek, t0 + 1249*ms, 0, deny(0, 1*ms, 501*ms), false},
		{opDecide, t0 + 1250*ms, 1, allow(1, 1250*ms), true}, // into j0+5; the ring drops j0
		// Backwards: every stored sub-window after now's counts, and the
		// count goes into the newest stored one, j0+5.
		{opDecide, t0 + 300*ms, 2, deny(1, 1450*ms, 2200*ms), false},
		{opDecide, t0 + 300*ms, 1, allow(0, 2200*ms), true},
		{opDecide, t0 + 300*ms, 4, deny(0, -1, 2200*ms), false}, // cost > Max: never
		// A refund takes from the newest sub-window first.
		{opRefund, t0 + 1300*ms, 2, allow(2, 450*ms), true},
		{opPeek, t0 + 1300*ms, 0, allow(2, 450*ms), false},
		{opRefund, t0 + 3*sec, 2, allow(3, 0), false}, // nothing counts any more
	})
	if want := (State{t0/(250*ms) + 5, vocab.BlockSum(b.ext), 0}); b.s != want {
		t.Errorf("state = %v, want %v", b.s, want)
	}
}

func TestWindowCountersCountDenied(t *testing.T) {
	// Sub-windows of 500 ms; t0 starts one, j0.
	l := Limit{Algorithm: WindowCounters, Max: 2, Window: sec, Counters: 2, CountDenied: true}
	runExt(t, l, newExtBucket(l, t0), []extStep{
		{opDecide, t0, 2, allow(0, 1500*ms), true},
		// Denied and counted, into j0+1: the RetryAfter is for the
		// counters after the request (j0 must leave, with 3 counted).
		{opDecide, t0 + 600*ms, 1, deny(0, 900*ms, 1400*ms), true},
		{opDecide, t0 + 1500*ms, 1, allow(0, 1500*ms), true},
		{opDecide, t0 + 1500*ms, 5, deny(0, -1, 1500*ms), true}, // counted, though it never passes
		{opDecide, t0 + 1500*ms, 1, deny(0, 1500*ms, 1500*ms), true},
		{opPeek, t0 + 1500*ms, 0, deny(0, 1500*ms, 1500*ms), false},
		// Allowed iff count+cost <= Max: over Max, even a cost of 0 is not.
		{opDecide, t0 + 1500*ms, 0, deny(0, 1500*ms, 1500*ms), false},
	})
}

func TestWindowCountersDrained(t *testing.T) {
	l := Limit{Algorithm: WindowCounters, Max: 4, Window: sec, Counters: 4}
	b := newExtBucket(l, t0)
	l.Drained(t0+100*ms, &b.s, b.ext)
	checkExtSum(t, b)
	runExt(t, l, b, []extStep{
		{opPeek, t0 + 100*ms, 0, deny(0, 1150*ms, 1150*ms), false},
		{opDecide, t0 + 1250*ms - 1, 1, deny(0, 1, 1), false},
		{opDecide, t0 + 1250*ms, 4, allow(0, 1250*ms), true},
	})
}

// TestWindowCountersExtremes: the widest window at the end of the time
// range, and one sub-window per window.
func TestWindowCountersExtremes(t *testing.T) {
	l := Limit{Algorithm: WindowCounters, Max: maxI64, Window: widestCounters(MaxCounters), Counters: MaxCounters}
	w := ceilDiv(l.Window, MaxCounters)
	end := MaxTime/w*w + w + l.Window // the end of MaxTime's sub-window, plus Window
	runExt(t, l, newExtBucket(l, MaxTime), []extStep{
		{opDecide, MaxTime, maxI64, allow(0, end-MaxTime), true},
		{opDecide, MaxTime, 1, deny(0, end-MaxTime, end-MaxTime), false},
		{opRefund, MaxTime, maxI64, allow(maxI64, 0), true},
	})
	// One counter per window is a fixed window counted for two windows.
	l = Limit{Algorithm: WindowCounters, Max: 1, Window: sec, Counters: 1}
	runExt(t, l, newExtBucket(l, t0), []extStep{
		{opDecide, t0 + 900*ms, 1, allow(0, 1100*ms), true},
		{opDecide, t0 + 1900*ms, 1, deny(0, 100*ms, 100*ms), false},
		{opDecide, t0 + 2*sec, 1, allow(0, 2*sec), true},
	})
	// Before the epoch, sub-windows are numbered by floor division.
	l = Limit{Algorithm: WindowCounters, Max: 1, Window: sec, Counters: 2}
	runExt(t, l, newExtBucket(l, -1), []extStep{
		{opDecide, -1, 1, allow(0, sec+1), true}, // sub-window [-500ms, 0)
		{opDecide, sec - 1, 1, deny(0, 1, 1), false},
		{opDecide, sec, 1, allow(0, 1500*ms), true},
	})
}

// countersModel is window_counters as a plain array of counters: a map
// from sub-window number to count. The ring keeps the newest stored
// sub-window and the Counters before it, so the model forgets the older
// ones too (they count only if time goes back further than a window).
type countersModel struct {
	l      Limit
	w      int64
	counts map[int64]int64
	top    int64 // the newest sub-window counted into
}

func newCountersModel(l Limit, now int64) *countersModel {
	w := (l.Window + l.Counters - 1) / l.Counters
	return &countersModel{l: l, w: w, counts: map[int64]int64{}, top: floorDiv(now, w)}
}

// count returns the sum of the counters of the sub-windows that end more
// than Window before t: those overlapping (t-Window, t], and those after t.
func (m *countersModel) String() string { return fmt.Sprintf("model %v top %d", m.counts, m.top) }

func (m *countersModel) count(t int64) int64 {
	sum := int64(0)
	for j, c := range m.counts {
		if (j+1)*m.w+m.l.Window > t {
			sum += c
		}
	}
	return sum
}

// report sets Allowed or RetryAfter for cost as the counters stand (allowed
// given), Remaining and ResetAfter.
func (m *countersModel) report(now, cost int64, allowed bool, d *Decision) {
	d.Allowed = allowed
	if !allowed && cost <= m.l.Max {
		// The first time the counters that still count leave room:
		// try each time a sub-window leaves, in order.
		var at []int64
		for j := range m.counts {
			if e := (j+1)*m.w + m.l.Window; e > now {
				at = append(at, e)
			}
		}
		slices.Sort(at)
		for _, e := range at {
			if m.count(e)+cost <= m.l.Max {
				d.RetryAfter = e - now
				break
			}
		}
	}
	d.Remaining = max(m.l.Max-m.count(now), 0)
	newest, any := int64(0), false
	for j, c := range m.counts {
		if c > 0 && (!any || j > newest) {
			newest, any = j, true
		}
	}
	if any {
		d.ResetAfter = max((newest+1)*m.w+m.l.Window-now, 0)
	}
}

func (m *countersModel) decide(now, cost int64) Decision {
	d := Decision{Limit: m.l.Max, RetryAfter: -1}
	allowed := m.count(now)+cost <= m.l.Max
	if cost > 0 && (allowed || m.l.CountDenied) {
		m.top = max(m.top, floorDiv(now, m.w))
		m.counts[m.top] += cost
		for j := range m.counts {
			if j < m.top-m.l.Counters {
				delete(m.counts, j)
			}
		}
	}
	m.report(now, cost, allowed, &d)
	return d
}

func (m *countersModel) peek(now int64) Decision {
	d := Decision{Limit: m.l.Max, RetryAfter: -1}
	m.report(now, 1, m.count(now)+1 <= m.l.Max, &d)
	return d
}

// refund takes amount from the counters that count at now, newest first.
func (m *countersModel) refund(now, amount int64) Decision {
	for j := m.top; j >= m.top-m.l.Counters && amount > 0; j-- {
		if (j+1)*m.w+m.l.Window > now {
			take := min(m.counts[j], amount)
			m.counts[j] -= take
			amount -= take
		}
	}
	return m.decide(now, 0)
}

// countersEdges returns a limit of the model tests: small, or at an edge of
// the parameters' ranges.
func countersEdges(r *rand.Rand) Limit {
	l := Limit{Algorithm: WindowCounters, Max: 1 + r.Int64N(12), Window: ms * (1 + r.Int64N(50)), Counters: 1 + r.Int64N(6),
		CountDenied: r.IntN(3) == 0}
	switch r.IntN(6) {
	case 0:
		l.Counters = MaxCounters
	case 1:
		l.Window = ms + r.Int64N(ms)
	case 2:
		l.Window = widestCounters(l.Counters) - r.Int64N(3)
	case 3:
		l.Max = 1
	}
	return l
}

// widestCounters returns the largest Window window_counters accepts with k
// counters: Window plus one sub-window must fit in MaxDuration.
func widestCounters(k int64) int64 {
	w := MaxDuration - MaxDuration/(k+1)
	for w+(w+k-1)/k > MaxDuration {
		w--
	}
	return w
}

// TestWindowCountersModel: DecideExt, PeekExt and DecideRefundExt agree
// exactly with the model over random costs, gaps, clock steps backwards
// and refunds, at times near 0 and near MaxTime, and word 1 stays the
// extension's ExtSum.
func TestWindowCountersModel(t *testing.T) {
	for seed := uint64(1); seed <= 4*seeds; seed++ {
		r := newRand(seed)
		l := countersEdges(r)
		if err := l.Validate(); err != nil {
			t.Fatal(err)
		}
		now := modelStart(r, &l)
		b := newExtBucket(l, now)
		m := newCountersModel(l, now)
		w := m.w
		for i := range 300 {
			switch r.IntN(6) {
			case 0, 1:
				now = satAdd(now, r.Int64N(w))
			case 2:
				now = satAdd(now, r.Int64N(2*l.Window))
			case 3:
				now -= r.Int64N(l.Window)
			case 4:
				now = (now/w+1)*w - r.Int64N(2) // a sub-window's edge
			}
			now = clamp(now, 0, MaxTime)
			cost := r.Int64N(min(l.Max, 10) + 2)
			modelStep(t, r, &l, b, m, now, cost, fmt.Sprintf("seed %d step %d", seed, i))
		}
	}
	t.Logf("seeds 1..%d", 4*seeds)
}

// TestWindowCountersNeverLenient: the tokens admitted in any (now-Window,
// now] never exceed Max: the sub-window counters only ever count more than
// an exact sliding log would.
func TestWindowCountersNeverLenient(t *testing.T) {
	for seed := uint64(1); seed <= seeds; seed++ {
		r := newRand(seed)
		l := countersEdges(r)
		l.Window = min(l.Window, 50*ms)
		if err := l.Validate(); err != nil {
			t.Fatal(err)
		}
		now := t0 + r.Int64N(l.Window)
		b := newExtBucket(l, now)
		type admitted struct{ at, cost int64 }
		var log []admitted
		for range 500 {
			now += r.Int64N(2 * l.Window / l.Max)
			cost := r.Int64N(l.Max + 1)
			var d Decision
			l.Decide(now, &b.s, b.ext, cost, 0, &d)
			if !d.Allowed || cost == 0 {
				continue
			}
			log = append(log, admitted{now, cost})
			in := int64(0)
			for _, a := range log {
				if a.at > now-l.Window {
					in += a.cost
				}
			}
			if in > l.Max {
				t.Fatalf("seed %d %+v: %d tokens admitted in (t0%+d, t0%+d]", seed, l, in, now-l.Window-t0, now-t0)
			}
		}
	}
	t.Logf("seeds 1..%d", seeds)
}
