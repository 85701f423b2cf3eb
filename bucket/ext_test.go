package bucket

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/vocab"

	"fmt"
)

// TestExtSum: known answers. The terms of a block of zeros are the outputs
// of splitmix64 seeded with 0 (Vigna's reference, splitmix64.c), since word
// i of 0 is mixed as (i+1)*0x9E3779B97F4A7C15.
func TestExtSum(t *testing.T) {
	// Variables, not constants: the sums wrap.
	first, second, third := uint64(0xe220a8397b1dcdaf), uint64(0x6e789e6aa1b965f4), uint64(0x06c45d188009454f)
	for _, tt := range []struct {
		ext  []int64
		want uint64
	}{
		{nil, 0},
		{[]int64{0}, first},
		{[]int64{0, 0}, first + second},
		{[]int64{0, 0, 0}, first + second + third},
	} {
		if got := uint64(vocab.BlockSum(tt.ext)); got != tt.want {
			t.Errorf("vocab.BlockSum(%v) = %#x, want %#x", tt.ext, got, tt.want)
		}
	}
	// Each word is mixed with its index: swapping two words changes the sum.
	if vocab.BlockSum([]int64{1, 2}) == vocab.BlockSum([]int64{2, 1}) {
		t.Errorf("ExtSum does not see two words swapped")
	}
	// setExt keeps the sum up to date word by word.
	r := newRand(1)
	ext := make([]int64, 17)
	var s State
	s[1] = vocab.BlockSum(ext)
	for range 1000 {
		setExt(&s, ext, r.IntN(len(ext)), int64(r.Uint64()))
		if s[1] != vocab.BlockSum(ext) {
			t.Fatalf("after setExt, word 1 = %d, ExtSum = %d", s[1], vocab.BlockSum(ext))
		}
	}
	t.Log("seed 1")
}

// randomExtLimit returns a small valid limit of extended algorithm a.
func randomExtLimit(r *rand.Rand, a Algorithm) Limit {
	l := Limit{Algorithm: a}
	switch a {
	case SlidingLog:
		l.Max = 1 + r.Int64N(12)
		l.Window = ms * (1 + r.Int64N(50))
	case WindowCounters:
		l.Max = 1 + r.Int64N(12)
		l.Window = ms * (1 + r.Int64N(50))
		l.Counters = 1 + r.Int64N(8)
		l.CountDenied = r.IntN(2) == 0
	case Concurrency:
		l.Max = 1 + r.Int64N(6)
		l.Lease = ms * (1 + r.Int64N(50))
	}
	if err := l.Validate(); err != nil {
		panic(err)
	}
	return l
}

// extSpan is the natural time scale of l: its window or lease.
func extSpan(l Limit) int64 {
	if l.Algorithm == Concurrency {
		return l.Lease
	}
	return l.Window
}

// extTraffic applies a random operation at now to b: a request (for
// concurrency a lease taken or released), and sometimes a refund unless
// refunds is false. It reports whether the operation gave something back
// (a refund or a release).
func extTraffic(r *rand.Rand, l *Limit, b *extBucket, now int64, refunds bool) (gave bool) {
	var d Decision
	if l.Algorithm == Concurrency {
		if r.IntN(3) == 0 {
			id := r.Int64() // unknown, or an entry's: held, released or expired
			if r.IntN(4) > 0 {
				id = b.ext[2*r.IntN(int(l.Max))+1]
			}
			l.ReleaseLease(now, &b.s, b.ext, id, &d)
			return true
		}
		l.AcquireLease(now, &b.s, b.ext, r.Int64(), &d)
		return false
	}
	if refunds && r.IntN(8) == 0 {
		l.DecideRefund(now, &b.s, b.ext, r.Int64N(l.Max+1), 0, &d)
		return true
	}
	l.Decide(now, &b.s, b.ext, r.Int64N(l.Max+2), 0, &d)
	return false
}

// TestExtBackwardsNeverMints: at any time t before the latest time a bucket
// has seen, it admits nothing it would not admit at that latest time, and
// reports no more remaining; the sliding_log and window_counters buckets
// also tell no earlier time to retry. Operations at backwards times are
// part of the traffic, and none but a refund or a release leaves the bucket
// more permissive at the latest time than it was.
func TestExtBackwardsNeverMints(t *testing.T) {
	for seed := uint64(1); seed <= seeds; seed++ {
		r := newRand(seed)
		for a := SlidingLog; a <= Concurrency; a++ {
			l := randomExtLimit(r, a)
			sp := extSpan(l)
			now := t0 + r.Int64N(sp)
			latest := now
			b := newExtBucket(l, now)
			for i := range 300 {
				now = latest + r.Int64N(sp/2)
				if r.IntN(3) == 0 {
					now = latest - r.Int64N(2*sp)
				}
				var before, after Decision
				l.Peek(latest, &b.s, b.ext, &before)
				gave := extTraffic(r, &l, b, now, true)
				l.Peek(latest, &b.s, b.ext, &after)
				if now < latest && !gave && (after.Remaining > before.Remaining || (after.Allowed && !before.Allowed)) {
					t.Fatalf("seed %d step %d %+v: a request at t0%+d changed the peek at the latest time t0%+d from %+v to %+v",
						seed, i, l, now-t0, latest-t0, before, after)
				}
				latest = max(latest, now)
				checkExtSum(t, b)

				at := latest - r.Int64N(2*sp)
				var back, late Decision
				l.Peek(at, &b.s, b.ext, &back)
				l.Peek(latest, &b.s, b.ext, &late)
				if (back.Allowed && !late.Allowed) || back.Remaining > late.Remaining {
					t.Fatalf("seed %d step %d %+v: peek at t0%+d %+v, at the latest time t0%+d %+v",
						seed, i, l, at-t0, back, latest-t0, late)
				}
				if a != Concurrency && !back.Allowed && !late.Allowed && at+back.RetryAfter < latest+late.RetryAfter {
					t.Fatalf("seed %d step %d %+v: peek at t0%+d retries at t0%+d, at the latest time t0%+d at t0%+d",
						seed, i, l, at-t0, at+back.RetryAfter-t0, latest-t0, latest+late.RetryAfter-t0)
				}
				cost := r.Int64N(l.Max + 2)
				bb, lb := b.clone(), b.clone()
				if a == Concurrency {
					l.AcquireLease(at, &bb.s, bb.ext, 1, &back)
					l.AcquireLease(latest, &lb.s, lb.ext, 1, &late)
				} else {
					l.Decide(at, &bb.s, bb.ext, cost, 0, &back)
					l.Decide(latest, &lb.s, lb.ext, cost, 0, &late)
				}
				if back.Allowed && !late.Allowed {
					t.Fatalf("seed %d step %d %+v: cost %d allowed at t0%+d, denied at the latest time t0%+d",
						seed, i, l, cost, at-t0, latest-t0)
				}
			}
		}
	}
	t.Logf("seeds 1..%d", seeds)
}

// TestExtFreshAtNeverEarly: at FreshAtExt, and later, every request gets
// the Decision a new bucket would give (for concurrency, up to the lease
// ids).
func TestExtFreshAtNeverEarly(t *testing.T) {
	for seed := uint64(1); seed <= seeds; seed++ {
		r := newRand(seed)
		for a := SlidingLog; a <= Concurrency; a++ {
			l := randomExtLimit(r, a)
			sp := extSpan(l)
			now := t0 + r.Int64N(sp)
			latest := now
			b := newExtBucket(l, now)
			for range 1 + r.IntN(40) {
				now += r.Int64N(sp/2) - r.Int64N(sp/4)
				extTraffic(r, &l, b, now, false)
				latest = max(latest, now)
			}
			fresh := l.FreshAt(&b.s, b.ext)
			at := fresh
			if fresh == minI64 {
				at = latest
			}
			for _, when := range []int64{at, at + 1 + r.Int64N(3*sp)} {
				for cost := int64(0); cost <= l.Max+1; cost++ {
					old, nw := b.clone(), newExtBucket(l, when)
					var got, want Decision
					if a == Concurrency {
						l.AcquireLease(when, &old.s, old.ext, 1, &got)
						l.AcquireLease(when, &nw.s, nw.ext, 1, &want)
					} else {
						l.Decide(when, &old.s, old.ext, cost, 0, &got)
						l.Decide(when, &nw.s, nw.ext, cost, 0, &want)
					}
					if got != want {
						t.Fatalf("seed %d %+v: state %v %v FreshAt t0%+d: at t0%+d cost %d got %+v, a new bucket %+v",
							seed, l, b.s, b.ext, fresh-t0, when-t0, cost, got, want)
					}
				}
			}
		}
	}
	t.Logf("seeds 1..%d", seeds)
}

// corruptExt returns an extension for l whose words are drawn from words,
// or, one time in three, a plausible one: times around now, small counts.
func corruptExt(r *rand.Rand, l Limit, words []int64, now int64) []int64 {
	ext := make([]int64, l.ExtWords())
	plausible := r.IntN(3) == 0
	for i := range ext {
		if plausible {
			ext[i] = now + r.Int64N(2*extSpan(l)) - extSpan(l)
			if l.Algorithm == WindowCounters {
				ext[i] = r.Int64N(l.Max + 2)
			}
		} else {
			ext[i] = words[r.IntN(len(words))]
		}
	}
	if plausible && l.Algorithm == SlidingLog {
		slices.Sort(ext)
	}
	return ext
}

// TestExtCorruptState: every Ext method accepts any State and extension,
// torn or corrupt, at any time, without panicking, and keeps its promises
// that hold for any input: Remaining in [0, Limit], RetryAfter -1 or >= 1
// (-1 when allowed), ResetAfter within FreshAtExt, changed tells the truth,
// a peek changes nothing, word 2 is never touched, and the difference
// between word 1 and the extension's ExtSum is kept (so a torn block stays
// detectable, and a sound one stays sound).
func TestExtCorruptState(t *testing.T) {
	words := []int64{minI64, minI64 + 1, -sec, -1, 0, 1, 2, 3, t0, t0 + 1, MaxTime, maxI64 - 1, maxI64}
	r := newRand(1)
	for a := SlidingLog; a <= Concurrency; a++ {
		for range 3000 {
			l := randomExtLimit(r, a)
			now := words[r.IntN(len(words))] + r.Int64N(3) - 1
			orig := &extBucket{
				s:   State{words[r.IntN(len(words))], words[r.IntN(len(words))], words[r.IntN(len(words))]},
				ext: corruptExt(r, l, words, now),
			}
			if r.IntN(2) == 0 {
				orig.s[1] = vocab.BlockSum(orig.ext)
			}
			cost := []int64{-1, 0, 1, 2, l.Max, l.Max + 1, maxI64}[r.IntN(7)]
			for op := opDecide; op <= opRelease; op++ {
				if a != Concurrency && op >= opAcquire {
					continue
				}
				b := orig.clone()
				d, changed, _ := b.do(&l, op, now, cost)
				what := func() string {
					return extOpNames[op] + " of " + l.Algorithm.String()
				}
				if d.Limit != l.Max || d.Remaining < 0 || d.Remaining > d.Limit || d.Delay != 0 {
					t.Fatalf("%s %+v at %d, cost %d, state %v %v: %+v", what(), l, now, cost, orig.s, orig.ext, d)
				}
				if (d.Allowed && d.RetryAfter != -1) || (!d.Allowed && d.RetryAfter != -1 && d.RetryAfter < 1) {
					t.Fatalf("%s: Allowed %v with RetryAfter %d", what(), d.Allowed, d.RetryAfter)
				}
				if fresh := resetAfter(l.FreshAt(&b.s, b.ext), now); d.ResetAfter < 0 || d.ResetAfter > fresh {
					t.Fatalf("%s %+v at %d, state %v %v: ResetAfter %d, FreshAt-now %d", what(), l, now, orig.s, orig.ext, d.ResetAfter, fresh)
				}
				if changed != !b.equal(orig) {
					t.Fatalf("%s: changed = %v, state %v %v -> %v %v", what(), changed, orig.s, orig.ext, b.s, b.ext)
				}
				if changed && (op == opPeek || (op == opDecide && (cost <= 0 || a == Concurrency))) {
					t.Fatalf("%s with cost %d changed the state %v %v -> %v %v", what(), cost, orig.s, orig.ext, b.s, b.ext)
				}
				if b.s[2] != orig.s[2] || b.s[1]-vocab.BlockSum(b.ext) != orig.s[1]-vocab.BlockSum(orig.ext) {
					t.Fatalf("%s: words 1 and 2 went %v -> %v, ExtSum %d -> %d", what(), orig.s, b.s, vocab.BlockSum(orig.ext), vocab.BlockSum(b.ext))
				}
			}
			b := orig.clone()
			l.Drained(now, &b.s, b.ext)
			if b.s[1] != vocab.BlockSum(b.ext) || b.s[2] != orig.s[2] {
				t.Fatalf("DrainedExt of %v: state %v", a, b.s)
			}
			l.Init(now, &b.s, b.ext)
			if b.s[1] != vocab.BlockSum(b.ext) || b.s[2] != orig.s[2] || l.FreshAt(&b.s, b.ext) > now {
				t.Fatalf("InitExt of %v at %d: state %v %v, fresh at %d", a, now, b.s, b.ext, l.FreshAt(&b.s, b.ext))
			}
		}
	}
	t.Log("seed 1")
}

// TestExtAllocs: the Ext methods allocate nothing.
func TestExtAllocs(t *testing.T) {
	for _, l := range append(slices.Clone(extLimits), Limit{Algorithm: SlidingLog, Max: MaxLogLimit, Window: sec}) {
		if err := l.Validate(); err != nil {
			t.Fatal(err)
		}
		var s State
		var d Decision
		ext := make([]int64, l.ExtWords())
		now := t0
		allocs := testing.AllocsPerRun(1000, func() {
			now += 7 * ms
			l.Init(now, &s, ext)
			l.Decide(now, &s, ext, 3, 0, &d)
			l.Decide(now, &s, ext, 100, 0, &d) // denied
			l.Decide(now, &s, ext, 0, 0, &d)
			l.Peek(now, &s, ext, &d)
			l.DecideRefund(now, &s, ext, 1, 0, &d)
			l.FreshAt(&s, ext)
			if l.Algorithm == Concurrency {
				lease, _ := l.AcquireLease(now, &s, ext, now, &d)
				l.ReleaseLease(now, &s, ext, lease, &d)
			}
			l.Drained(now, &s, ext)
			l.Decide(now, &s, ext, 1, 0, &d)
		})
		if allocs != 0 {
			t.Errorf("%v: %v allocs per run, want 0", l.Algorithm, allocs)
		}
	}
}

// TestExtendedPanics: an extended algorithm used without its extension or
// with one of the wrong length, leases of another algorithm than
// concurrency, and a Limit that did not pass Validate are broken
// invariants of the caller.
func TestExtendedPanics(t *testing.T) {
	methods := map[string]func(l *Limit, s *State, ext []int64){
		"Init":         func(l *Limit, s *State, ext []int64) { l.Init(0, s, ext) },
		"Drained":      func(l *Limit, s *State, ext []int64) { l.Drained(0, s, ext) },
		"Decide":       func(l *Limit, s *State, ext []int64) { l.Decide(0, s, ext, 1, 0, &Decision{}) },
		"Peek":         func(l *Limit, s *State, ext []int64) { l.Peek(0, s, ext, &Decision{}) },
		"DecideRefund": func(l *Limit, s *State, ext []int64) { l.DecideRefund(0, s, ext, 1, 0, &Decision{}) },
		"FreshAt":      func(l *Limit, s *State, ext []int64) { l.FreshAt(s, ext) },
	}
	leases := map[string]func(l *Limit, s *State, ext []int64){
		"AcquireLease": func(l *Limit, s *State, ext []int64) { l.AcquireLease(0, s, ext, 1, &Decision{}) },
		"ReleaseLease": func(l *Limit, s *State, ext []int64) { l.ReleaseLease(0, s, ext, 1, &Decision{}) },
	}
	panics := func(what string, want string, f func()) {
		t.Helper()
		defer func() {
			r := recover()
			if msg, ok := r.(string); !ok || !strings.HasPrefix(msg, "bucket: ") || !strings.Contains(msg, want) {
				t.Errorf("%s: recovered %v, want a bucket panic saying %q", what, r, want)
			}
		}()
		f()
	}
	for _, l := range extLimits {
		for name, f := range methods {
			for _, n := range []int{0, l.ExtWords() - 1, l.ExtWords() + 1} {
				panics(fmt.Sprintf("%s of %v with %d words", name, l.Algorithm, n), "extension of", func() { f(&l, &State{}, make([]int64, n)) })
			}
		}
	}
	for _, l := range append(slices.Clone(testLimits), extLimits[0], extLimits[1]) {
		for name, f := range leases {
			panics(name+" of "+l.Algorithm.String(), "takes no leases", func() { f(&l, &State{}, make([]int64, l.ExtWords())) })
		}
	}
	for name, f := range methods {
		panics(name+" of Invalid", "without Validate", func() { f(&Limit{}, &State{}, nil) })
	}
	for name, f := range leases {
		panics(name+" of Invalid", "without Validate", func() { f(&Limit{}, &State{}, nil) })
	}
}

// TestExtWords: the extension sizes, and Extended.
func TestExtWords(t *testing.T) {
	for _, tt := range []struct {
		l    Limit
		want int
	}{
		{Limit{Algorithm: SlidingLog, Max: 10, Window: sec}, 10},
		{Limit{Algorithm: SlidingLog, Max: MaxLogLimit, Window: sec}, MaxLogLimit},
		{Limit{Algorithm: WindowCounters, Max: 10, Window: sec, Counters: 60}, 61},
		{Limit{Algorithm: Concurrency, Max: MaxConcurrency, Lease: sec}, 2 * MaxConcurrency},
		{testLimits[0], 0},
	} {
		if got := tt.l.ExtWords(); got != tt.want || tt.l.Algorithm.Extended() != (tt.want > 0) {
			t.Errorf("%v: ExtWords() = %d, Extended() = %v; want %d", tt.l.Algorithm, got, tt.l.Algorithm.Extended(), tt.want)
		}
	}
	for a := Invalid; a <= numAlgorithms; a++ {
		if want := a == SlidingLog || a == WindowCounters || a == Concurrency; a.Extended() != want {
			t.Errorf("%v.Extended() = %v", a, a.Extended())
		}
	}
	if SlidingLog != 6 || WindowCounters != 7 || Concurrency != 8 {
		t.Errorf("algorithm values moved: %d %d %d", SlidingLog, WindowCounters, Concurrency)
	}
}
