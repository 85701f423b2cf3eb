package shm

import (
	"errors"
	"math"
	"os"
	"testing"
	"unsafe"

	"github.com/sluicehq/sluice/vocab"
)

// putExt creates or overwrites bucket k with a block of words words, each
// word v, its checksum in state word 1, fresh at freshAt. It returns the
// block's first word's address, to tell blocks apart.
func putExt(t testing.TB, tb *Table, k string, words int, v, freshAt, now int64) *int64 {
	t.Helper()
	s, _, err := tb.LookupOrInsert(fp(tb, k), 9, []byte(k), now, nil)
	if err != nil {
		t.Fatalf("put %q: %v", k, err)
	}
	ext, _, err := s.Ext(words, now, nil)
	if err != nil {
		s.Release()
		t.Fatalf("Ext %q: %v", k, err)
	}
	for i := range ext {
		ext[i] = v
	}
	s.State()[0] = v
	s.State()[stateSum] = vocab.BlockSum(ext)
	s.Commit(freshAt)
	return &ext[0]
}

// Ensure a slot keeps its block from one lock to the next, gets another of
// a new length, and gives it back to the arena when cleared.
func TestExt_keepsAndFrees(t *testing.T) {
	tb := newHeap(t, Options{SlotCount: 64})
	a := putExt(t, tb, "a", 100, 1, math.MaxInt64, 0) // 13 cells
	if got := tb.Stats().ArenaUsed; got != 13 {
		t.Errorf("ArenaUsed = %d, want 13", got)
	}
	s, _ := tb.lookup(fp(tb, "a"))
	ext, fresh, err := s.Ext(100, 0, nil)
	if err != nil || fresh || &ext[0] != a || ext[99] != 1 {
		t.Errorf("Ext again: fresh %v, err %v, same block %v", fresh, err, err == nil && &ext[0] == a)
	}
	s.Release()
	putExt(t, tb, "b", 8, 2, math.MaxInt64, 0)
	putExt(t, tb, "a", 8, 3, math.MaxInt64, 0) // another length: a new block
	if got := tb.Stats().ArenaUsed; got != 2 {
		t.Errorf("ArenaUsed = %d after resizing, want 2", got)
	}
	for _, k := range []string{"a", "b"} {
		s, _ := tb.lookup(fp(tb, k))
		s.Clear(nil)
	}
	if got := tb.Stats().ArenaUsed; got != 0 {
		t.Errorf("ArenaUsed = %d after clearing, want 0", got)
	}
}

// Ensure a full arena frees the blocks of fresh buckets before it refuses,
// refuses with ErrArenaFull when every block is live, and that a slot
// reclaimed by another bucket returns its block.
func TestExt_fullSweepsFresh(t *testing.T) {
	tb := newHeap(t, Options{SlotCount: 64, ArenaCells: 4})
	putExt(t, tb, "live", 16, 1, 1000, 0) // 2 cells, fresh at 1000
	putExt(t, tb, "old", 16, 1, 10, 0)    // 2 cells, fresh at 10
	s, _, err := tb.LookupOrInsert(fp(tb, "new"), 9, nil, 20, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Ext(16, 20, nil); err != nil {
		t.Fatalf("Ext with a fresh bucket's block to sweep: %v", err)
	}
	s.State()[stateSum] = 0
	s.Clear(nil)
	if _, ok := get(tb, "old"); ok {
		t.Error("the swept bucket is still live")
	}
	putExt(t, tb, "other", 16, 1, 1000, 20)
	s, _, _ = tb.LookupOrInsert(fp(tb, "third"), 9, nil, 20, nil)
	tb.lastSweep.Store(0)
	if _, _, err := s.Ext(16, 20, nil); !errors.Is(err, ErrArenaFull) {
		t.Errorf("Ext in a full arena: %v, want ErrArenaFull", err)
	}
	s.Clear(nil)
	if got := tb.Stats().ArenaFull; got != 1 {
		t.Errorf("ArenaFull = %d, want 1", got)
	}
}

// Ensure recovery keeps sound blocks, takes a torn one away (the bucket
// turns conservative) and frees cells that no slot owns.
func TestRecoverArena(t *testing.T) {
	tb, path := newFile(t, Options{SlotCount: 64, ArenaCells: 64})
	putExt(t, tb, "sound", 20, 7, math.MaxInt64, 0)
	torn := putExt(t, tb, "torn", 20, 7, math.MaxInt64, 0)
	*(*int64)(unsafe.Add(unsafe.Pointer(torn), 8*5)) = 8 // a word written after the slot was synced
	if _, ok, _ := tb.alloc(5, nil); !ok {               // cells a crashed process allocated
		t.Fatal("alloc")
	}
	dirty, err := os.ReadFile(path) // as a kill -9 leaves it
	if err != nil {
		t.Fatal(err)
	}
	*(*int64)(unsafe.Add(unsafe.Pointer(torn), 8*5)) = 7
	tb.Close()
	if err := os.WriteFile(path, dirty, 0o600); err != nil {
		t.Fatal(err)
	}
	tb, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	if o := tb.Opened(); !o.Recovered || o.Torn != 1 {
		t.Errorf("opened: %+v, want recovered, 1 torn", o)
	}
	s, _ := tb.lookup(fp(tb, "torn"))
	if !s.Conservative() || s.HasExt() {
		t.Errorf("torn block: conservative %v, has a block %v; want conservative without one", s.Conservative(), s.HasExt())
	}
	s.Release()
	s, _ = tb.lookup(fp(tb, "sound"))
	ext, fresh, err := s.Ext(20, 0, nil)
	if err != nil || fresh || s.Conservative() || ext[19] != 7 {
		t.Errorf("sound block: fresh %v, err %v, conservative %v", fresh, err, s.Conservative())
	}
	s.Release()
	if got := tb.Stats().ArenaUsed; got != 3 {
		t.Errorf("ArenaUsed = %d, want the sound block's 3 cells", got)
	}
	if err := tb.Verify(); err != nil {
		t.Error(err)
	}
}

// Ensure a bit flipped in a block of a file closed cleanly is caught when
// the file is opened: the bucket turns conservative, never lenient.
func TestRecoverArena_bitFlipInBlock(t *testing.T) {
	tb, path := newFile(t, Options{SlotCount: 64, ArenaCells: 64})
	putExt(t, tb, "k", 40, 7, math.MaxInt64, 0)
	g := tb.Geometry()
	tb.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	off := registryOffset(g.SlotCount, g.SlotSize, g.ArenaCells) - int64(g.ArenaCells)*CellSize // cell 0
	for bit := 0; bit < 40*64; bit += 3 {
		img := append([]byte(nil), b...)
		img[off+int64(bit/8)] ^= 1 << (bit % 8)
		if err := os.WriteFile(path, img, 0o600); err != nil {
			t.Fatal(err)
		}
		tb, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		s, _ := tb.lookup(fp(tb, "k"))
		if !s.Conservative() || s.HasExt() {
			t.Fatalf("bit %d of the block flipped: conservative %v, block %v", bit, s.Conservative(), s.HasExt())
		}
		s.Release()
		tb.Close()
	}
}
