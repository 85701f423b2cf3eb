package bucket

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
	_ "time/tzdata"

	"github.com/sluicehq/sluice/vocab"
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
	l.Init(now, &s, nil)
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
	{Algorithm: Quota, Max: 10, Calendar: CalDay, Every: 1},
	{Algorithm: Quota, Max: 10, Calendar: CalMonth, Every: 1, Anchor: 31, Loc: mustZone("America/New_York")},
}

// testZones are time zones for the quota tests: UTC, zones with DST on
// either hemisphere, one whose offset is not whole hours, one that skipped
// a day and one whose midnight a DST change skipped.
var testZones = []*time.Location{
	time.UTC,
	mustZone("America/New_York"),
	mustZone("Europe/Paris"),
	mustZone("Australia/Sydney"),
	mustZone("Asia/Kolkata"),
	mustZone("Australia/Lord_Howe"),
	mustZone("Pacific/Apia"),
	mustZone("America/Sao_Paulo"),
	mustZone("America/Santiago"),
	mustZone("Asia/Beirut"),
	mustZone("America/Havana"),
}

// mustZone loads a zone from Go's database (embedded by the test binary's
// import of time/tzdata, so a host without zoneinfo runs the tests too).
func mustZone(name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		panic(err)
	}
	return loc
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

// extLimits is one valid Limit per extended algorithm, for the tests that
// cover every one.
var extLimits = []Limit{
	{Algorithm: SlidingLog, Max: 10, Window: sec},
	{Algorithm: WindowCounters, Max: 10, Window: sec, Counters: 10},
	{Algorithm: WindowCounters, Max: 10, Window: sec, Counters: 60, CountDenied: true},
	{Algorithm: Concurrency, Max: 3, Lease: sec},
}

// extBucket is an extended algorithm's State with its extension.
type extBucket struct {
	s   State
	ext []int64
}

// newExtBucket returns a new bucket of l at now; l must be valid.
func newExtBucket(l Limit, now int64) *extBucket {
	b := &extBucket{ext: make([]int64, l.ExtWords())}
	l.Init(now, &b.s, b.ext)
	return b
}

// clone returns a copy of b that shares nothing with it.
func (b *extBucket) clone() *extBucket {
	return &extBucket{s: b.s, ext: append([]int64(nil), b.ext...)}
}

// equal reports whether b and c hold the same words.
func (b *extBucket) equal(c *extBucket) bool {
	if b.s != c.s || len(b.ext) != len(c.ext) {
		return false
	}
	for i := range b.ext {
		if b.ext[i] != c.ext[i] {
			return false
		}
	}
	return true
}

// extOp is what one step of an extended algorithm's script does.
type extOp uint8

const (
	opDecide  extOp = iota // Decide with cost n
	opPeek                 // Peek
	opRefund               // DecideRefund with amount n
	opAcquire              // AcquireLease under id n, wanting lease n if allowed, else 0
	opRelease              // ReleaseLease of lease n, wanting it released iff changed
)

var extOpNames = [...]string{"Decide", "Peek", "DecideRefund", "AcquireLease", "ReleaseLease"}

// extStep is one step of a script for an extended algorithm: op at time at
// with argument n, the Decision wanted (its Limit is filled in by runExt)
// and whether the state must change.
type extStep struct {
	op      extOp
	at      int64
	n       int64
	want    Decision
	changed bool
}

// do applies one operation to b and returns its Decision, whether it
// reported a change, and the lease AcquireLease returned.
func (b *extBucket) do(l *Limit, op extOp, at, n int64) (d Decision, changed bool, lease int64) {
	switch op {
	case opDecide:
		changed = l.Decide(at, &b.s, b.ext, n, 0, &d)
	case opPeek:
		l.Peek(at, &b.s, b.ext, &d)
	case opRefund:
		changed = l.DecideRefund(at, &b.s, b.ext, n, 0, &d)
	case opAcquire:
		lease, changed = l.AcquireLease(at, &b.s, b.ext, n, &d)
	case opRelease:
		_, changed = l.ReleaseLease(at, &b.s, b.ext, n, &d)
	}
	return d, changed, lease
}

// runExt applies the steps in order to b under l and reports every
// Decision, changed flag or lease that is not as wanted. At every step it
// also checks that the operation is deterministic, that changed tells the
// truth, that word 1 is the extension's ExtSum and that word 2 is untouched.
func runExt(t *testing.T, l Limit, b *extBucket, steps []extStep) {
	t.Helper()
	if err := l.Validate(); err != nil {
		t.Fatalf("Validate(%+v) = %v", l, err)
	}
	for i, st := range steps {
		before := b.clone()
		again := b.clone()
		d, changed, lease := b.do(&l, st.op, st.at, st.n)
		want := st.want
		want.Limit = l.Max
		wantLease := st.n
		if !want.Allowed {
			wantLease = 0
		}
		if d != want || changed != st.changed || (st.op == opAcquire && lease != wantLease) {
			t.Errorf("step %d: %s(at=%d (t0%+d), %d) =\n\t%+v, changed %v, lease %d; want\n\t%+v, changed %v",
				i, extOpNames[st.op], st.at, st.at-t0, st.n, d, changed, lease, want, st.changed)
		}
		if changed != !b.equal(before) {
			t.Errorf("step %d: changed = %v but the state went %v %v -> %v %v", i, changed, before.s, before.ext, b.s, b.ext)
		}
		if d2, c2, l2 := again.do(&l, st.op, st.at, st.n); d2 != d || c2 != changed || l2 != lease || !again.equal(b) {
			t.Errorf("step %d: %s is not deterministic", i, extOpNames[st.op])
		}
		checkExtSum(t, b)
		if b.s[2] != before.s[2] {
			t.Errorf("step %d: word 2 went %d -> %d", i, before.s[2], b.s[2])
		}
	}
}

// checkExtSum reports a bucket whose word 1 is not its extension's ExtSum.
func checkExtSum(t *testing.T, b *extBucket) {
	t.Helper()
	if sum := vocab.BlockSum(b.ext); b.s[1] != sum {
		t.Fatalf("state %v: word 1 is not vocab.BlockSum(ext) = %d; ext %v", b.s, sum, b.ext)
	}
}

// extModel is a brute-force model of an extended algorithm: what it
// decides, peeks and refunds, and its state for a failure's message.
type extModel interface {
	decide(now, cost int64) Decision
	peek(now int64) Decision
	refund(now, amount int64) Decision
	String() string
}

// modelStep runs one operation, drawn from r (mostly Decide, else
// Peek or DecideRefund), on b and on m at now with cost, and fails
// unless they agree exactly and b's word 1 is still its ExtSum.
func modelStep(t *testing.T, r *rand.Rand, l *Limit, b *extBucket, m extModel, now, cost int64, where string) {
	t.Helper()
	var got, want Decision
	op := "Decide"
	switch r.IntN(8) {
	case 0:
		op = "Peek"
		l.Peek(now, &b.s, b.ext, &got)
		want = m.peek(now)
	case 1:
		op = "DecideRefund"
		l.DecideRefund(now, &b.s, b.ext, cost, 0, &got)
		want = m.refund(now, cost)
	default:
		l.Decide(now, &b.s, b.ext, cost, 0, &got)
		want = m.decide(now, cost)
	}
	if got != want {
		t.Fatalf("%s %+v: %s(t%+d, %d) = %+v, model %+v (%v)", where, *l, op, now, cost, got, want, m)
	}
	checkExtSum(t, b)
}

// modelStart returns a random start for a model test of l: within a
// window of 0, or of MaxTime.
func modelStart(r *rand.Rand, l *Limit) int64 {
	now := r.Int64N(l.Window)
	if r.IntN(2) == 0 {
		now = MaxTime - r.Int64N(min(l.Window, MaxTime))
	}
	return now
}
