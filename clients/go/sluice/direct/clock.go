package direct

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// The clock a Client decides at is the sidecar's (engine.Clock: the later
// of the wall clock and the file's recorded time when the Client opened,
// advanced by the monotonic clock). Reading the monotonic clock costs a
// third of a hot key's decision; where the kernel keeps its clocks on the
// processor's time-stamp counter, a Client reads the counter instead and
// converts it with a rate it measures against the monotonic clock:
//
//   - an anchor is a reading of both clocks, taken only if the monotonic
//     reads around the counter's are at most tscBracket apart (a thread
//     preempted between them takes none);
//   - the rate is measured between two anchors at least tscMinBase apart
//     (renewed every tscBaseAge or so, so it follows the monotonic clock's
//     slewing), and converts counter ticks from the last anchor for at most
//     tscSpan: past it, the next reading takes a new anchor;
//   - each anchor checks the conversion in use where it ended: if it had
//     drifted from the monotonic clock by tscTolerance/2 or more (a counter
//     that changed its rate, a clock that stepped), the conversion is
//     dropped and the rate measured again, reading the monotonic clock
//     meanwhile.
//
// So a Client's clock stays within tscTolerance of the sidecar's clock as
// this process reads it: an anchor is off by at most tscBracket/2, and a
// rate measured over tscMinBase with such anchors is off by at most
// 2*(tscBracket/2)/tscMinBase, 0.2 µs over a span. It may step back by
// as much at an anchor: the engine decides times that go back as no time
// passing, so that mints no tokens.
const (
	tscSpan      = time.Millisecond
	tscMinBase   = 10 * time.Millisecond
	tscBaseAge   = time.Second
	tscBracket   = 2 * time.Microsecond
	tscTolerance = 10 * time.Microsecond
)

// clock is a Client's clock: ref (engine.Clock), read through the
// time-stamp counter where it is usable.
type clock struct {
	ref  func() int64  // the sidecar's clock as this process reads it
	read func() uint64 // the counter: rdtsc, or nil if unusable
	cal  atomic.Pointer[tscCal]

	mu         sync.Mutex // serialises anchoring
	base, next tscAnchor  // the rate's baseline, and the next one
}

// tscAnchor is a reading of both clocks at one moment.
type tscAnchor struct {
	tsc uint64 // counter ticks
	ns  int64  // ref
}

// tscCal converts counter readings up to span ticks past its anchor into
// ref's time. It is never modified once published.
type tscCal struct {
	tscAnchor
	span uint64 // ticks past the anchor it converts
	mult uint64 // ns per tick, fixed point with 32 fractional bits
}

// newClock returns ref read through the time-stamp counter where the
// platform keeps its clocks on it, else ref itself.
func newClock(ref func() int64) *clock {
	c := &clock{ref: ref}
	if tscUsable() {
		c.read = rdtsc
	}
	return c
}

// now returns the Client's clock, Unix ns.
func (c *clock) now() int64 {
	if c.read == nil {
		return c.ref()
	}
	return c.at(rdtsc())
}

// at returns the clock for a counter reading of tsc: converted if a
// conversion covers it, else read from ref (taking an anchor).
func (c *clock) at(tsc uint64) int64 {
	if k := c.cal.Load(); k != nil {
		if d := tsc - k.tsc; d < k.span {
			return k.ns + k.convert(d)
		}
	}
	return c.anchor()
}

// convert returns d ticks in ns.
func (k *tscCal) convert(d uint64) int64 {
	hi, lo := bits.Mul64(d, k.mult)
	return int64(hi<<32 | lo>>32)
}

// anchor reads ref, and takes an anchor if no other goroutine is taking
// one: checks the conversion in use, measures the rate and publishes a
// conversion from there.
func (c *clock) anchor() int64 {
	if c.read == nil || !c.mu.TryLock() {
		return c.ref()
	}
	defer c.mu.Unlock()
	a := c.ref()
	tsc := c.read()
	b := c.ref()
	if b-a > int64(tscBracket) {
		return b
	}
	cur := tscAnchor{tsc, a + (b-a)/2}
	if k := c.cal.Load(); k != nil && !k.holds(cur) {
		c.cal.Store(nil)
		c.base, c.next = cur, tscAnchor{}
		return cur.ns
	}
	k := c.measure(cur)
	if k == nil {
		return cur.ns
	}
	c.cal.Store(k)
	switch {
	case c.next.tsc == 0 && cur.ns-c.base.ns >= int64(tscBaseAge):
		c.next = cur
	case c.next.tsc != 0 && cur.ns-c.next.ns >= int64(tscBaseAge):
		c.base, c.next = c.next, cur
	}
	return cur.ns
}

// holds reports whether k converted the counter to within tscTolerance/2
// of ref up to its span, judged at a later anchor (its error grows with
// the ticks converted, and is scaled back to the span). An anchor too far
// past k to judge it, or before it, is no evidence against it.
func (k *tscCal) holds(cur tscAnchor) bool {
	d := cur.tsc - k.tsc
	if d == 0 || d > 4*k.span {
		return true
	}
	drift := k.ns + k.convert(d) - cur.ns
	if drift < 0 {
		drift = -drift
	}
	if d < k.span {
		return drift < int64(tscTolerance/2)
	}
	return uint64(drift) < uint64(tscTolerance/2)*d/k.span
}

// measure returns the conversion from cur with the rate measured since the
// baseline, or nil if there is none yet (the baseline is too recent, or
// was reset because the readings made no sense).
func (c *clock) measure(cur tscAnchor) *tscCal {
	dn, dt := cur.ns-c.base.ns, cur.tsc-c.base.tsc
	if c.base.tsc == 0 || dn < 0 || int64(dt) <= 0 {
		c.base, c.next = cur, tscAnchor{}
		return nil
	}
	if dn < int64(tscMinBase) {
		return nil
	}
	if uint64(dn)>>32 >= dt {
		c.base, c.next = cur, tscAnchor{}
		return nil
	}
	mult, _ := bits.Div64(uint64(dn)>>32, uint64(dn)<<32, dt)
	// A counter of 10 MHz to 100 GHz: anything else is not one.
	if mult < 1<<32/100 || mult > 100<<32 {
		c.base, c.next = cur, tscAnchor{}
		return nil
	}
	span, _ := bits.Div64(uint64(tscSpan)>>32, uint64(tscSpan)<<32, mult)
	return &tscCal{tscAnchor: cur, span: span, mult: mult}
}
