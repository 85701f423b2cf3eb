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
		{1, MaxDuration, MaxDuration},
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
	l := Limit{Algorithm: Pacer, Count: 1, Period: MaxDuration, MaxDelay: 0} // I = MaxDuration
	s := newBucket(l, MaxTime)
	run(t, l, s, []step{
		{MaxTime, 1, 0, paced(0, 0, MaxDuration), true}, // next = MaxTime+MaxDuration exactly
		{MaxTime + 1, 1, 0, deny(0, MaxDuration-1, MaxDuration-1), false},
		// Past MaxTime: a slot that would end past MaxInt64 is never given.
		{MaxTime + MaxDuration, 1, 0, deny(1, -1, 0), false},
		{maxI64, 0, 0, paced(0, 1, 0), false},
		{maxI64, 1, 0, deny(1, -1, 0), false},
	})

	l = Limit{Algorithm: Pacer, Count: 1, Period: 1, MaxDelay: MaxDuration - 1} // Limit MaxDuration
	s = newBucket(l, 0)
	run(t, l, s, []step{
		{0, 0, 0, paced(0, MaxDuration, 0), false},
		{0, MaxDuration, 0, paced(0, 0, MaxDuration), true},
		{0, 1, 0, deny(0, 1, MaxDuration), false},
		{1, 1, 0, paced(MaxDuration-1, 0, MaxDuration), true},
	})
	for _, l := range []Limit{
		{Algorithm: Pacer, Count: 1, Period: 1, MaxDelay: MaxDuration},
		{Algorithm: Pacer, Count: 2, Period: MaxDuration, MaxDelay: MaxDuration/2 + 1},
	} {
		if err := l.Validate(); !errors.Is(err, ErrOverflow) {
			t.Errorf("Validate(%+v) = %v, want ErrOverflow", l, err)
		}
	}
}

func TestPacerRefundAndDrained(t *testing.T) {
	l := Limit{Algorithm: Pacer, Count: 4, Period: sec, MaxDelay: 500 * ms}
	var s State
	l.Drained(t0, &s, nil)
	run(t, l, &s, []step{
		// As if a request had just taken the slot at the longest delay.
		{t0, 1, 0, deny(0, 250*ms, 750*ms), false},
		{t0 + 250*ms, 1, 0, paced(500*ms, 0, 750*ms), true},
	})
	d, changed := l.Refund(t0+250*ms, &s, 2, 0)
	if want := paced(250*ms, 2, 250*ms); !changed || d.Remaining != want.Remaining || d.Delay != want.Delay {
		t.Errorf("Refund 2 = %+v, %v; want %+v", d, changed, want)
	}
	if _, changed = l.Refund(t0+250*ms, &s, maxI64, 0); !changed || s[pacerNext] != t0+250*ms {
		t.Errorf("Refund MaxInt64: state %v, want next = now", s)
	}
}
