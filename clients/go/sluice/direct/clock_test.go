package direct

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/cputime"
	"github.com/sluicehq/sluice/internal/engine"
)

// fakeTime is a counter and a reference clock the tests move by hand: the
// counter at hz, the reference at the counter's pace times (1 + ppm/1e6)
// (the monotonic clock's slewing), plus any step.
type fakeTime struct {
	tsc   uint64
	ns    int64
	frac  float64 // the reference's ns not yet whole
	hz    float64
	ppm   float64
	reads int // reference reads
	// slow, if set, is how far the reference moves between two of its
	// reads around a counter read: a thread preempted there.
	slow int64
}

func (f *fakeTime) ref() int64 {
	f.reads++
	if f.slow > 0 && f.reads%2 == 0 {
		f.advance(time.Duration(f.slow))
	}
	return f.ns
}

func (f *fakeTime) read() uint64 { return f.tsc }

// advance moves both clocks by d of the counter's time.
func (f *fakeTime) advance(d time.Duration) {
	f.tsc += uint64(float64(d) * f.hz / 1e9)
	x := float64(d)*(1+f.ppm/1e6) + f.frac
	f.ns += int64(x)
	f.frac = x - float64(int64(x))
}

func fakeClock(f *fakeTime) *clock {
	return &clock{ref: f.ref, read: f.read}
}

// Over ten simulated seconds of readings at random intervals, with the
// reference slewing by up to 500 ppm and changing its slew, the clock
// stays within tscTolerance of the reference, measures the rate over a
// recent baseline, and converts the counter for nearly every reading.
func TestClock_withinTolerance(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, hz := range []float64{2.994374e9, 1e9, 100e6} {
		f := &fakeTime{tsc: 1 << 40, ns: 1_700_000_000e9, hz: hz}
		c := fakeClock(f)
		var worst time.Duration
		for i := range 2_000_000 {
			if i%200_000 == 0 {
				f.ppm = rng.Float64()*1000 - 500
			}
			f.advance(time.Duration(rng.IntN(10_000))) // up to 10 µs
			got := c.at(f.tsc)
			want := f.ns
			if d := time.Duration(got - want); d > worst || -d > worst {
				worst = max(d, -d)
			}
			// The rate follows the reference's slew: its baseline is renewed.
			if age := time.Duration(f.ns - c.base.ns); age > 2*tscBaseAge+10*tscSpan {
				t.Fatalf("%g Hz: the rate's baseline is %v old, want at most %v", hz, age, 2*tscBaseAge+10*tscSpan)
			}
		}
		if worst > tscTolerance {
			t.Errorf("%g Hz: the clock was %v from the reference, want at most %v", hz, worst, tscTolerance)
		}
		if f.reads > 2_000_000/50 {
			t.Errorf("%g Hz: %d reads of the reference for 2,000,000 readings: the counter is not used", hz, f.reads)
		}
		t.Logf("%g Hz: at most %v from the reference, %d reference reads", hz, worst, f.reads)
	}
}

// A reference read that is slow around the counter's read (a preempted
// thread) takes no anchor: the clock reads the reference until one is
// quick again, and never converts with a rate measured on it.
func TestClock_slowAnchorTakesNone(t *testing.T) {
	f := &fakeTime{tsc: 1 << 40, ns: 1e18, hz: 3e9, slow: int64(tscBracket) + 1}
	c := fakeClock(f)
	for range 100 {
		f.advance(time.Millisecond)
		if got := c.at(f.tsc); got != f.ns {
			t.Fatalf("clock %d, reference %d: a slow anchor was used", got, f.ns)
		}
	}
	if c.cal.Load() != nil {
		t.Fatal("a conversion was published from slow anchors")
	}
	f.slow = 0
	for range 100 {
		f.advance(time.Millisecond)
		c.at(f.tsc)
	}
	if c.cal.Load() == nil {
		t.Fatal("quick anchors published no conversion")
	}
}

// calibrated returns a clock on a 3 GHz counter after 20 ms of readings,
// converting it.
func calibrated(t *testing.T) (*fakeTime, *clock) {
	t.Helper()
	f := &fakeTime{tsc: 1 << 40, ns: 1e18, hz: 3e9}
	c := fakeClock(f)
	for range 200 {
		f.advance(100 * time.Microsecond)
		c.at(f.tsc)
	}
	if c.cal.Load() == nil {
		t.Fatal("no conversion after 20 ms of readings")
	}
	return f, c
}

// A reference that steps (forward, or a counter that changes its rate) is
// followed: the conversion that disagrees with it is dropped at the next
// anchor, at most tscSpan of counter time later, and the clock reads the
// reference until it has measured the rate again.
func TestClock_followsAStep(t *testing.T) {
	for _, step := range []time.Duration{time.Hour, 50 * time.Microsecond, -time.Hour} {
		f, c := calibrated(t)
		f.ns += int64(step)
		followed := false
		for range 2 * int(tscSpan/time.Microsecond) {
			f.advance(time.Microsecond)
			if got := c.at(f.tsc); got == f.ns {
				followed = true
				break
			}
		}
		if !followed {
			t.Fatalf("step %v: not followed within %v", step, 2*tscSpan)
		}
		if c.cal.Load() != nil {
			t.Fatalf("step %v: the conversion that missed it is still used", step)
		}
	}
	f, c := calibrated(t)
	f.hz *= 1.01 // 1% faster: 10 µs off over a span
	for range 3 * int(tscSpan/time.Microsecond) {
		f.advance(time.Microsecond)
		c.at(f.tsc)
	}
	if c.cal.Load() != nil {
		t.Fatal("a counter that changed its rate by 1% is still converted")
	}
}

// The clock a Client reads, on this machine's counter if it is used,
// stays within tscTolerance of the sidecar's clock as the process reads it
// (engine.Clock): each reading lies between a reading of the reference
// before it and one after it, widened by the tolerance.
func TestClock_real(t *testing.T) {
	ref := engine.Clock(0)
	c := newClock(ref)
	if c.read == nil {
		t.Log("the time-stamp counter is not used here: the clock is the reference")
	}
	deadline := time.Now().Add(30 * time.Second)
	for c.read != nil && c.cal.Load() == nil && time.Now().Before(deadline) {
		c.now()
	}
	if c.read != nil && c.cal.Load() == nil {
		t.Fatal("no conversion measured in 30 s")
	}
	end := time.Now().Add(50 * time.Millisecond)
	n := 0
	for time.Now().Before(end) {
		before := ref()
		got := c.now()
		after := ref()
		if got < before-int64(tscTolerance) || got > after+int64(tscTolerance) {
			t.Fatalf("clock %d outside [%d, %d] widened by %v", got, before, after, tscTolerance)
		}
		n++
	}
	t.Logf("%d readings within %v", n, tscTolerance)
}

// The clock's read alone: the sidecar's (engine.Clock, the monotonic
// clock through the vDSO) and the Client's (the time-stamp counter where
// it is used), in CPU time per read.
func BenchmarkClock(b *testing.B) {
	ref := engine.Clock(0)
	c := newClock(ref)
	for _, bc := range []struct {
		name string
		read func() int64
	}{{"engine", ref}, {"client", c.now}} {
		b.Run(bc.name, func(b *testing.B) {
			var sum int64
			cpu := cputime.Start()
			for b.Loop() {
				sum += bc.read()
			}
			cpu.Report(b)
			if sum == 0 {
				b.Log(sum)
			}
		})
	}
}
