package shm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// crashCopy copies the live file, as a crash of the owner would leave it,
// and opens the copy.
func crashCopy(t *testing.T, path string) *Table {
	t.Helper()
	b, err := os.ReadFile(path) // the page cache: what the mapping holds
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(t.TempDir(), "crashed")
	if err := os.WriteFile(cp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	tb, err := Open(cp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tb.Verify(); err != nil {
			t.Errorf("Verify after recovery: %v", err)
		}
		tb.Close()
	})
	return tb
}

// Ensure that opening a file whose owner died detects slots left locked or
// half-written, marks them conservative, zeroes abandoned claims of empty
// slots, and leaves every other bucket as it was.
func TestOpen_recoversTornSlots(t *testing.T) {
	tb, path := newFile(t, Options{SlotCount: 64, SlotSize: 128})
	for i, k := range []string{"intact", "locked", "torn", "torn-key"} {
		put(t, tb, k, int64(i+10), math.MaxInt64, 0)
	}
	// An owner that died holding a slot lock, mid-update.
	held, _ := tb.lookup(fp(tb, "locked"))
	held.State()[0] = 999
	// A slot written back half-updated: its checksum no longer matches.
	s, _ := tb.lookup(fp(tb, "torn"))
	s.Release()
	s.State()[1] = 12345
	// An inline key torn.
	s, _ = tb.lookup(fp(tb, "torn-key"))
	s.Release()
	keyBytes(s.p, 8)[0] ^= 0xff
	// A claim of an empty slot abandoned half-way.
	var empty uint64
	for empty = 0; loadFP(tb.slotPtr(empty)) != (Fingerprint{}); empty++ {
	}
	e := tb.lockIndex(empty)
	*u64at(e.p, slotFP0) = 0 // fingerprint not yet written, kind written
	*u8at(e.p, slotKind) = 9

	rec := crashCopy(t, path)
	held.Commit(math.MaxInt64) // let the original's cleanup verify cleanly
	e.Release()
	*u8at(e.p, slotKind) = 0
	s, _ = tb.lookup(fp(tb, "torn"))
	s.Commit(math.MaxInt64)
	s, _ = tb.lookup(fp(tb, "torn-key"))
	keyBytes(s.p, 8)[0] ^= 0xff
	s.Commit(math.MaxInt64)

	// Three buckets torn, one of them locked; the abandoned claim of an
	// empty slot held no bucket: it is released, not counted as torn.
	if st, o := rec.Stats(), rec.Opened(); st.Torn != 3 || st.LockedOnOpen != 1 || !o.Recovered || o.Torn != 3 || o.Released != 1 {
		t.Errorf("Torn=%d LockedOnOpen=%d, opened %+v; want 3, 1, and 3 torn and 1 released", st.Torn, st.LockedOnOpen, o)
	}
	for _, c := range []struct {
		key          string
		conservative bool
	}{{"intact", false}, {"locked", true}, {"torn", true}, {"torn-key", true}} {
		s, ok := rec.lookup(fp(rec, c.key))
		if !ok {
			t.Errorf("%s lost", c.key)
			continue
		}
		if s.Conservative() != c.conservative || !s.Live() {
			t.Errorf("%s: conservative=%v live=%v", c.key, s.Conservative(), s.Live())
		}
		s.Release()
	}
	if s, _ := rec.lookup(fp(rec, "torn-key")); s.Key() != nil {
		t.Errorf("torn inline key kept")
	} else {
		s.Release()
	}
	// The owner replaces a conservative state and commits; the flag clears.
	s, _ = rec.lookup(fp(rec, "locked"))
	s.Commit(math.MaxInt64)
	if s, _ := rec.lookup(fp(rec, "locked")); s.Conservative() {
		t.Errorf("Commit kept the conservative flag")
	} else {
		s.Release()
	}
	if v := rec.slotBytes(empty); v[slotKind] != 0 {
		t.Errorf("abandoned claim not zeroed")
	}
}

// Ensure that a cleanly closed file is not scanned on open, and that damage
// to a slot in it is caught on the slot's first use instead: counted, and
// the slot reset to a conservative state.
func TestOpen_cleanFileCheckedOnUse(t *testing.T) {
	path, idx := closedWithBucket(t, "k")
	patch(t, path, HeaderSize+int64(idx)*64+slotState, []byte{0xff})
	tb, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	if st := tb.Stats(); st.Torn != 0 {
		t.Errorf("clean file was scanned: %+v", st)
	}
	s, ok := tb.lookup(fp(tb, "k"))
	if !ok || !s.Conservative() {
		t.Fatalf("damaged slot on first use: found=%v conservative=%v", ok, ok && s.Conservative())
	}
	s.Commit(math.MaxInt64)
	if st := tb.Stats(); st.Torn != 1 {
		t.Errorf("Torn = %d, want 1", st.Torn)
	}
	if err := tb.Verify(); err != nil {
		t.Error(err)
	}
}

// Ensure that a slot lock held under another generation (its holder is
// gone; here, a lock word set in a file that was then marked clean) is taken
// over on first use instead of hanging it, and the slot repaired; and that
// insert locks left held are freed on open.
func TestOpen_staleLocks(t *testing.T) {
	path, idx := closedWithBucket(t, "k")
	patch(t, path, HeaderSize+int64(idx)*64+slotLock, binary.LittleEndian.AppendUint32(nil, 0x1234<<genShift|lockHeld))
	for i := range numInsertLocks {
		patch(t, path, offInsertLocks+int64(i)*4, []byte{1})
	}
	tb, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	done := make(chan bool)
	go func() {
		s, ok := tb.lookup(fp(tb, "k"))
		if ok {
			ok = s.Conservative()
			s.Commit(math.MaxInt64)
		}
		put(t, tb, "new", 1, math.MaxInt64, 0) // takes an insert lock
		done <- ok
	}()
	select {
	case ok := <-done:
		if !ok {
			t.Errorf("slot behind a stale lock not repaired")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a stale lock hangs its slot")
	}
	if st := tb.Stats(); st.Torn != 1 || st.LockedOnOpen != 1 {
		t.Errorf("Torn=%d LockedOnOpen=%d, want 1 and 1", st.Torn, st.LockedOnOpen)
	}
}

// Ensure that recovery recomputes each home slot's reach: after a power loss
// a displaced bucket's page may be on disk without its home slot's reach.
func TestOpen_recomputesReach(t *testing.T) {
	tb, path := newFile(t, Options{SlotCount: 64})
	keys := keysWithHome(tb, 10, 4)
	for _, k := range keys {
		put(t, tb, k, 1, math.MaxInt64, 0)
	}
	if r := tb.reach(10); r != 3 {
		t.Fatalf("reach %d after 4 buckets with one home, want 3", r)
	}
	atomic.StoreUint32(u32at(tb.slotPtr(10), slotLock), 0) // the reach is lost
	rec := crashCopy(t, path)
	atomic.StoreUint32(u32at(tb.slotPtr(10), slotLock), 3<<reachShift)
	for _, k := range keys {
		if _, ok := get(rec, k); !ok {
			t.Errorf("%s unreachable after recovery", k)
		}
	}
}

// Ensure that a reservation whose holder died is released on open.
func TestOpen_releasesDeadReservations(t *testing.T) {
	tb, path := newFile(t, Options{SlotCount: 16})
	s, _, err := tb.LookupOrInsert(fp(tb, "k"), 1, nil, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Reserve()
	rec := crashCopy(t, path)
	s, _ = tb.lookup(fp(tb, "k"))
	s.Clear(nil)
	r, ok := rec.lookup(fp(rec, "k"))
	if !ok || r.Live() || r.FreshAt() != math.MinInt64 {
		t.Errorf("dead reservation kept: ok=%v freshAt=%d", ok, r.FreshAt())
	}
	if ok {
		r.Release()
	}
}

// closedWithBucket creates a cleanly closed state file of 8 slots holding
// one bucket, and returns its path and the bucket's slot.
func closedWithBucket(t *testing.T, key string) (string, uint64) {
	t.Helper()
	tb, path := newFile(t, Options{SlotCount: 8})
	put(t, tb, key, 1, math.MaxInt64, 0)
	s, _ := tb.lookup(fp(tb, key))
	idx := s.Index()
	s.Release()
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}
	return path, idx
}

// patch overwrites the file at path with b at offset off.
func patch(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// Ensure Scrub finds and repairs damage in a table opened from a clean file,
// then stops the checks on use; and returns at once when there is nothing to
// scrub, or when asked to stop.
func TestScrub(t *testing.T) {
	path, idx := closedWithBucket(t, "k")
	patch(t, path, HeaderSize+int64(idx)*64+slotFreshAt, []byte{0x55})
	tb, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	if !tb.checkOnUse.Load() {
		t.Fatal("a table opened clean does not check slots on use")
	}
	stop := make(chan struct{})
	close(stop)
	if tb.Scrub(stop) || !tb.checkOnUse.Load() {
		t.Fatal("a stopped Scrub reported completion")
	}
	if !tb.Scrub(make(chan struct{})) || tb.checkOnUse.Load() {
		t.Fatal("Scrub did not complete")
	}
	if st := tb.Stats(); st.Torn != 1 {
		t.Errorf("Torn = %d after scrubbing one damaged slot", st.Torn)
	}
	if s, ok := tb.lookup(fp(tb, "k")); !ok || !s.Conservative() {
		t.Errorf("damaged slot not reset by Scrub")
	} else {
		s.Commit(math.MaxInt64)
	}
	if err := tb.Verify(); err != nil {
		t.Error(err)
	}
	fresh := newHeap(t, Options{SlotCount: 8})
	created, _ := newFile(t, Options{SlotCount: 8})
	for _, tb := range []*Table{fresh, created} {
		if tb.checkOnUse.Load() || !tb.Scrub(stop) {
			t.Errorf("a new table needs no scrub")
		}
	}
}

// errCrash stops a recovery at a crash point.
var errCrash = errors.New("crash")

// Ensure a recovery killed at any point is redone by the next Open with the
// same outcome: the second scan resets no slot the first kept sound, and
// the two leave every slot byte for byte as one uninterrupted recovery
// does. (A scan that first cleared every lock word, reach included, left
// sound slots failing their checksum when killed: the next start reset
// tens of thousands of healthy buckets.)
func TestRecover_restartable(t *testing.T) {
	img := dirtyImage(t)
	want, points := recoverImage(t, img, 0)
	if points < 20 {
		t.Fatalf("only %d crash points: the image needs little recovery", points)
	}
	slots := func(b []byte) []byte { return b[HeaderSize:] }
	for k := 1; k <= points; k++ {
		partial, _ := recoverImage(t, img, k)
		got, _ := recoverImage(t, partial, 0)
		if !bytes.Equal(slots(got), slots(want)) {
			for i := 0; i < len(slots(got)); i += 64 {
				if !bytes.Equal(slots(got)[i:i+64], slots(want)[i:i+64]) {
					t.Fatalf("killed at crash point %d of %d: slot %d is\n%x\nafter the second recovery, want\n%x",
						k, points, i/64, slots(got)[i:i+64], slots(want)[i:i+64])
				}
			}
		}
	}
}

// recoverImage opens a copy of the file image img, killing the recovery
// at its crash point k (0: never), and returns the file's bytes afterwards
// (what the killed process left in the page cache) and the number of crash
// points the recovery passed.
func recoverImage(t *testing.T, img []byte, k int) ([]byte, int) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "image")
	if err := os.WriteFile(path, img, 0o600); err != nil {
		t.Fatal(err)
	}
	n := 0
	crashPoint = func() {
		if n++; n == k {
			panic(errCrash)
		}
	}
	defer func() { crashPoint = func() {} }()
	func() {
		defer func() {
			if r := recover(); r != nil && r != errCrash {
				panic(r)
			}
		}()
		tb, err := Open(path) // killed mid-scan: its mapping and lock leak, as a dead process's would
		if err != nil {
			t.Fatal(err)
		}
		if err := tb.Verify(); err != nil {
			t.Fatalf("after recovery: %v", err)
		}
		if err := tb.Close(); err != nil {
			t.Fatal(err)
		}
	}()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b, n
}

// dirtyImage returns the bytes of a state file whose owner died leaving
// every kind of damage recovery repairs: slots locked mid-update, a
// checksum broken, a reservation and a claim abandoned, reaches lost and
// overstated, and buckets left unreachable past an emptied slot.
func dirtyImage(t *testing.T) []byte {
	t.Helper()
	tb, path := newFile(t, Options{SlotCount: 256, SlotSize: 128})
	for i := range 170 {
		put(t, tb, fmt.Sprintf("k%d", i), int64(i), math.MaxInt64, 0)
	}
	// The reservation first: a claim locks the slots of its probe
	// sequence, and would wait forever on a lock this test holds below.
	r, _, err := tb.LookupOrInsert(fp(tb, "reserved"), 1, nil, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Reserve()
	var held []Slot
	for i := range 5 { // died holding these locks, mid-update
		s, _ := tb.lookup(fp(tb, fmt.Sprintf("k%d", i*7)))
		s.State()[1] = 999
		held = append(held, s)
	}
	s, _ := tb.lookup(fp(tb, "k50")) // a write torn: the checksum no longer matches
	s.Release()
	s.State()[2] ^= 1
	var empty uint64
	for empty = 0; loadFP(tb.slotPtr(empty)) != (Fingerprint{}); empty++ {
	}
	claim := tb.lockIndex(empty) // a claim abandoned before its fingerprint
	*u8at(claim.p, slotKind) = 9
	// Reaches lost and overstated; buckets past an emptied slot (a power
	// loss wrote their page, not the emptied slot's).
	lost, over, emptied := 0, 0, 0
	for i := range tb.n {
		p := tb.slotPtr(i)
		switch r := tb.reach(i); {
		case r > 0 && lost < 6:
			atomic.StoreUint32(u32at(p, slotLock), atomic.LoadUint32(u32at(p, slotLock))&(1<<reachShift-1))
			lost++
		case r == 0 && loadFP(p) != (Fingerprint{}) && over < 6:
			setReach(u32at(p, slotLock), 5)
			over++
		}
		if i > 0 && loadFP(p) != (Fingerprint{}) && loadFP(tb.slotPtr(i-1)) != (Fingerprint{}) && i%40 == 0 && emptied < 3 {
			if w := atomic.LoadUint32(u32at(p, slotLock)); w&lockHeld == 0 {
				clear(tb.slotBytes(i))
				emptied++
			}
		}
	}
	img, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Let the original verify and close cleanly: it is not the image.
	for _, s := range held {
		s.State()[1] = 0
		s.Release()
	}
	claim.Release()
	tb.closed.Store(true)
	tb.mm.Unmap()
	tb.file.Close()
	return img
}
