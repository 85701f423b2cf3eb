package bucket

import "testing"

// TestTokenBucketSmyteGetReduce replays smyte/ratelimit's
// RateLimitHandlerTest GetReduceCommands (anchor-semantics.md S1), all 16
// steps, through Apply with the Smyte flag. RL.GET is cost 0 (and, like
// smyte's GET, does not create a missing bucket); AT is in seconds for the
// plain commands and milliseconds for the P-variants.
func TestTokenBucketSmyteGetReduce(t *testing.T) {
	l := Limit{Algorithm: TokenBucket, Max: 10, RefillTime: 5 * sec, RefillAmount: 3}
	steps := []struct {
		cmd    string
		at     int64
		take   int64
		strict bool
		reply  int64
	}{
		{"rl.reduce a 10 5 refill 3 at 2", 2 * sec, 1, false, 10},
		{"rl.preduce a 10 5000 at 2000 refill 3", 2000 * ms, 1, false, 9},
		{"rl.get a 10 5 at 2 refill 3", 2 * sec, 0, false, 8},
		{"rl.pget a 10 5000 refill 3 at 2000", 2000 * ms, 0, false, 8},
		{"rl.reduce a 10 5 at 2 refill 3 take 5", 2 * sec, 5, false, 8},
		{"rl.preduce a 10 5000 refill 3 take 5 at 2000", 2000 * ms, 5, false, 3}, // insufficient: drained to 0
		{"rl.get a 10 5 at 2 refill 3", 2 * sec, 0, false, 0},
		{"rl.get a 10 5 at 8 refill 3", 8 * sec, 0, false, 3},
		{"rl.reduce a 10 5 at 8 take 2 refill 3", 8 * sec, 2, false, 3},
		{"rl.preduce a 10 5000 at 8000 refill 3", 8000 * ms, 1, false, 1},
		{"rl.preduce a 10 5000 at 9000 refill 3", 9000 * ms, 1, false, 0},
		{"rl.get a 10 5 at 13 refill 3", 13 * sec, 0, false, 3},
		{"rl.reduce a 10 5 at 14 refill 3 take 4 strict", 14 * sec, 4, true, 3},
		{"rl.reduce a 10 5 at 16 refill 3 take 4 strict", 16 * sec, 4, true, 0},
		{"rl.reduce a 10 5 at 18 refill 3 take 1 strict", 18 * sec, 1, true, 0}, // non-strict would give 3
		{"rl.reduce a 10 5 at 23 refill 3 take 2 strict", 23 * sec, 2, true, 3},
	}
	var s *State // nil: the key is missing
	for i, st := range steps {
		f := Smyte
		if st.strict {
			f |= Strict
		}
		cur := s
		if cur == nil {
			cur = newBucket(l, st.at)
		}
		d, _ := l.Apply(st.at, cur, st.take, f)
		if st.take > 0 {
			s = cur // a write creates the key
		}
		if d.Remaining != st.reply || d.Allowed != (st.reply >= st.take) {
			t.Errorf("step %d: %s: Remaining %d, Allowed %v; want reply :%d", i+1, st.cmd, d.Remaining, d.Allowed, st.reply)
		}
	}
}

// TestTokenBucketSmyteReadme is smyte/ratelimit's README example
// (anchor-semantics.md S4): two per minute, all calls within 60 s.
func TestTokenBucketSmyteReadme(t *testing.T) {
	l := Limit{Algorithm: TokenBucket, Max: 2, RefillTime: minute, RefillAmount: 2}
	s := newBucket(l, t0)
	run(t, l, s, []step{
		{t0, 1, Smyte, allow(2, minute), true}, // RL.REDUCE twoPerMin 2 60 -> :2
		{t0 + sec, 1, Smyte, allow(1, 59*sec), true},
		{t0 + 2*sec, 1, Smyte, deny(0, 58*sec, 58*sec), false}, // drains 0 to 0: no change
		{t0 + 3*sec, 1, Smyte, deny(0, 57*sec, 57*sec), false},
	})
	// The same traffic natively: Remaining is what is left, and a denial
	// changes nothing.
	s = newBucket(l, t0)
	run(t, l, s, []step{
		{t0, 1, 0, allow(1, minute), true},
		{t0 + sec, 1, 0, allow(0, 59*sec), true},
		{t0 + 2*sec, 1, 0, deny(0, 58*sec, 58*sec), false},
		{t0 + 59*sec, 1, 0, deny(0, sec, sec), false},
		{t0 + minute, 1, 0, allow(1, minute), true},
	})
}

// TestTokenBucketRefill is smyte/ratelimit's adjustAmount unit test
// (anchor-semantics.md S6): discrete refill, phase kept, capped at max.
func TestTokenBucketRefill(t *testing.T) {
	l := Limit{Algorithm: TokenBucket, Max: 1000, RefillTime: 60000 * ms, RefillAmount: 100}
	for _, tt := range []struct{ now, adjusted, refilledAt int64 }{
		{53000 * ms, 100, 2000 * ms},
		{123000 * ms, 300, 122000 * ms},
		{1312000 * ms, 1000, 1262000 * ms}, // capped
		{1000 * ms, 100, 2000 * ms},        // backwards: no refill, clock kept
	} {
		s := State{100, 2000 * ms, 0}
		adjusted, at := l.refill(tt.now, &s)
		if adjusted != tt.adjusted || at != tt.refilledAt {
			t.Errorf("refill(%d ms) = %d, %d ms; want %d, %d ms", tt.now/ms, adjusted, at/ms, tt.adjusted, tt.refilledAt/ms)
		}
	}
}

func TestTokenBucketNative(t *testing.T) {
	l := Limit{Algorithm: TokenBucket, Max: 3, RefillTime: sec, RefillAmount: 1}
	s := newBucket(l, t0)
	run(t, l, s, []step{
		{t0, 1, 0, allow(2, sec), true},
		{t0, 2, 0, allow(0, 3*sec), true},
		{t0, 1, 0, deny(0, sec, 3*sec), false},
		{t0 + 500*ms, 1, 0, deny(0, 500*ms, 2500*ms), false},
		{t0 + sec, 2, 0, deny(1, sec, 2*sec), false}, // one refilled; a denial keeps it
		{t0 + 1500*ms, 0, 0, allow(1, 1500*ms), false},
		{t0 + 2999*ms, 4, 0, deny(2, -1, ms), false}, // cost > Max: never
		{t0 + 3*sec, 3, 0, allow(0, 3*sec), true},
	})
	if *s != (State{0, t0 + 3*sec, 0}) {
		t.Errorf("state = %v", *s)
	}
}

// TestTokenBucketPhase: the refill phase is anchored at the bucket's
// creation and kept while the bucket is capped, so after a drain the next
// token can come sooner than RefillTime.
func TestTokenBucketPhase(t *testing.T) {
	l := Limit{Algorithm: TokenBucket, Max: 2, RefillTime: 10 * sec, RefillAmount: 1}
	s := newBucket(l, t0)
	run(t, l, s, []step{
		{t0 + 25*sec, 2, 0, allow(0, 15*sec), true}, // clock moves to t0+20s
		{t0 + 29*sec, 1, 0, deny(0, sec, 11*sec), false},
		{t0 + 30*sec, 1, 0, allow(0, 20*sec), true},
	})
}

func TestTokenBucketStrict(t *testing.T) {
	l := Limit{Algorithm: TokenBucket, Max: 2, RefillTime: 10 * sec, RefillAmount: 1}
	s := newBucket(l, t0)
	run(t, l, s, []step{
		{t0, 1, Strict, allow(1, 10*sec), true},                 // leaves 1: clock kept
		{t0 + 5*sec, 1, Strict, allow(0, 20*sec), true},         // leaves 0: clock restarts at t0+5s
		{t0 + 14*sec, 1, Strict, deny(0, 10*sec, 20*sec), true}, // denied: clock restarts at t0+14s
		{t0 + 20*sec, 1, 0, deny(0, 4*sec, 14*sec), false},      // not strict: nothing changes
		{t0 + 24*sec, 1, Strict, allow(0, 20*sec), true},
		// Backwards: the native clock never moves back (that would mint
		// tokens later), so this strict denial changes nothing.
		{t0 + 10*sec, 1, Strict, deny(0, 24*sec, 34*sec), false},
		{t0 + 24*sec, 0, Strict, allow(0, 20*sec), false}, // a strict peek never restarts the clock
	})
	if *s != (State{0, t0 + 24*sec, 0}) {
		t.Errorf("state = %v", *s)
	}
}

// TestTokenBucketSmyteStrictBackwards: smyte/ratelimit (anchor-semantics.md
// 1.7) restarts the refill clock of a STRICT request at its AT even when
// that is earlier than the stored clock: the clock moves back and the
// bucket refills early, so a client timestamp in the past mints tokens for
// later requests. Sluice keeps the later clock: the reply is smyte's (the
// count before the deduction), the refill comes no earlier than it would
// have.
func TestTokenBucketSmyteStrictBackwards(t *testing.T) {
	l := Limit{Algorithm: TokenBucket, Max: 2, RefillTime: 10 * sec, RefillAmount: 1}
	s := &State{0, t0 + 24*sec, 0}
	run(t, l, s, []step{
		{t0 + 10*sec, 1, Smyte | Strict, deny(0, 24*sec, 34*sec), false},
		// smyte: the clock went back to t0+10s, so 1 token at t0+20s.
		{t0 + 20*sec, 0, Smyte, allow(0, 24*sec), false},
		{t0 + 34*sec, 1, Smyte | Strict, allow(1, 20*sec), true},
	})
	if *s != (State{0, t0 + 34*sec, 0}) {
		t.Errorf("state = %v", *s)
	}
}

func TestTokenBucketSmyteDenialDrains(t *testing.T) {
	l := Limit{Algorithm: TokenBucket, Max: 10, RefillTime: 5 * sec, RefillAmount: 3}
	s := &State{3, t0, 0}
	run(t, l, s, []step{
		{t0 + sec, 5, Smyte, deny(3, 9*sec, 19*sec), true}, // reply 3; drained to 0
		{t0 + sec, 0, Smyte, allow(0, 19*sec), false},
		{t0 + 2*sec, 11, Smyte, deny(0, -1, 18*sec), false}, // cost > Max; already 0, nothing refilled
		{t0 + 4*sec, 0, 0, allow(0, 16*sec), false},
	})
}

func TestTokenBucketBackwards(t *testing.T) {
	l := Limit{Algorithm: TokenBucket, Max: 2, RefillTime: 10 * sec, RefillAmount: 1}
	s := &State{1, t0 + 10*sec, 0}
	run(t, l, s, []step{
		{t0, 1, 0, allow(0, 30*sec), true}, // no refill for negative elapsed time
		{t0 + 5*sec, 1, 0, deny(0, 15*sec, 25*sec), false},
		{t0 - hour, 0, Smyte, allow(0, hour+30*sec), false},
		{t0 + 20*sec, 1, 0, allow(0, 20*sec), true},
	})
	// Strict, leaving 0 at a backwards now: the clock stays at the later
	// time, so no refill comes earlier than it would have.
	s = &State{1, t0 + 10*sec, 0}
	run(t, l, s, []step{
		{t0, 1, Strict, allow(0, 30*sec), true},
		{t0 + 19*sec, 1, 0, deny(0, sec, 11*sec), false},
	})
	if *s != (State{0, t0 + 10*sec, 0}) {
		t.Errorf("state = %v", *s)
	}
}

// TestTokenBucketExtremes: at the ends of the exact ranges (MaxTime,
// MaxDuration) nothing saturates; past MaxTime values saturate instead of
// wrapping, and nothing panics.
func TestTokenBucketExtremes(t *testing.T) {
	huge := Limit{Algorithm: TokenBucket, Max: maxI64, RefillTime: MaxDuration, RefillAmount: maxI64}
	s := newBucket(huge, MaxTime)
	end := MaxTime + MaxDuration
	run(t, huge, s, []step{
		{MaxTime, maxI64, 0, allow(0, MaxDuration), true}, // full again one step later, exactly
		{end - 1, 1, 0, deny(0, 1, 1), false},
		{end, 1, 0, allow(maxI64-1, maxI64-end), true}, // past MaxTime: the next step saturates
	})

	l := Limit{Algorithm: TokenBucket, Max: 5, RefillTime: ms, RefillAmount: maxI64}
	s = &State{0, minI64, 0} // a clock at MinInt64: elapsed saturates
	run(t, l, s, []step{
		{maxI64, 0, 0, allow(5, 0), false},
		{maxI64, maxI64, 0, deny(5, -1, 0), false},
		{maxI64, 5, Strict, allow(0, 0), true}, // the next refill saturates at MaxInt64 = now
		{maxI64, 1, 0, deny(0, 1, 0), false},
	})
	if want := (State{0, maxI64, 0}); *s != want {
		t.Errorf("state = %v, want %v", *s, want)
	}

	// Corrupt words are clamped when read: no token beyond Max, none below 0.
	l = Limit{Algorithm: TokenBucket, Max: 3, RefillTime: sec, RefillAmount: 1}
	s = &State{maxI64, t0, 0}
	run(t, l, s, []step{{t0, 1, 0, allow(2, sec), true}})
	s = &State{minI64, t0, 0}
	run(t, l, s, []step{{t0, 1, 0, deny(0, sec, 3*sec), false}})
}

func TestTokenBucketRefund(t *testing.T) {
	l := Limit{Algorithm: TokenBucket, Max: 3, RefillTime: sec, RefillAmount: 1}
	s := &State{0, t0, 0}
	for _, tt := range []struct {
		at, amount int64
		want       Decision
		changed    bool
		state      State
	}{
		{t0 + 500*ms, 1, allow(1, 1500*ms), true, State{1, t0, 0}},
		{t0 + 1500*ms, 0, allow(2, 500*ms), false, State{1, t0, 0}}, // nothing to refund
		{t0 + 1500*ms, 5, allow(3, 0), true, State{3, t0 + sec, 0}}, // capped at Max
		{t0 + 2*sec, 1, allow(3, 0), false, State{3, t0 + sec, 0}},  // already full
	} {
		d, changed := l.Refund(tt.at, s, tt.amount, 0)
		tt.want.Limit = 3
		if d != tt.want || changed != tt.changed || *s != tt.state {
			t.Errorf("Refund(t0%+d, %d) = %+v, %v, state %v; want %+v, %v, %v",
				tt.at-t0, tt.amount, d, changed, *s, tt.want, tt.changed, tt.state)
		}
	}
}

func TestTokenBucketDrained(t *testing.T) {
	l := Limit{Algorithm: TokenBucket, Max: 3, RefillTime: sec, RefillAmount: 1}
	var s State
	l.Drained(t0, &s, nil)
	run(t, l, &s, []step{
		{t0, 1, 0, deny(0, sec, 3*sec), false},
		{t0 + sec, 1, 0, allow(0, 3*sec), true},
	})
}
