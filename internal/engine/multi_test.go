package engine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/bucket"
)

// Ensure Multi is all or nothing.
func TestMulti_allOrNothing(t *testing.T) {
	e := newEngine(t, 64)
	ip, acct := tokenBucket(3, 3600, 1), tokenBucket(1, 3600, 1)
	items := []Item{{Key: []byte("ip:1.2.3.4"), Limit: ip, Cost: 1}, {Key: []byte("acct:bob"), Limit: acct, Cost: 1}}
	ds, ok, err := e.Multi(nil, items, At(t0))
	if err != nil || !ok || len(ds) != 2 || ds[0].Remaining != 2 || ds[1].Remaining != 0 {
		t.Fatalf("first multi: %v %v %+v", ok, err, ds)
	}
	// acct:bob is empty now: the multi is denied and ip:1.2.3.4 keeps its tokens.
	ds, ok, _ = e.Multi(ds[:0], items, At(t0))
	if ok || !ds[0].Allowed || ds[1].Allowed {
		t.Fatalf("second multi: %v %+v", ok, ds)
	}
	if d, _ := peek(e, []byte("ip:1.2.3.4"), ip, t0); d.Remaining != 2 {
		t.Errorf("denied multi consumed: peek says %d remaining, want 2", d.Remaining)
	}
}

// Ensure items naming the same bucket see each other, and that the item
// limit is enforced.
func TestMulti_sameBucketAndLimits(t *testing.T) {
	e := newEngine(t, 64)
	l := tokenBucket(3, 3600, 1)
	k := []byte("k")
	ds, ok, _ := e.Multi(nil, []Item{{k, l, 2, 0}, {k, l, 1, 0}}, At(t0))
	if !ok || ds[0].Remaining != 1 || ds[1].Remaining != 0 {
		t.Errorf("same bucket twice: %v %+v", ok, ds)
	}
	if _, ok, _ := e.Multi(nil, []Item{{k, l, 1, 0}, {k, l, 1, 0}}, At(t0)); ok {
		t.Errorf("empty bucket admitted twice")
	}
	if _, _, err := e.Multi(nil, make([]Item, MaxMultiItems+1), At(t0)); !errors.Is(err, ErrTooManyItems) {
		t.Errorf("17 items: %v", err)
	}
	if _, _, err := e.Multi(nil, []Item{{k, l, -1, 0}}, At(t0)); !errors.Is(err, ErrNegativeCost) {
		t.Errorf("negative cost: %v", err)
	}
}

// Ensure that Multis over overlapping buckets, in every order, never
// deadlock and never over-admit: two buckets of 500 tokens admit exactly 500
// pairs.
func TestMulti_concurrentNoDeadlock(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	e := newEngine(t, 256)
	l := tokenBucket(500, 3600, 1)
	keys := [][]byte{[]byte("a"), []byte("b"), []byte("c"), []byte("d")}
	var mu sync.Mutex
	admitted := map[[2]int]int{}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			var dst []bucket.Decision
			for range 400 {
				i, j := rng.IntN(4), rng.IntN(4)
				if i == j {
					continue
				}
				var ok bool
				var err error
				dst, ok, err = e.Multi(dst[:0], []Item{{keys[i], l, 1, 0}, {keys[j], l, 1, 0}}, At(t0))
				if err != nil {
					t.Error(err)
					return
				}
				if ok {
					mu.Lock()
					admitted[[2]int{min(i, j), max(i, j)}]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	used := make([]int, 4)
	for pair, n := range admitted {
		used[pair[0]] += n
		used[pair[1]] += n
	}
	for i, k := range keys {
		d, _ := acquire(e, k, l, 0, t0, 0)
		if int64(used[i])+d.Remaining != 500 {
			t.Errorf("bucket %s: %d admitted + %d remaining != 500", k, used[i], d.Remaining)
		}
	}
}

// Ensure that a slot Multi claims for one item is not reclaimed by the
// insert of another item of the same Multi (a regression: every retry
// repeated the conflict and the Multi failed with ErrContended).
func TestMulti_claimsAreReserved(t *testing.T) {
	e := newEngine(t, 2)
	l := tokenBucket(5, 1, 5) // full again a second after use: slots are reclaimable
	now := t0
	for i := range 50 {
		now += 3600 * sec
		items := []Item{{Key: []byte(fmt.Sprintf("a%d", i)), Limit: l, Cost: 1}, {Key: []byte(fmt.Sprintf("b%d", i)), Limit: l, Cost: 1}}
		if _, ok, err := e.Multi(nil, items, At(now)); err != nil || !ok {
			t.Fatalf("pair %d: ok=%v err=%v", i, ok, err)
		}
	}
	// A denied Multi leaves its new slots reclaimable, not reserved.
	now += 3600 * sec
	big := []Item{{Key: []byte("x"), Limit: l, Cost: 1}, {Key: []byte("y"), Limit: l, Cost: 6}}
	if _, ok, err := e.Multi(nil, big, At(now)); err != nil || ok {
		t.Fatalf("denied multi: ok=%v err=%v", ok, err)
	}
	if _, err := acquire(e, []byte("z1"), l, 1, now, 0); err != nil {
		t.Errorf("slot left reserved by a denied multi: %v", err)
	}
	if _, err := acquire(e, []byte("z2"), l, 1, now, 0); err != nil {
		t.Errorf("slot left reserved by a denied multi: %v", err)
	}
}

// Each decides the items one after the other, as if alone: an allowed item
// consumes even when a later one is denied, a denied Smyte item drains its
// bucket, later items see earlier ones, and the result equals the same
// acquires made one by one.
func TestEach_asIfAlone(t *testing.T) {
	together, alone := newEngine(t, 64), newEngine(t, 64)
	ip, acct := tokenBucket(3, 3600, 1), tokenBucket(1, 3600, 1)
	items := []Item{
		{Key: []byte("ip"), Limit: ip, Cost: 1},
		{Key: []byte("acct"), Limit: acct, Cost: 1},
		{Key: []byte("acct"), Limit: acct, Cost: 1},                  // denied: acct is empty now
		{Key: []byte("ip"), Limit: ip, Cost: 5, Flags: bucket.Smyte}, // denied, drains ip
		{Key: []byte("ip"), Limit: ip, Cost: 1},                      // denied: drained
	}
	for round := range 2 {
		ds, err := together.Each(nil, items, At(t0))
		if err != nil || len(ds) != len(items) {
			t.Fatalf("round %d: %v, %d decisions", round, err, len(ds))
		}
		for i, it := range items {
			want, err := acquire(alone, it.Key, it.Limit, it.Cost, t0, it.Flags)
			if err != nil {
				t.Fatal(err)
			}
			if ds[i] != want {
				t.Errorf("round %d item %d: together %+v, alone %+v", round, i, ds[i], want)
			}
		}
	}
	if d, _ := peek(together, []byte("ip"), ip, t0); d.Remaining != 0 {
		t.Errorf("ip after a denied Smyte item: %d remaining, want 0 (drained)", d.Remaining)
	}
}
