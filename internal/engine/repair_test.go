package engine

import (
	"time"

	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/shm"
)

// The promises of a repaired bucket, counted in admissions: a bucket found
// torn after a crash is replaced by a state that admits nothing a drained
// bucket would deny, whatever path finds it, and the repair is written back
// so that it refills from the moment it was found.

// crashHolding copies the state file at path as a crash of its owner leaves
// it while it holds the lock of key's bucket under l, closes the original,
// and opens the copy.
func crashHolding(t *testing.T, e *Engine, path, key string, l *Limit) (*Engine, string) {
	t.Helper()
	sl, ok, _ := e.Table().Lookup(e.fingerprint([]byte(key), l), nil)
	if !ok {
		t.Fatalf("%s has no bucket", key)
	}
	img, err := os.ReadFile(path)
	sl.Release()
	e.Table().Close()
	if err != nil {
		t.Fatal(err)
	}
	tb, crashed := openBytesAt(t, img)
	if st := tb.Stats(); st.Torn == 0 {
		t.Fatalf("the crash left nothing torn")
	}
	return New(tb), crashed
}

// fileEngine returns an engine over a new state file.
func fileEngine(t *testing.T, slots uint64) (*Engine, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state")
	tb, err := shm.Create(path, shm.Options{SlotCount: slots}, t0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Close() })
	return New(tb), path
}

// Ensure a drained bucket stays drained across repairs, for every
// algorithm: its limit is admitted once, not once more per crash. (A pacer
// repaired to next = now + max_delay admitted one request more per repair,
// and with max_delay 0 got its whole limit back.)
func TestRepair_drainedStaysDrained(t *testing.T) {
	limits := []bucket.Limit{
		{Algorithm: bucket.TokenBucket, Max: 5, RefillTime: 3600 * sec, RefillAmount: 1},
		{Algorithm: bucket.GCRA, Burst: 4, Count: 1, Period: 3600 * sec},
		{Algorithm: bucket.FixedWindow, Max: 5, Window: 3600 * sec},
		{Algorithm: bucket.SlidingWindow, Max: 5, Window: 3600 * sec},
		{Algorithm: bucket.Pacer, Count: 100, Period: 24 * 3600 * sec, MaxDelay: 96 * 3600 * sec},
		{Algorithm: bucket.Pacer, Count: 100, Period: 24 * 3600 * sec, MaxDelay: 0},
	}
	for _, b := range limits {
		t.Run(fmt.Sprintf("%v/%d", b.Algorithm, b.MaxDelay), func(t *testing.T) {
			l := lim(b)
			e, path := fileEngine(t, 64)
			admitted := 0
			take := func(e *Engine) {
				for range 1000 {
					d, err := acquire(e, []byte("k"), l, 1, t0, 0)
					if err != nil {
						t.Fatal(err)
					}
					if !d.Allowed {
						return
					}
					admitted++
				}
			}
			take(e)
			limit := admitted
			for range 3 {
				e, path = crashHolding(t, e, path, "k", l)
				take(e)
			}
			if admitted != limit {
				t.Errorf("admitted %d over three repairs, the limit is %d", admitted, limit)
			}
		})
	}
}

// Ensure a repair is written back by whatever path finds it, MULTI and PEEK
// included, and anchored at the moment it was found: a bucket asked for only
// through MULTI refills from then on (it was found "just repaired" again on
// every request, and denied for ever with retry_after 10 s).
func TestRepair_writtenByEveryPath(t *testing.T) {
	l := tokenBucket(5, 10, 5) // 5 per 10 s
	for _, path := range []string{"multi", "peek", "refund", "acquire"} {
		t.Run(path, func(t *testing.T) {
			e, file := fileEngine(t, 64)
			acquire(e, []byte("k"), l, 1, t0, 0)
			e, _ = crashHolding(t, e, file, "k", l)
			multi := func(at int64) bucket.Decision {
				ds, _, err := e.Multi(nil, []Item{{Key: []byte("k"), Limit: l, Cost: 1}}, At(t0+at*sec))
				if err != nil {
					t.Fatal(err)
				}
				return ds[0]
			}
			// Found at t0+30s: drained then, full again 10 s later.
			switch path {
			case "multi":
				if d := multi(30); d.Allowed {
					t.Fatalf("the first request after the crash was allowed: %+v", d)
				}
			case "peek":
				if d, _ := peek(e, []byte("k"), l, t0+30*sec); d.Allowed || d.Remaining != 0 {
					t.Fatalf("peek after the crash: %+v", d)
				}
			case "refund":
				refund(e, []byte("k"), l, 1, t0+30*sec)
			case "acquire":
				if d, _ := acquire(e, []byte("k"), l, 6, t0+30*sec, 0); d.Allowed {
					t.Fatalf("cost 6 of 5 allowed: %+v", d)
				}
			}
			for _, at := range []int64{40, 60, 600} {
				if d := multi(at); !d.Allowed {
					t.Errorf("multi at t0+%ds: %+v; the repair should have refilled since t0+30s", at, d)
				}
			}
		})
	}
}

// Ensure a client's time decides its own request only: a bucket drained at
// the server's time keeps its slot however many other buckets requests with
// a time far in the future create (its slot was judged reclaimable at the
// requests' time, the year 2100, and its next request got 10 tokens).
func TestAcquire_clientTimeReclaimsNothing(t *testing.T) {
	e := newEngine(t, 64)
	l := lim(bucket.Limit{Algorithm: bucket.TokenBucket, Max: 10, RefillTime: 24 * 3600 * sec, RefillAmount: 10})
	for range 10 {
		acquire(e, []byte("victim"), l, 1, t0, 0)
	}
	future := int64(4_102_444_800) * sec // 2100-01-01
	for i := range 40 {
		var d bucket.Decision
		if err := e.Acquire(&d, fmt.Appendf(nil, "other-%d", i), l, 1, Time{Now: t0 + sec, At: future}, 0); err != nil {
			t.Fatal(err)
		}
	}
	if d, _ := acquire(e, []byte("victim"), l, 1, t0+2*sec, 0); d.Allowed {
		t.Errorf("the drained bucket admitted again after requests at a future time: %+v", d)
	}
	// Times outside [0, MaxTime] are refused.
	for _, at := range []int64{-1, bucket.MaxTime + 1} {
		var d bucket.Decision
		if err := e.Acquire(&d, []byte("k"), l, 1, Time{Now: t0, At: at}, 0); err == nil {
			t.Errorf("time %d accepted", at)
		}
	}
}

// Ensure a repair is drained for a request from far ahead of the server's
// clock too: anchored at the server's clock alone, the drained state looked
// refilled to a client whose time runs years ahead.
func TestRepair_clientTimeAhead(t *testing.T) {
	l := tokenBucket(5, 3600, 1)
	e, file := fileEngine(t, 64)
	ahead := Time{Now: t0, At: t0 + 10*365*24*3600*sec}
	var d bucket.Decision
	if err := e.Acquire(&d, []byte("k"), l, 5, ahead, 0); err != nil || !d.Allowed {
		t.Fatalf("take 5: %+v, %v", d, err)
	}
	e, _ = crashHolding(t, e, file, "k", l)
	if err := e.Acquire(&d, []byte("k"), l, 1, ahead, 0); err != nil || d.Allowed {
		t.Errorf("after the repair, at the client's time: %+v, %v; want denied", d, err)
	}
}

// A bucket decided at a client's time far behind the server's clock is kept
// for as long, on the server's clock, as it needs to refill: other buckets
// do not reclaim it at once, so a client replaying past times does not find
// it new again.
func TestRepair_clientTimeBehindIsKept(t *testing.T) {
	l := tokenBucket(2, 3600, 1)
	e, _ := fileEngine(t, 64)
	behind := Time{Now: t0, At: t0 - 365*24*3600*sec}
	var d bucket.Decision
	if err := e.Acquire(&d, []byte("k"), l, 2, behind, 0); err != nil || !d.Allowed {
		t.Fatalf("take 2: %+v, %v", d, err)
	}
	sl, ok, _ := e.Table().Lookup(e.fingerprint([]byte("k"), l), nil)
	if !ok {
		t.Fatal("bucket not created")
	}
	freshAt := sl.FreshAt()
	sl.Release()
	if want := t0 + 2*3600*sec; freshAt < want {
		t.Errorf("FreshAt %d: reclaimable %v before the server's clock has seen the bucket refill",
			freshAt, time.Duration(want-freshAt))
	}
	if err := e.Acquire(&d, []byte("k"), l, 1, behind, 0); err != nil || d.Allowed {
		t.Errorf("a third at the same past time: %+v, %v; want denied", d, err)
	}
}
