package bucket

import (
	"errors"
	"testing"
)

// paced is the wanted Decision of an allowed pacer request that must wait
// delay ns.
func paced(delay, remaining, resetAfter int64) Decision {
	d := allow(remaining, resetAfter)
	d.Delay = delay
	return d
}

// TestPacer is CALLR's example: 4 calls per second are spaced 250 ms apart;
// a caller may be asked to wait up to 500 ms, so 3 fit at once.
func TestPacer(t *testing.T) {
	l := Limit{Algorithm: Pacer, Count: 4, Period: sec, MaxDelay: 500 * ms}
	s := newBucket(l, t0)
	run(t, l, s, []step{
		{t0, 1, 0, paced(0, 2, 250*ms), true},
		{t0, 1, 0, paced(250*ms, 1, 500*ms), true},
		{t0, 1, 0, paced(500*ms, 0, 750*ms), true}, // a delay of exactly MaxDelay is allowed
		{t0, 1, 0, deny(0, 250*ms, 750*ms), false},
		{t0 + 100*ms, 0, 0, deny(0, 150*ms, 650*ms), false}, // a peek is denied when the queue is full
		{t0 + 250*ms, 2, 0, paced(500*ms, 0, sec), true},    // cost 2 takes two slots
		{t0 + 2*sec, 0, 0, paced(0, 3, 0), false},
		{t0 + 2*sec, 1, 0, paced(0, 2, 250*ms), true},     // an idle queue starts at now
		{t0 + sec, 1, 0, deny(0, 750*ms, 1250*ms), false}, // backwards: the later slot still holds
	})
	if *s != (State{t0 + 2250*ms, 0, 0}) {
		t.Errorf("state = %v", *s)
	}
}

// TestPacerInterval: slots are ceil(Period/Count) apart, so two events are
// never closer than 1/rate, even when the division is not exact.
func TestPacerInterval(t *testing.T) {
	for _, tt := range []struct{ count, period, want int64 }{
		{4, sec, 250 * ms},
		{3, sec, 333_333_334},
		{1, maxI64, maxI64},
		{2_000_000_000, sec, 1}, // faster than 1 per ns: 1 ns
	} {
		l := Limit{Algorithm: Pacer, Count: tt.count, Period: tt.period}
		if err := l.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v", l, err)
		}
		if got := l.pacerInterval(); got != tt.want || got*tt.count < tt.period {
			t.Errorf("pacerInterval(%d per %d) = %d, want %d", tt.count, tt.period, got, tt.want)
		}
	}
	for _, l := range []Limit{
		{Algorithm: Pacer, Count: 0, Period: sec},
		{Algorithm: Pacer, Count: 1, Period: 0},
	} {
		if err := l.Validate(); !errors.Is(err, ErrZeroRate) {
			t.Errorf("Validate(%+v) = %v, want ErrZeroRate", l, err)
		}
	}
}

// TestPacerNoDelay: MaxDelay 0 admits only a request whose slot is now.
func TestPacerNoDelay(t *testing.T) {
	l := Limit{Algorithm: Pacer, Count: 3, Period: sec, MaxDelay: 0} // I = 333333334 ns
	s := newBucket(l, t0)
	run(t, l, s, []step{
		{t0, 1, 0, paced(0, 0, 333_333_334), true},
		{t0 + 333_333_333, 1, 0, deny(0, 1, 1), false},
		{t0 + 333_333_334, 5, 0, paced(0, 0, 5*333_333_334), true},
	})
}

func TestPacerExtremes(t *testing.T) {
	l := Limit{Algorithm: Pacer, Count: 1, Period: maxI64, MaxDelay: maxI64} // I = MaxInt64
	s := newBucket(l, 0)
	run(t, l, s, []step{
		{0, 1, 0, paced(0, 1, maxI64), true}, // next = MaxInt64 exactly
		{1, 1, 0, deny(1, -1, maxI64-1), false},
		{minI64, 0, 0, paced(maxI64, 1, maxI64), false}, // next-now saturates; within MaxDelay
		{maxI64, maxI64, 0, deny(2, -1, 0), false},      // slots past MaxInt64: never
	})

	l = Limit{Algorithm: Pacer, Count: 1, Period: 1, MaxDelay: maxI64} // Limit MaxInt64/1+1 saturates
	s = newBucket(l, 0)
	run(t, l, s, []step{
		{0, 0, 0, paced(0, maxI64, 0), false},
		{0, maxI64 - 1, 0, paced(0, 2, maxI64-1), true},
		{0, 2, 0, deny(2, -1, maxI64-1), false}, // slots past MaxInt64: never
		{maxI64, 0, 0, paced(0, maxI64, 0), false},
	})
}

func TestPacerRefundAndDrained(t *testing.T) {
	l := Limit{Algorithm: Pacer, Count: 4, Period: sec, MaxDelay: 500 * ms}
	var s State
	l.Drained(t0, &s)
	run(t, l, &s, []step{
		{t0, 1, 0, paced(500*ms, 0, 750*ms), true}, // one request, with the longest delay
		{t0, 1, 0, deny(0, 250*ms, 750*ms), false},
	})
	d, changed := l.Refund(t0, &s, 2)
	if want := paced(250*ms, 2, 250*ms); !changed || d.Remaining != want.Remaining || d.Delay != want.Delay {
		t.Errorf("Refund 2 = %+v, %v; want %+v", d, changed, want)
	}
	if _, changed = l.Refund(t0, &s, maxI64); !changed || s[pacerNext] != t0 {
		t.Errorf("Refund MaxInt64: state %v, want next = now", s)
	}
}
