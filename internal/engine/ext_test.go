package engine

import (
	"errors"
	"os"
	"testing"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/shm"
)

func slidingLog(n, windowSec int64) *Limit {
	return lim(bucket.Limit{Algorithm: bucket.SlidingLog, Max: n, Window: windowSec * sec})
}

func windowCounters(n, windowSec, k int64) *Limit {
	return lim(bucket.Limit{Algorithm: bucket.WindowCounters, Max: n, Window: windowSec * sec, Counters: k})
}

func concurrency(n, leaseSec int64) *Limit {
	return lim(bucket.Limit{Algorithm: bucket.Concurrency, Max: n, Lease: leaseSec * sec})
}

// Ensure each extended algorithm decides through the engine as it does on
// its own, keeps its block from one request to the next, and gives the
// block back when reset.
func TestExt_acquirePeekRefundReset(t *testing.T) {
	e := newEngine(t, 64)
	key := []byte("caller")
	for _, l := range []*Limit{slidingLog(5, 1), windowCounters(5, 60, 60)} {
		used := e.Stats().ArenaUsed
		for i := range 5 {
			if d, err := acquire(e, key, l, 1, t0+int64(i), 0); err != nil || !d.Allowed || d.Remaining != int64(4-i) {
				t.Fatalf("%v: acquire %d: %+v, %v", l.b.Algorithm, i, d, err)
			}
		}
		d, err := acquire(e, key, l, 1, t0+10, 0)
		if err != nil || d.Allowed || d.RetryAfter <= 0 {
			t.Errorf("%v: sixth acquire: %+v, %v; want denied with a retry", l.b.Algorithm, d, err)
		}
		if d, err := peek(e, key, l, t0+10); err != nil || d.Allowed || d.Remaining != 0 {
			t.Errorf("%v: peek: %+v, %v", l.b.Algorithm, d, err)
		}
		if d, err := refund(e, key, l, 2, t0+10); err != nil || d.Remaining != 2 {
			t.Errorf("%v: refund 2: %+v, %v", l.b.Algorithm, d, err)
		}
		if d, err := acquire(e, key, l, 0, t0+10, 0); err != nil || !d.Allowed || d.Remaining != 2 {
			t.Errorf("%v: acquire of cost 0: %+v, %v", l.b.Algorithm, d, err)
		}
		if existed, err := e.Reset(key, l, Time{}); !existed || err != nil {
			t.Errorf("%v: reset: %v, %v", l.b.Algorithm, existed, err)
		}
		if now := e.Stats().ArenaUsed; now != used {
			t.Errorf("%v: %d arena cells used after the reset, %d before the bucket", l.b.Algorithm, now, used)
		}
		if d, err := acquire(e, key, l, 5, t0+10, 0); err != nil || !d.Allowed {
			t.Errorf("%v: after the reset: %+v, %v", l.b.Algorithm, d, err)
		}
	}
	// A denied request on a bucket that does not exist creates nothing.
	if d, err := acquire(e, []byte("new"), slidingLog(5, 1), 6, t0, 0); err != nil || d.Allowed {
		t.Errorf("cost above the limit: %+v, %v", d, err)
	}
	if sl, ok, _ := e.Table().Lookup(e.fingerprint([]byte("new"), slidingLog(5, 1)), nil); ok {
		sl.Release()
		t.Error("a denied request created a bucket")
	}
}

// Ensure concurrency slots are taken with Lease and given back with
// Release, a stale or unknown lease releases nothing, a lease expires, and
// the other operations refuse a concurrency limit.
func TestExt_leases(t *testing.T) {
	e := newEngine(t, 64)
	key, l := []byte("jobs"), concurrency(2, 10)
	var d bucket.Decision
	a, err := e.Lease(&d, key, l, At(t0), 101)
	if err != nil || a != 101 || !d.Allowed || d.Remaining != 1 {
		t.Fatalf("first lease: %d, %+v, %v", a, d, err)
	}
	b, _ := e.Lease(&d, key, l, At(t0+1), 102)
	if c, _ := e.Lease(&d, key, l, At(t0+2), 103); c != 0 || d.Allowed || d.RetryAfter != 10*sec-2 {
		t.Errorf("third lease: %d, %+v; want denied until the first expires", c, d)
	}
	if ok, err := e.Release(&d, key, l, a, At(t0+3)); !ok || err != nil || d.Remaining != 1 {
		t.Errorf("release: %v, %v, %+v", ok, err, d)
	}
	if ok, _ := e.Release(&d, key, l, a, At(t0+4)); ok {
		t.Error("a lease released twice")
	}
	if ok, _ := e.Release(&d, key, l, 12345, At(t0+4)); ok {
		t.Error("an unknown lease released")
	}
	if c, _ := e.Lease(&d, key, l, At(t0+5), 104); c == 0 {
		t.Error("no lease after a release")
	}
	if c, _ := e.Lease(&d, key, l, At(t0+1+10*sec), 105); c == 0 || d.Remaining != 0 {
		t.Errorf("after the second lease expired: %d, %+v", c, d)
	}
	if ok, _ := e.Release(&d, key, l, b, At(t0+2+10*sec)); ok {
		t.Error("an expired lease released")
	}
	if _, err := acquire(e, key, l, 1, t0, 0); !errors.Is(err, ErrLeaseOnly) || !errors.Is(err, ErrInvalidLimit) {
		t.Errorf("acquire of a concurrency limit: %v", err)
	}
	if _, err := e.Lease(&d, key, slidingLog(2, 1), At(t0), 1); !errors.Is(err, ErrNotConcurrency) {
		t.Errorf("lease of a sliding_log limit: %v", err)
	}
	if _, _, err := e.Multi(nil, []Item{{Key: key, Limit: l, Cost: 1}}, At(t0)); !errors.Is(err, ErrLeaseOnly) {
		t.Errorf("MULTI of a concurrency limit: %v", err)
	}
}

// Ensure a full arena refuses a new bucket with ErrArenaFull, an
// ErrTableFull, and changes nothing.
func TestExt_arenaFull(t *testing.T) {
	tb, err := shm.NewHeap(shm.Options{SlotCount: 64, ArenaCells: 2})
	if err != nil {
		t.Fatal(err)
	}
	e := New(tb)
	l := slidingLog(16, 60) // 2 cells
	if _, err := acquire(e, []byte("a"), l, 1, t0, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := acquire(e, []byte("b"), l, 1, t0, 0); !errors.Is(err, ErrArenaFull) || !errors.Is(err, ErrTableFull) {
		t.Errorf("a second bucket in a full arena: %v", err)
	}
	if sl, ok, _ := tb.Lookup(e.fingerprint([]byte("b"), l), nil); ok {
		if sl.Live() || sl.HasExt() {
			t.Error("the refused bucket is live")
		}
		sl.Release()
	}
	if err := tb.Verify(); err != nil {
		t.Error(err)
	}
}

// Ensure a crash keeps every answered admission of an extended algorithm,
// and that a block torn by the crash drains its bucket: never lenient.
func TestExt_crash(t *testing.T) {
	for _, l := range []*Limit{slidingLog(4, 60), windowCounters(4, 60, 10), concurrency(4, 60)} {
		t.Run(l.b.Algorithm.String(), func(t *testing.T) {
			e, path := fileEngine(t, 64)
			take := func(e *Engine, key string, at int64) bool {
				if l.b.Algorithm == bucket.Concurrency {
					var d bucket.Decision
					lease, err := e.Lease(&d, []byte(key), l, At(at), at)
					if err != nil {
						t.Fatal(err)
					}
					return lease != 0
				}
				d, err := acquire(e, []byte(key), l, 1, at, 0)
				if err != nil {
					t.Fatal(err)
				}
				return d.Allowed
			}
			for i := range 3 {
				take(e, "kept", t0+int64(i))
				take(e, "torn", t0+int64(i))
			}
			// A word of the torn bucket's block written apart from its slot,
			// as a power loss can leave the file.
			flip := func() {
				sl, _, _ := e.Table().Lookup(e.fingerprint([]byte("torn"), l), nil)
				ext, _, _ := sl.Ext(l.ext, t0, nil)
				ext[len(ext)-1] ^= 1
				sl.Release()
			}
			flip()
			img, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			flip()
			tb := openBytes(t, img)
			if o := tb.Opened(); o.Torn != 1 {
				t.Errorf("opened: %+v, want 1 torn", o)
			}
			e2 := New(tb)
			if !take(e2, "kept", t0+10) || take(e2, "kept", t0+11) {
				t.Error("the sound bucket did not keep its 3 admissions")
			}
			if take(e2, "torn", t0+10) {
				t.Error("the torn bucket admitted a request: it must be drained")
			}
			if err := tb.Verify(); err != nil {
				t.Error(err)
			}
		})
	}
}

// Ensure the extended algorithms' paths allocate nothing either, new
// buckets (decided in pooled scratch words) included.
func TestExtAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("counted in make test's run without the race detector, under which sync.Pool drops its items at random")
	}
	e := newEngine(t, 1<<12)
	sl, wc, cc := slidingLog(1000, 1), windowCounters(100, 60, 60), concurrency(10, 1)
	key := []byte("hot")
	now := t0
	var d bucket.Decision
	keys := drawKeys(300)
	i := 0
	dst := make([]bucket.Decision, 0, 4)
	for name, fn := range map[string]func(){
		"sliding_log acquire":     func() { now += 1e6; e.Acquire(&d, key, sl, 1, At(now), 0) },
		"sliding_log peek":        func() { e.Peek(&d, key, sl, At(now)) },
		"sliding_log new bucket":  func() { i++; e.Acquire(&d, keys[i%len(keys)], sl, 1, At(now), 0) },
		"window_counters acquire": func() { now += 1e6; e.Acquire(&d, key, wc, 1, At(now), 0) },
		"multi": func() {
			now += 1e6
			dst, _, _ = e.Multi(dst[:0], []Item{{Key: key, Limit: sl, Cost: 1}, {Key: key, Limit: wc, Cost: 1}}, At(now))
		},
		"lease and release": func() {
			id, _ := e.Lease(&d, key, cc, At(now), now)
			e.Release(&d, key, cc, id, At(now))
		},
	} {
		if n := testing.AllocsPerRun(100, fn); n != 0 {
			t.Errorf("%s: %v allocs/op", name, n)
		}
	}
}

// Ensure a MULTI of extended limits is all or nothing like any other: "10
// per second and 100 per minute" admits only while both do, and a denied
// MULTI changes no block; a full arena fails it without a trace.
func TestExt_multi(t *testing.T) {
	e := newEngine(t, 64)
	perSec, perMin := slidingLog(10, 1), windowCounters(15, 60, 60)
	items := func(key string) []Item {
		return []Item{{Key: []byte(key), Limit: perSec, Cost: 1}, {Key: []byte(key), Limit: perMin, Cost: 1},
			{Key: []byte("shared"), Limit: tokenBucket(100, 1, 100), Cost: 1}}
	}
	admitted := 0
	for i := range 40 {
		at := t0 + int64(i)*(sec/8) // 8 per second
		_, ok, err := e.Multi(nil, items("k"), At(at))
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			admitted++
		}
	}
	if admitted != 15 {
		t.Errorf("admitted %d of 40 at 8/s, want 15 (the per-minute limit)", admitted)
	}
	// The second's log holds only the admitted requests: 8 per second for
	// the first 15, so at t0+5s nothing of it is in its window.
	if d, _ := peek(e, []byte("k"), perSec, t0+5*sec); d.Remaining != 10 {
		t.Errorf("sliding_log after the denied MULTIs: %+v", d)
	}
	// All or nothing: one item over its limit, the others unchanged.
	_, ok, err := e.Multi(nil, []Item{{Key: []byte("a"), Limit: perSec, Cost: 3}, {Key: []byte("a"), Limit: perSec, Cost: 8}}, At(t0))
	if err != nil || ok {
		t.Errorf("11 of 10 in one MULTI: %v, %v", ok, err)
	}
	if d, _ := peek(e, []byte("a"), perSec, t0); d.Remaining != 10 {
		t.Errorf("a denied MULTI changed the log: %+v", d)
	}
	tb, _ := shm.NewHeap(shm.Options{SlotCount: 64, ArenaCells: 2})
	small := New(tb)
	big := slidingLog(9, 60) // 2 cells
	ds, ok, err := small.Multi(nil, []Item{{Key: []byte("x"), Limit: big, Cost: 1}, {Key: []byte("y"), Limit: big, Cost: 1}}, At(t0))
	if !errors.Is(err, ErrArenaFull) || ok || len(ds) != 0 {
		t.Errorf("MULTI in a full arena: %v, %v, %d decisions", ok, err, len(ds))
	}
	if used := small.Stats().ArenaUsed; used != 0 {
		t.Errorf("the failed MULTI left %d cells used", used)
	}
	if err := tb.Verify(); err != nil {
		t.Error(err)
	}
}

// Ensure a transaction (Each) refuses an extended limit with an
// ErrInvalidLimit that says "invalid limit" once, as the engine's other
// refusals do.
func TestExt_eachRefuses(t *testing.T) {
	e := newEngine(t, 64)
	_, err := e.Each(nil, []Item{{Key: []byte("k"), Limit: slidingLog(2, 1), Cost: 1}}, At(t0))
	if !errors.Is(err, ErrInvalidLimit) || err.Error() != "sliding_log limits cannot be part of a transaction" {
		t.Errorf("Each of a sliding_log limit: %v", err)
	}
}
