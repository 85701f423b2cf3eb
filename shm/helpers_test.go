package shm

import (
	"fmt"
	"github.com/cespare/xxhash/v2"
	"path/filepath"
	"testing"
)

// newHeap returns a heap table whose invariants are verified after the test.
func newHeap(t testing.TB, o Options) *Table {
	t.Helper()
	tb, err := NewHeap(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tb.Verify(); err != nil {
			t.Errorf("Verify after test: %v", err)
		}
	})
	return tb
}

// newFile creates a state file in a temporary directory; its invariants are
// verified and it is closed after the test.
func newFile(t testing.TB, o Options) (*Table, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state")
	tb, err := Create(path, o, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if tb.closed.Load() {
			return
		}
		if err := tb.Verify(); err != nil {
			t.Errorf("Verify after test: %v", err)
		}
		tb.Close()
	})
	return tb, path
}

// fp returns a fingerprint for test key k.
func fp(tb *Table, k string) Fingerprint { return tb.Fingerprint([]byte(k), 0) }

// put creates or overwrites bucket k with state {v, v, v} fresh at freshAt.
func put(t testing.TB, tb *Table, k string, v, freshAt, now int64) {
	t.Helper()
	s, _, err := tb.LookupOrInsert(fp(tb, k), 7, []byte(k), now, nil)
	if err != nil {
		t.Fatalf("put %q: %v", k, err)
	}
	*s.State() = [StateWords]int64{v, v, v}
	s.Commit(freshAt)
}

// get returns the first state word of bucket k, and whether it is live.
func get(tb *Table, k string) (int64, bool) {
	s, ok := tb.lookup(fp(tb, k))
	if !ok {
		return 0, false
	}
	defer s.Release()
	if !s.Live() {
		return 0, false
	}
	return s.State()[0], true
}

// keysWithHome returns n keys whose home slot is h.
func keysWithHome(tb *Table, h uint64, n int) []string {
	var keys []string
	for i := 0; len(keys) < n; i++ {
		k := fmt.Sprintf("adversary-%d", i)
		if tb.home(fp(tb, k)) == h {
			keys = append(keys, k)
		}
	}
	return keys
}

func xxhashSum(b []byte) uint64 { return xxhash.Sum64(b) }

// lookup is Lookup waiting as long as a holder lives (which never fails).
func (t *Table) lookup(f Fingerprint) (Slot, bool) {
	s, ok, err := t.Lookup(f, nil)
	if err != nil {
		panic(err)
	}
	return s, ok
}

// lockIndex is LockIndex waiting as long as a holder lives.
func (t *Table) lockIndex(i uint64) Slot {
	s, err := t.LockIndex(i, nil)
	if err != nil {
		panic(err)
	}
	return s
}

// scan is Scan waiting as long as a holder lives.
func (t *Table) scan(cursor, span uint64, fn func(*Entry) bool) uint64 {
	next, err := t.Scan(cursor, span, nil, fn)
	if err != nil {
		panic(err)
	}
	return next
}
