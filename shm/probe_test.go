package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Ensure the slot lifecycle: claim (not live), Commit (live), Release
// (unchanged), Clear (reclaimable, not live).
func TestSlot_lifecycle(t *testing.T) {
	tb := newHeap(t, Options{SlotCount: 16})
	f := fp(tb, "k")
	if _, ok := tb.lookup(f); ok {
		t.Fatal("Lookup found a bucket in an empty table")
	}
	s, found, err := tb.LookupOrInsert(f, 3, nil, 0, nil)
	if err != nil || found || s.Live() || s.Kind() != 3 || s.Fingerprint() != f {
		t.Fatalf("claim: found=%v live=%v kind=%d err=%v", found, s.Live(), s.Kind(), err)
	}
	s.State()[2] = 42
	s.Commit(100)
	s, found, err = tb.LookupOrInsert(f, 3, nil, 50, nil)
	if err != nil || !found || !s.Live() || s.State()[2] != 42 || s.FreshAt() != 100 {
		t.Fatalf("second LookupOrInsert: found=%v live=%v state=%v err=%v", found, s.Live(), *s.State(), err)
	}
	s.Release()
	s, _ = tb.lookup(f)
	s.Clear(nil)
	s, ok := tb.lookup(f)
	if !ok || s.Live() || s.FreshAt() != math.MinInt64 || *s.State() != [StateWords]int64{} {
		t.Fatalf("after Clear: ok=%v live=%v", ok, s.Live())
	}
	s.Release()
	if st := tb.Stats(); st.Inserts != 1 || st.Used != 1 {
		t.Errorf("stats %+v", st)
	}
}

// Ensure that a slot whose bucket is fresh is reclaimed by another key, and
// one that is not is left alone.
func TestInsert_reclaims(t *testing.T) {
	tb := newHeap(t, Options{SlotCount: 64, ProbeCap: 2})
	keys := keysWithHome(tb, 5, 4)
	put(t, tb, keys[0], 1, 100, 0) // fresh at 100
	put(t, tb, keys[1], 2, 200, 0) // fresh at 200
	// Both slots of the probe window are taken and not fresh at 50.
	if _, _, err := tb.LookupOrInsert(fp(tb, keys[2]), 7, nil, 50, nil); !errors.Is(err, ErrTableFull) {
		t.Fatalf("insert into a full window: %v", err)
	}
	// At 150 the first is fresh: it is reclaimed in place.
	put(t, tb, keys[2], 3, 1000, 150)
	if _, ok := get(tb, keys[0]); ok {
		t.Errorf("reclaimed bucket still found")
	}
	for k, want := range map[string]int64{keys[1]: 2, keys[2]: 3} {
		if v, ok := get(tb, k); !ok || v != want {
			t.Errorf("%s = %d, %v; want %d", k, v, ok, want)
		}
	}
	if s, _ := tb.lookup(fp(tb, keys[2])); s.Index() != 5 {
		t.Errorf("reclaimed into slot %d, want 5", s.Index())
	} else {
		s.Release()
	}
	if st := tb.Stats(); st.Reclaims != 1 || st.TableFull != 1 || st.Used != 2 {
		t.Errorf("stats %+v", st)
	}
}

// Ensure that keys chosen to share one home slot fill exactly the probe cap
// and then get ErrTableFull, while other keys are unaffected.
func TestInsert_adversarialKeys(t *testing.T) {
	const probeCap = 8
	tb := newHeap(t, Options{SlotCount: 1024, ProbeCap: probeCap})
	keys := keysWithHome(tb, 1000, probeCap+3)
	for i, k := range keys {
		s, _, err := tb.LookupOrInsert(fp(tb, k), 1, nil, 0, nil)
		if i < probeCap {
			if err != nil {
				t.Fatalf("key %d: %v", i, err)
			}
			if want := uint64(1000 + i); s.Index() != want {
				t.Errorf("key %d in slot %d, want %d", i, s.Index(), want)
			}
			s.Commit(math.MaxInt64)
			continue
		}
		if !errors.Is(err, ErrTableFull) {
			t.Fatalf("key %d past the probe cap: %v", i, err)
		}
	}
	for i, k := range keys[:probeCap] {
		if s, ok := tb.lookup(fp(tb, k)); !ok {
			t.Errorf("key %d lost", i)
		} else {
			s.Release()
		}
	}
	put(t, tb, "innocent", 1, math.MaxInt64, 0)
	if st := tb.Stats(); st.TableFull != 3 {
		t.Errorf("TableFull = %d, want 3", st.TableFull)
	}
}

// Ensure that a lookup finds every bucket of a probe sequence longer than
// the tags it reads before it also bounds itself by the home slot's reach
// (the last bucket lies exactly at the reach), through tags shared by
// several of them, around the end of the table; that an absent bucket of
// the same home is not found; and that every slot's tag is its
// fingerprint's.
func TestFind_longSequence(t *testing.T) {
	tb := newHeap(t, Options{SlotCount: 1024})
	n := tagScan + 90
	keys := keysWithHome(tb, 1000, n+1)
	tags := map[uint8]int{}
	for _, k := range keys[:n] {
		put(t, tb, k, 1, math.MaxInt64, 0)
		tags[tagOf(fp(tb, k))]++
	}
	if len(tags) == n {
		t.Fatal("no two keys share a tag: the test does not exercise a tag match on another bucket")
	}
	if r := tb.reach(1000); r != uint64(n-1) {
		t.Fatalf("reach %d, want %d", r, n-1)
	}
	for i, k := range keys[:n] {
		s, ok := tb.lookup(fp(tb, k))
		if !ok || s.Index() != uint64(1000+i)%1024 {
			t.Fatalf("key %d: ok=%v slot %d", i, ok, s.Index())
		}
		s.Release()
	}
	if s, ok := tb.lookup(fp(tb, keys[n])); ok {
		s.Release()
		t.Errorf("an absent key found in slot %d", s.Index())
	}
	if err := tb.Verify(); err != nil {
		t.Error(err)
	}
}

// Ensure that a holder that died reclaiming a slot for a bucket, between
// its fingerprint and its tag, leaves no second copy of the bucket: the
// next creator takes the insert stripe over from it, finds the bucket by
// its fingerprint, not its stale tag, and gets that slot back (repaired,
// its tag corrected), though a slot before it has become reclaimable.
func TestClaim_afterHolderDiedMidReclaim(t *testing.T) {
	tb := newHeap(t, Options{SlotCount: 64})
	const dead = 0x1234 // a tag no registered holder has
	// x must not share y's tag (the table's seed is random): the lookup
	// would then find slot 11 by its tag, which is not what is tested.
	keys := keysWithHome(tb, 10, 16)
	z, y, x := keys[0], keys[1], ""
	for _, k := range keys[2:] {
		if tagOf(fp(tb, k)) != tagOf(fp(tb, y)) {
			x = k
			break
		}
	}
	if x == "" {
		t.Fatal("14 keys all share y's tag")
	}
	put(t, tb, z, 1, 100, 0) // slot 10, fresh from 100
	put(t, tb, y, 2, 0, 0)   // slot 11, fresh already
	// At 50 a holder claimed slot 11 (the first reclaimable) for x, wrote
	// its fingerprint and died.
	l := tb.stripe(fp(tb, x))
	atomic.StoreUint32(l, atomic.LoadUint32(l)|dead<<genShift|lockHeld)
	p := tb.slotPtr(11)
	atomic.StoreUint32(u32at(p, slotLock), atomic.LoadUint32(u32at(p, slotLock))|dead<<genShift|lockHeld)
	*u8at(p, slotFlags) = 0
	*stateAt(p) = [StateWords]int64{}
	atomic.StoreInt64(i64at(p, slotFreshAt), math.MinInt64)
	f := fp(tb, x)
	atomic.StoreUint64(u64at(p, slotFP0), f.Lo)
	atomic.StoreUint64(u64at(p, slotFP1), f.Hi)
	s, found, err := tb.LookupOrInsert(f, 1, nil, 200, &Wait{Budget: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if !found || s.Index() != 11 {
		t.Fatalf("found=%v in slot %d, want the dead holder's slot 11", found, s.Index())
	}
	s.Release()
	if err := tb.Verify(); err != nil {
		t.Error(err)
	}
}

// Ensure that probe sequences wrap around the end of the table.
func TestInsert_wraps(t *testing.T) {
	tb := newHeap(t, Options{SlotCount: 8})
	keys := keysWithHome(tb, 7, 3)
	for _, k := range keys {
		put(t, tb, k, 1, math.MaxInt64, 0)
	}
	for i, k := range keys {
		s, ok := tb.lookup(fp(tb, k))
		if !ok || s.Index() != uint64(7+i)%8 {
			t.Errorf("key %d: ok=%v slot %d", i, ok, s.Index())
		}
		if ok {
			s.Release()
		}
	}
}

// Ensure that inline keys are kept when they fit and dropped when not.
func TestSlot_inlineKeys(t *testing.T) {
	for _, c := range []struct {
		size, keyLen int
		inline       bool
	}{{64, 1, false}, {128, 64, true}, {128, 65, false}, {256, 192, true}, {256, 193, false}, {256, 1024, false}} {
		tb := newHeap(t, Options{SlotCount: 4, SlotSize: c.size})
		key := []byte(strings.Repeat("k", c.keyLen))
		s, _, err := tb.LookupOrInsert(tb.Fingerprint(key, 0), 1, key, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Key(); (got != nil) != c.inline || (c.inline && string(got) != string(key)) {
			t.Errorf("size %d key %d: Key() = %d bytes, inline want %v", c.size, c.keyLen, len(got), c.inline)
		}
		s.Commit(0)
	}
}

// Ensure that a bucket never occupies two slots when many goroutines create
// the same buckets at once, and that every increment made under the slot
// lock is kept.
func TestInsert_concurrent(t *testing.T) {
	const workers, keys, rounds = 8, 200, 20
	tb := newHeap(t, Options{SlotCount: 512, ProbeCap: 64})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				for i := range keys {
					k := fmt.Sprintf("key-%d", (i+w*7+r)%keys)
					s, _, err := tb.LookupOrInsert(fp(tb, k), 1, nil, 0, nil)
					if err != nil {
						t.Error(err)
						return
					}
					s.State()[0]++
					s.Commit(math.MaxInt64)
				}
			}
		}()
	}
	wg.Wait()
	var total int64
	for i := range keys {
		v, ok := get(tb, fmt.Sprintf("key-%d", i))
		if !ok {
			t.Fatalf("key-%d missing", i)
		}
		total += v
	}
	if total != workers*keys*rounds {
		t.Errorf("total increments %d, want %d", total, workers*keys*rounds)
	}
	if st := tb.Stats(); st.Inserts != keys {
		t.Errorf("%d inserts for %d keys", st.Inserts, keys)
	}
}

// Ensure that concurrent creation and reclaiming under churn keeps every key
// in one slot: keys are fresh as soon as they are written, so goroutines
// keep reclaiming each other's slots.
func TestInsert_concurrentChurn(t *testing.T) {
	const workers, ops = 6, 3000
	tb := newHeap(t, Options{SlotCount: 64, ProbeCap: 16})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range ops {
				k := fmt.Sprintf("k%d", (i*(w+1))%97)
				now := int64(i)
				s, _, err := tb.LookupOrInsert(fp(tb, k), 1, nil, now, nil)
				if errors.Is(err, ErrTableFull) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				s.State()[0] = now
				s.Commit(now + int64(w)) // fresh again soon
			}
		}()
	}
	wg.Wait()
}

// Ensure that fingerprints are the xxhash64 values format.go specifies,
// that the identity matters, and that fingerprints depend on the file's
// seeds.
func TestFingerprint(t *testing.T) {
	a, b := newHeap(t, Options{SlotCount: 4}), newHeap(t, Options{SlotCount: 4})
	for _, n := range []int{1, 7, 23, 24, 25, 119, 120, 121, 500, MaxKeyLen} {
		key := []byte(strings.Repeat("x", n))
		const id = 0x1234
		sum := func(seed uint64) uint64 {
			return xxhashSum(append(binary.LittleEndian.AppendUint64(nil, seed^id), key...))
		}
		if got, want := a.Fingerprint(key, id), (Fingerprint{sum(a.seed0), sum(a.seed1)}); got != want {
			t.Errorf("key of %d bytes: %x, format.go says %x", n, got, want)
		}
		if a.Fingerprint(key, id) == a.Fingerprint(key, id+1) {
			t.Errorf("key of %d bytes: identity ignored", n)
		}
		if a.Fingerprint(key, id) == b.Fingerprint(key, id) {
			t.Errorf("key of %d bytes: same fingerprint under two seeds", n)
		}
	}
	if n := testing.AllocsPerRun(100, func() { a.Fingerprint([]byte("login:alice"), 1) }); n != 0 {
		t.Errorf("Fingerprint allocates %v", n)
	}
}

// Ensure that Scan visits every live bucket once across cursor pages, skips
// buckets that are not live, and stops when asked.
func TestScan(t *testing.T) {
	tb := newHeap(t, Options{SlotCount: 100, SlotSize: 128})
	want := map[string]bool{}
	for i := range 30 {
		k := fmt.Sprintf("k%02d", i)
		put(t, tb, k, 1, math.MaxInt64, 0)
		want[k] = true
	}
	s, _ := tb.lookup(fp(tb, "k07"))
	s.Clear(nil)
	delete(want, "k07")
	got := map[string]int{}
	pages := 0
	for cursor := uint64(0); ; pages++ {
		cursor = tb.scan(cursor, 7, func(e *Entry) bool { got[string(e.Key)]++; return true })
		if cursor == 0 {
			break
		}
	}
	if pages != 14 { // ceil(100/7) pages, the last returning 0
		t.Errorf("%d pages, want 14", pages)
	}
	for k := range want {
		if got[k] != 1 {
			t.Errorf("%s seen %d times", k, got[k])
		}
	}
	if len(got) != len(want) {
		t.Errorf("saw %d buckets, want %d", len(got), len(want))
	}
	n := 0
	next := tb.scan(0, 100, func(*Entry) bool { n++; return n < 3 })
	if n != 3 || next == 0 {
		t.Errorf("early stop: %d visited, next %d", n, next)
	}
	if !tb.InlineKeys() || newHeap(t, Options{SlotCount: 4}).InlineKeys() {
		t.Errorf("InlineKeys")
	}
}

// Ensure the sizing advice holds: with the default probe cap, a table takes
// random buckets up to a load of 0.8 without ErrTableFull, and lookups stop
// at small reaches.
func TestInsert_loadWithDefaultCap(t *testing.T) {
	tb := newHeap(t, Options{SlotCount: 1 << 16})
	n := int(float64(tb.n) * 0.8)
	for i := range n {
		k := fmt.Sprintf("load-%d", i)
		s, _, err := tb.LookupOrInsert(fp(tb, k), 1, nil, 0, nil)
		if err != nil {
			t.Fatalf("bucket %d of %d (load %.2f): %v", i, n, float64(i)/float64(tb.n), err)
		}
		s.Commit(math.MaxInt64)
	}
	var maxReach uint64
	for i := range tb.n {
		maxReach = max(maxReach, tb.reach(i))
	}
	t.Logf("load 0.8: largest reach %d of cap %d", maxReach, tb.probeCap)
}
