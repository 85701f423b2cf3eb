package bucket

import (
	"fmt"
	"math"
	"testing"
)

// Units and time anchors of the test scripts. All times are Unix ns.
const (
	ns     int64 = 1
	ms           = Millisecond
	sec          = 1000 * ms
	minute       = 60 * sec
	hour         = 60 * minute

	// t0 is 2023-11-14T22:13:20Z, a multiple of every window the scripts use.
	t0 = 1_700_000_000 * sec

	maxI64 int64 = math.MaxInt64
	minI64 int64 = math.MinInt64
)

// step is one request of a script: cost tokens at time at with flags f, the
// Decision wanted (its Limit is filled in by run) and whether the state must
// change.
type step struct {
	at      int64
	cost    int64
	f       Flags
	want    Decision
	changed bool
}

// allow and deny build the wanted Decisions of a script.
func allow(remaining, resetAfter int64) Decision {
	return Decision{Allowed: true, Remaining: remaining, RetryAfter: -1, ResetAfter: resetAfter}
}

func deny(remaining, retryAfter, resetAfter int64) Decision {
	return Decision{Remaining: remaining, RetryAfter: retryAfter, ResetAfter: resetAfter}
}

// wantLimit is Decision.Limit for l, computed independently of the package.
func wantLimit(l Limit) int64 {
	switch l.Algorithm {
	case GCRA:
		return l.Burst + 1
	case Pacer:
		interval := l.Period / l.Count
		if l.Period%l.Count != 0 {
			interval++
		}
		if l.MaxDelay/interval == maxI64 {
			return maxI64
		}
		return l.MaxDelay/interval + 1
	}
	return l.Max
}

// run applies the steps in order to s under l and reports every Decision,
// changed flag or state that is not as wanted. It also checks, at every
// step, that Apply is deterministic and that changed tells the truth.
func run(t *testing.T, l Limit, s *State, steps []step) {
	t.Helper()
	if err := l.Validate(); err != nil {
		t.Fatalf("Validate(%+v) = %v", l, err)
	}
	for i, st := range steps {
		before := *s
		again := *s
		d, changed := l.Apply(st.at, s, st.cost, st.f)
		want := st.want
		want.Limit = wantLimit(l)
		if d != want || changed != st.changed {
			t.Errorf("step %d: Apply(at=%d (t0%+d), cost=%d, %s) =\n\t%+v, changed %v; want\n\t%+v, changed %v",
				i, st.at, st.at-t0, st.cost, flagNames(st.f), d, changed, want, st.changed)
		}
		if changed != (*s != before) {
			t.Errorf("step %d: changed = %v but state went %v -> %v", i, changed, before, *s)
		}
		if d2, c2 := l.Apply(st.at, &again, st.cost, st.f); d2 != d || c2 != changed || again != *s {
			t.Errorf("step %d: Apply is not deterministic: %+v %v %v, then %+v %v %v", i, d, changed, *s, d2, c2, again)
		}
	}
}

// newBucket returns the state of a new bucket at now.
func newBucket(l Limit, now int64) *State {
	var s State
	l.Init(now, &s)
	return &s
}

// testLimits is one valid Limit per algorithm, for the tests that cover
// every algorithm.
var testLimits = []Limit{
	{Algorithm: TokenBucket, Max: 10, RefillTime: sec, RefillAmount: 2},
	{Algorithm: GCRA, Burst: 4, Count: 5, Period: sec},
	{Algorithm: FixedWindow, Max: 10, Window: sec},
	{Algorithm: SlidingWindow, Max: 10, Window: sec},
	{Algorithm: Pacer, Count: 5, Period: sec, MaxDelay: 2 * sec},
}

// flagNames returns the set flags joined by "|", "0" for none.
func flagNames(f Flags) string {
	if f == 0 {
		return "0"
	}
	var out string
	for _, n := range []struct {
		f    Flags
		name string
	}{{Strict, "Strict"}, {Smyte, "Smyte"}, {Cell, "Cell"}} {
		if f&n.f != 0 {
			out += "|" + n.name
			f &^= n.f
		}
	}
	if f != 0 {
		out += fmt.Sprintf("|%#x", uint8(f))
	}
	return out[1:]
}
