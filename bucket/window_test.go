package bucket

import "testing"

func TestWindowStart(t *testing.T) {
	for _, tt := range []struct{ now, w, want int64 }{
		{t0 + 1500*ms, sec, t0 + sec},
		{t0, sec, t0},
		{0, sec, 0},
		{-1, sec, -sec}, // floor, not truncation
		{-sec, sec, -sec},
		{-sec - 1, sec, -2 * sec},
		{maxI64, sec, maxI64 - maxI64%sec},
		{maxI64, maxI64, maxI64},
		{maxI64 - 1, maxI64, 0},
		{minI64 + 1, maxI64, minI64 + 1},
		{minI64, sec, minI64}, // the aligned start is below MinInt64: saturated
		{minI64, maxI64, minI64},
	} {
		if got := windowStart(tt.now, tt.w); got != tt.want {
			t.Errorf("windowStart(%d, %d) = %d, want %d", tt.now, tt.w, got, tt.want)
		}
	}
}

func TestFixedWindow(t *testing.T) {
	l := Limit{Algorithm: FixedWindow, Max: 3, Window: sec}
	s := newBucket(l, t0+200*ms)
	run(t, l, s, []step{
		{t0 + 200*ms, 2, 0, allow(1, 800*ms), true},
		{t0 + 300*ms, 2, 0, deny(1, 700*ms, 700*ms), false}, // a denial is not counted
		{t0 + 400*ms, 1, 0, allow(0, 600*ms), true},
		{t0 + 999*ms, 0, 0, allow(0, ms), false},
		{t0 + sec, 4, 0, deny(3, -1, 0), false}, // cost > Max: never
		{t0 + sec, 3, 0, allow(0, sec), true},
		// Backwards into the previous window: the stored, later window still
		// counts, so going back in time opens nothing.
		{t0 + 500*ms, 1, 0, deny(0, 1500*ms, 1500*ms), false},
		{t0 + 3500*ms, 1, 0, allow(2, 500*ms), true},
	})
	if *s != (State{t0 + 3*sec, 1, 0}) {
		t.Errorf("state = %v", *s)
	}
}

// TestFixedWindowNegativeTime: windows are aligned by floor division, so
// they are right before the epoch too.
func TestFixedWindowNegativeTime(t *testing.T) {
	l := Limit{Algorithm: FixedWindow, Max: 1, Window: sec}
	s := newBucket(l, -500*ms)
	run(t, l, s, []step{
		{-500 * ms, 1, 0, allow(0, 500*ms), true}, // window [-1 s, 0)
		{-1, 1, 0, deny(0, 1, 1), false},
		{0, 1, 0, allow(0, sec), true},
	})
}

func TestFixedWindowExtremes(t *testing.T) {
	l := Limit{Algorithm: FixedWindow, Max: maxI64, Window: MaxDuration}
	start := MaxTime / MaxDuration * MaxDuration
	end := start + MaxDuration // the window holding MaxTime ends within the int64 range
	s := newBucket(l, MaxTime)
	run(t, l, s, []step{
		{MaxTime, maxI64, 0, allow(0, end-MaxTime), true},
		{MaxTime, 1, 0, deny(0, end-MaxTime, end-MaxTime), false},
		{end, 1, 0, allow(maxI64-1, maxI64-end), true}, // past MaxTime the window's end saturates
		{end, maxI64, 0, deny(maxI64-1, maxI64-end, maxI64-end), false},
	})

	// The window holding MinInt64 starts below the int64 range: it is
	// saturated to [MinInt64, MinInt64+Window), which ends later than the
	// truth, never earlier.
	l = Limit{Algorithm: FixedWindow, Max: 2, Window: sec}
	s = newBucket(l, minI64)
	run(t, l, s, []step{
		{minI64, 1, 0, allow(1, sec), true},
		{minI64 + 1, maxI64, 0, deny(1, -1, sec-1), false},
	})

	// Corrupt counts are clamped when read.
	l = Limit{Algorithm: FixedWindow, Max: 3, Window: sec}
	s = &State{t0, -5, 0}
	run(t, l, s, []step{{t0, 3, 0, allow(0, sec), true}})
	s = &State{t0, maxI64, 0}
	run(t, l, s, []step{{t0, 1, 0, deny(0, sec, sec), false}})
}

func TestFixedWindowRefundAndDrained(t *testing.T) {
	l := Limit{Algorithm: FixedWindow, Max: 3, Window: sec}
	var s State
	l.Drained(t0+100*ms, &s, nil)
	run(t, l, &s, []step{{t0 + 100*ms, 1, 0, deny(0, 900*ms, 900*ms), false}})
	for _, tt := range []struct {
		at, amount int64
		remaining  int64
		changed    bool
		state      State
	}{
		{t0 + 200*ms, 2, 2, true, State{t0, 1, 0}},
		{t0 + 200*ms, 5, 3, true, State{t0, 0, 0}}, // capped at fresh
		{t0 + 200*ms, 1, 3, false, State{t0, 0, 0}},
		{t0 + 2*sec, 1, 3, false, State{t0, 0, 0}},
	} {
		d, changed := l.Refund(tt.at, &s, tt.amount, 0)
		if d.Remaining != tt.remaining || changed != tt.changed || s != tt.state || !d.Allowed {
			t.Errorf("Refund(t0%+d, %d) = %+v, %v, state %v; want remaining %d, %v, %v",
				tt.at-t0, tt.amount, d, changed, s, tt.remaining, tt.changed, tt.state)
		}
	}
}

// TestSlidingWindow follows the weighted estimate through three windows;
// RetryAfter is the exact first nanosecond the request passes.
func TestSlidingWindow(t *testing.T) {
	l := Limit{Algorithm: SlidingWindow, Max: 10, Window: sec}
	s := newBucket(l, t0)
	run(t, l, s, []step{
		{t0 + 100*ms, 6, 0, allow(4, 1900*ms), true},
		// 6+5 > 10 now; in the next window 6*(1-e)+5 <= 10 from e = 166666667 ns.
		{t0 + 900*ms, 5, 0, deny(4, 100*ms+166_666_667, 1100*ms), false},
		{t0 + sec + 166_666_666, 5, 0, deny(4, 1, 833_333_334), false},
		{t0 + sec + 166_666_667, 5, 0, allow(0, 1_833_333_333), true},
		{t0 + 1500*ms, 1, 0, allow(1, 1500*ms), true}, // estimate 6*0.5+5 = 8
		{t0 + 1500*ms, 2, 0, deny(1, 166_666_667, 1500*ms), false},
		// Backwards into the window before: the stored window applies with
		// its previous count at full weight, so even a peek is denied.
		{t0 + 500*ms, 0, 0, deny(0, 833_333_334, 2500*ms), false},
		// Next window: prev 6 at half weight leaves no room for 10 until
		// the window after, where both counts have aged out.
		{t0 + 2500*ms, 10, 0, deny(7, 500*ms, 500*ms), false},
		{t0 + 4*sec, 10, 0, allow(0, 2*sec), true},
		{t0 + 4*sec, 11, 0, deny(0, -1, 2*sec), false},
	})
	if *s != (State{t0 + 4*sec, 0, 10}) {
		t.Errorf("state = %v", *s)
	}
}

// TestSlidingWindowExact: the comparison is exact in integers,
// prev*(W-e) + (curr+cost)*W <= Max*W, where the float estimate
// prev*((W-e)/W) = 25*0.56 rounds to 14.000000000000002 and would deny.
func TestSlidingWindowExact(t *testing.T) {
	l := Limit{Algorithm: SlidingWindow, Max: 25, Window: 100 * ms}
	s := &State{0, 0, 25}
	run(t, l, s, []step{
		{144*ms - 1, 11, 0, deny(10, 1, 56*ms+1), false},
		{144 * ms, 11, 0, allow(0, 156*ms), true}, // estimate 25*0.56 = 14, +11 = Max
	})
}

func TestSlidingWindowExtremes(t *testing.T) {
	w := MaxDuration
	l := Limit{Algorithm: SlidingWindow, Max: maxI64, Window: w}
	s := newBucket(l, 0)
	run(t, l, s, []step{
		{0, maxI64, 0, allow(0, 2*w), true},
		{w - 1, 1, 0, deny(0, 2, w+1), false},
		// In window [w, 2w): prev = MaxInt64 at full weight; the products
		// need 126 bits.
		{w, 0, 0, allow(0, w), false},
		{w, 1, 0, deny(0, 1, w), false},
		{w + 1, 1, 0, allow(3, 2*w-1), true}, // prev weighs MaxInt64*(w-1)/w: 4 left
		{w + 1, maxI64, 0, deny(3, 2*w-1, 2*w-1), false},
	})

	// Two windows apart by more than MaxInt64: start-stored overflows int64
	// but the roll is still exact (both counts age out).
	l = Limit{Algorithm: SlidingWindow, Max: 5, Window: w}
	s = &State{-maxI64, 5, 5}
	run(t, l, s, []step{{maxI64, 5, 0, allow(0, 0), true}})

	// Corrupt counts are clamped when read.
	l = Limit{Algorithm: SlidingWindow, Max: 3, Window: sec}
	s = &State{t0, -7, minI64}
	run(t, l, s, []step{{t0, 3, 0, allow(0, 2*sec), true}})
}

func TestSlidingWindowRefundAndDrained(t *testing.T) {
	l := Limit{Algorithm: SlidingWindow, Max: 4, Window: sec}
	var s State
	l.Drained(t0+500*ms, &s, nil)
	if s != (State{t0, 0, 4}) {
		t.Fatalf("Drained = %v", s)
	}
	run(t, l, &s, []step{{t0 + 500*ms, 1, 0, deny(0, 750*ms, 1500*ms), false}})

	s = State{t0, 2, 1}
	for _, tt := range []struct {
		at, amount int64
		changed    bool
		state      State
	}{
		{t0 + 500*ms, 2, true, State{t0, 1, 0}}, // current first, then previous
		{t0 + sec, 1, false, State{t0, 1, 0}},   // rolled: nothing left to refund
		{t0 + 500*ms, 9, true, State{t0, 0, 0}},
	} {
		_, changed := l.Refund(tt.at, &s, tt.amount, 0)
		if changed != tt.changed || s != tt.state {
			t.Errorf("Refund(t0%+d, %d) = %v, state %v; want %v, %v", tt.at-t0, tt.amount, changed, s, tt.changed, tt.state)
		}
	}
}
