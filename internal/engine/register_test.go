package engine

import (
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/bucket"
)

func TestRegister_semantics(t *testing.T) {
	e := newEngine(t, 64)
	k := []byte("tat:alice")
	at := func(s int64) Time { return At(t0 + s*sec) }
	check := func(what string, r Register, err error, want Register) {
		t.Helper()
		if err != nil || r != want {
			t.Fatalf("%s: %+v, %v; want %+v", what, r, err, want)
		}
	}
	r, err := e.RegGet(k, at(0))
	check("get absent", r, err, Register{TTL: -1})
	r, err = e.RegCAS(k, 0, 1, sec, at(0))
	check("cas absent", r, err, Register{TTL: -1})
	r, err = e.RegSet(k, 7, 10*sec, at(0))
	check("set absent", r, err, Register{OK: true, Value: 7, TTL: 10 * sec})
	r, err = e.RegSet(k, 8, 10*sec, at(1))
	check("set present", r, err, Register{Value: 7, TTL: 9 * sec})
	r, err = e.RegCAS(k, 8, 9, 10*sec, at(2))
	check("cas mismatch", r, err, Register{Value: 7, TTL: 8 * sec})
	r, err = e.RegCAS(k, 7, -9, 5*sec, at(2))
	check("cas match", r, err, Register{OK: true, Value: -9, TTL: 5 * sec})
	r, err = e.RegGet(k, at(3))
	check("get", r, err, Register{OK: true, Value: -9, TTL: 4 * sec})
	// A bucket of the same key is another thing.
	var d bucket.Decision
	if err := e.Acquire(&d, k, tokenBucket(1, 60, 1), 1, at(3), 0); err != nil || !d.Allowed {
		t.Fatalf("acquire on the register's key: %+v, %v", d, err)
	}
	r, err = e.RegGet(k, at(3))
	check("get after the bucket", r, err, Register{OK: true, Value: -9, TTL: 4 * sec})
	// Expired: absent to every operation, and settable again.
	r, err = e.RegGet(k, at(7))
	check("get expired", r, err, Register{TTL: -1})
	r, err = e.RegCAS(k, -9, 1, sec, at(7))
	check("cas expired", r, err, Register{TTL: -1})
	r, err = e.RegSet(k, 1, sec, at(7))
	check("set expired", r, err, Register{OK: true, Value: 1, TTL: sec})
	r, err = e.RegDel(k, at(7))
	check("del", r, err, Register{OK: true, TTL: -1})
	r, err = e.RegDel(k, at(7))
	check("del again", r, err, Register{TTL: -1})
	r, err = e.RegGet(k, at(7))
	check("get deleted", r, err, Register{TTL: -1})
}

func TestRegister_badInput(t *testing.T) {
	e := newEngine(t, 64)
	now := At(t0)
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"ttl 0", second(e.RegSet([]byte("k"), 1, 0, now)), ErrTTL},
		{"ttl negative", second(e.RegCAS([]byte("k"), 1, 2, -sec, now)), ErrTTL},
		{"ttl too long", second(e.RegSet([]byte("k"), 1, MaxRegisterTTL+1, now)), ErrTTL},
		{"empty key", second(e.RegGet(nil, now)), ErrEmptyKey},
		{"huge key", second(e.RegSet([]byte(strings.Repeat("k", MaxKeyLen+1)), 1, sec, now)), ErrKeyTooLong},
		{"huge key del", second(e.RegDel([]byte(strings.Repeat("k", MaxKeyLen+1)), now)), ErrKeyTooLong},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.want)
		}
	}
	if _, err := e.RegSet([]byte("k"), 1, MaxRegisterTTL, now); err != nil {
		t.Errorf("the longest ttl: %v", err)
	}
}

func second(_ Register, err error) error { return err }

// TestRegister_reclaimed: an expired register's slot is taken by new
// registers or buckets, as an idle bucket's; a live one's is not.
func TestRegister_reclaimed(t *testing.T) {
	e := newEngine(t, 16)
	keys := 0
	for ; keys < 64; keys++ {
		if _, err := e.RegSet([]byte{'r', byte(keys)}, 1, sec, At(t0)); errors.Is(err, ErrTableFull) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if keys == 0 || keys == 64 {
		t.Fatalf("%d registers in a table of 16 slots", keys)
	}
	if _, err := e.RegSet([]byte("new"), 1, sec, At(t0)); !errors.Is(err, ErrTableFull) {
		t.Fatalf("a register in a table full of live ones: %v", err)
	}
	var d bucket.Decision
	if err := e.Acquire(&d, []byte("bucket"), tokenBucket(5, 60, 1), 1, At(t0+sec), 0); err != nil {
		t.Fatalf("a bucket once the registers expired: %v", err)
	}
	if r, err := e.RegSet([]byte("new"), 1, sec, At(t0+sec)); err != nil || !r.OK {
		t.Fatalf("a register once the others expired: %+v, %v", r, err)
	}
}

// TestRegister_casRace: goroutines increment one register by
// compare-and-swap, each retrying on a lost race: no increment is lost.
func TestRegister_casRace(t *testing.T) {
	e := newEngine(t, 64)
	k := []byte("counter")
	const workers, each = 8, 200
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				for {
					now := At(t0)
					r, err := e.RegGet(k, now)
					if err != nil {
						t.Error(err)
						return
					}
					runtime.Gosched() // let others write between the read and the swap
					if !r.OK {
						r, err = e.RegSet(k, 1, 3600*sec, now)
					} else {
						r, err = e.RegCAS(k, r.Value, r.Value+1, 3600*sec, now)
					}
					if err != nil {
						t.Error(err)
						return
					}
					if r.OK {
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	if r, err := e.RegGet(k, At(t0)); err != nil || r.Value != workers*each {
		t.Fatalf("after %d increments: %+v, %v", workers*each, r, err)
	}
}
