package bucket

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/sluicehq/sluice/vocab"
)

func TestSlidingLog(t *testing.T) {
	l := Limit{Algorithm: SlidingLog, Max: 3, Window: sec}
	b := newExtBucket(l, t0)
	runExt(t, l, b, []extStep{
		{opDecide, t0, 2, allow(1, sec), true},
		// The 2nd most recent entry (t0) leaves the window at t0+1s.
		{opDecide, t0 + 100*ms, 2, deny(1, 900*ms, 900*ms), false},
		{opDecide, t0 + 100*ms, 1, allow(0, sec), true},
		{opDecide, t0 + 500*ms, 1, deny(0, 500*ms, 600*ms), false},
		{opDecide, t0 + 500*ms, 4, deny(0, -1, 600*ms), false}, // cost > Max: never
		{opPeek, t0 + 500*ms, 0, deny(0, 500*ms, 600*ms), false},
		// At t0+1s the entries at t0 are out: (t0, t0+1s] holds one.
		{opDecide, t0 + sec, 0, allow(2, 100*ms), false},
		{opDecide, t0 + sec, 2, allow(0, sec), true},
		// Backwards: the entries later than now count too.
		{opDecide, t0 + 200*ms, 1, deny(0, 900*ms, 1800*ms), false},
		{opDecide, t0 + 1100*ms, 1, allow(0, sec), true},
		// A refund un-admits the newest entries.
		{opRefund, t0 + 1200*ms, 2, allow(2, 800*ms), true},
		{opPeek, t0 + 1200*ms, 0, allow(2, 800*ms), false},
		// Backwards, an admission is recorded at the newest entry, t0+1s.
		{opDecide, t0 + 900*ms, 1, allow(1, 1100*ms), true},
		{opRefund, t0 + 5*sec, 1, allow(3, 0), false}, // nothing in the window
	})
	if want := (State{2<<32 | 2, vocab.BlockSum(b.ext), 0}); b.s != want {
		t.Errorf("state = %v, want %v", b.s, want)
	}
	if want := []int64{t0 + sec, t0 + sec, t0 + 1100*ms}; !(&extBucket{b.s, b.ext}).equal(&extBucket{b.s, want}) {
		t.Errorf("ext = %v, want %v", b.ext, want)
	}
}

// TestSlidingLogExtremes: the smallest and largest log and window at the
// ends of the time range.
func TestSlidingLogExtremes(t *testing.T) {
	l := Limit{Algorithm: SlidingLog, Max: 1, Window: ms}
	runExt(t, l, newExtBucket(l, 0), []extStep{
		{opDecide, 0, 1, allow(0, ms), true},
		{opDecide, ms - 1, 1, deny(0, 1, 1), false},
		{opDecide, ms, 1, allow(0, ms), true},
		{opDecide, ms, 2, deny(0, -1, ms), false},
	})
	l = Limit{Algorithm: SlidingLog, Max: MaxLogLimit, Window: MaxDuration}
	runExt(t, l, newExtBucket(l, MaxTime), []extStep{
		{opDecide, MaxTime, MaxLogLimit, allow(0, MaxDuration), true},
		{opDecide, MaxTime, 1, deny(0, MaxDuration, MaxDuration), false},
		{opRefund, MaxTime, 1, allow(1, MaxDuration), true},
		{opDecide, MaxTime, 1, allow(0, MaxDuration), true},
		// Past MaxTime, entry+Window saturates: never earlier than the truth.
		{opDecide, maxI64, 1, allow(MaxLogLimit-1, 0), true},
		{opDecide, maxI64, MaxLogLimit, deny(MaxLogLimit-1, 1, 0), false},
	})
	// The drained log passes nothing before now+Window.
	l = Limit{Algorithm: SlidingLog, Max: 5, Window: sec}
	b := newExtBucket(l, t0)
	l.Drained(t0, &b.s, b.ext)
	checkExtSum(t, b)
	runExt(t, l, b, []extStep{
		{opPeek, t0, 0, deny(0, sec, sec), false},
		{opDecide, t0 + sec - 1, 5, deny(0, 1, 1), false},
		{opDecide, t0 + sec, 5, allow(0, sec), true},
	})
}

// logModel is sliding_log as a plain list of admission times, oldest
// first. It keeps the Max most recent, as the ring does: older ones never
// decide anything (the request of cost c looks at the (Max-c+1)-th most
// recent) until a refund brings them back, and a refund un-admits only what
// the ring holds.
type logModel struct {
	l     Limit
	times []int64
}

// live returns how many admissions count at now: those later than now-Window.
func (m *logModel) String() string { return fmt.Sprintf("model log %v", m.times) }

func (m *logModel) live(now int64) int64 {
	n := int64(0)
	for _, e := range m.times {
		if e > now-m.l.Window {
			n++
		}
	}
	return n
}

// report returns the Decision fields that describe the log as it stands.
func (m *logModel) report(now int64, d *Decision) {
	d.Remaining = max(m.l.Max-m.live(now), 0)
	if k := len(m.times); k > 0 {
		d.ResetAfter = max(m.times[k-1]+m.l.Window-now, 0)
	}
}

// verdict sets Allowed or RetryAfter for a request of cost at now.
func (m *logModel) verdict(now, cost int64, d *Decision) {
	switch {
	case cost > m.l.Max:
	case m.live(now)+cost <= m.l.Max:
		d.Allowed = true
	default:
		// It passes once only Max-cost admissions count: when the
		// (Max-cost+1)-th most recent leaves.
		e := m.times[int64(len(m.times))-(m.l.Max-cost+1)]
		d.RetryAfter = e + m.l.Window - now
	}
}

func (m *logModel) decide(now, cost int64) Decision {
	d := Decision{Limit: m.l.Max, RetryAfter: -1}
	m.verdict(now, cost, &d)
	if d.Allowed && cost > 0 {
		at := now
		if k := len(m.times); k > 0 {
			at = max(at, m.times[k-1])
		}
		for range cost {
			m.times = append(m.times, at)
		}
		if over := int64(len(m.times)) - m.l.Max; over > 0 {
			m.times = append(m.times[:0], m.times[over:]...)
		}
	}
	m.report(now, &d)
	return d
}

func (m *logModel) peek(now int64) Decision {
	d := Decision{Limit: m.l.Max, RetryAfter: -1}
	m.verdict(now, 1, &d)
	m.report(now, &d)
	return d
}

func (m *logModel) refund(now, amount int64) Decision {
	k := min(max(amount, 0), m.live(now))
	m.times = m.times[:int64(len(m.times))-k]
	return m.decide(now, 0)
}

// logEdges returns a limit of the model test: small, or at an edge of the
// parameters' ranges.
func logEdges(r *rand.Rand) Limit {
	l := Limit{Algorithm: SlidingLog, Max: 1 + r.Int64N(8), Window: ms * (1 + r.Int64N(50))}
	switch r.IntN(6) {
	case 0:
		l.Max = 1
	case 1:
		l.Max = MaxLogLimit
	case 2:
		l.Window = ms
	case 3:
		l.Window = MaxDuration
	}
	return l
}

// TestSlidingLogModel: Decide, Peek and DecideRefund agree exactly
// with the model (allowed, remaining, retry_after, reset_after) over random
// costs, gaps, clock steps backwards and refunds, at times near 0 and near
// MaxTime, and word 1 stays the extension's ExtSum.
func TestSlidingLogModel(t *testing.T) {
	for seed := uint64(1); seed <= 4*seeds; seed++ {
		r := newRand(seed)
		l := logEdges(r)
		if err := l.Validate(); err != nil {
			t.Fatal(err)
		}
		now := modelStart(r, &l)
		b := newExtBucket(l, now)
		m := &logModel{l: l}
		for i := range 300 {
			switch r.IntN(6) {
			case 0, 1:
				now = satAdd(now, r.Int64N(l.Window/max(1, min(l.Max, 8))))
			case 2:
				now = satAdd(now, r.Int64N(2*l.Window))
			case 3:
				now -= r.Int64N(l.Window)
			}
			now = clamp(now, 0, MaxTime)
			cost := r.Int64N(min(l.Max, 10) + 2)
			if r.IntN(10) == 0 {
				cost = l.Max + r.Int64N(2)
			}
			modelStep(t, r, &l, b, m, now, cost, fmt.Sprintf("seed %d step %d", seed, i))
		}
	}
	t.Logf("seeds 1..%d", 4*seeds)
}

// TestSlidingLogExact: the promise of the exact rolling window. Every
// admission is recorded at a time r with at most Max admitted tokens in
// (r-Window, r], so no Window-long span ever holds more than Max, even
// with time going backwards.
func TestSlidingLogExact(t *testing.T) {
	for seed := uint64(1); seed <= seeds; seed++ {
		r := newRand(seed)
		l := logEdges(r)
		l.Max = min(l.Max, 64)
		if err := l.Validate(); err != nil {
			t.Fatal(err)
		}
		now := t0
		b := newExtBucket(l, now)
		var recorded []int64 // one per token, in order
		for range 400 {
			now += r.Int64N(l.Window/max(1, l.Max)+1) - r.Int64N(l.Window/(4*max(1, l.Max))+1)
			cost := r.Int64N(l.Max + 1)
			var d Decision
			l.Decide(now, &b.s, b.ext, cost, 0, &d)
			if !d.Allowed || cost == 0 {
				continue
			}
			at := now
			if k := len(recorded); k > 0 {
				at = max(at, recorded[k-1])
			}
			for range cost {
				recorded = append(recorded, at)
			}
			in := int64(0)
			for _, e := range recorded {
				if e > at-l.Window && e <= at {
					in++
				}
			}
			if in > l.Max {
				t.Fatalf("seed %d %+v: %d tokens admitted in (t0%+d, t0%+d]", seed, l, in, at-l.Window-t0, at-t0)
			}
		}
	}
	t.Logf("seeds 1..%d", seeds)
}
