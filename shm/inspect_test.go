package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// fillFile creates a closed, clean state file of 1024 64-byte slots holding
// n buckets of kind 7 (fresh at 1000) and returns its path.
func fillFile(t *testing.T, n int) string {
	t.Helper()
	tb, path := newFile(t, Options{SlotCount: 1024})
	for i := range n {
		put(t, tb, fmt.Sprint("k", i), int64(i), 1000, 0)
	}
	if err := tb.Verify(); err != nil {
		t.Fatal(err)
	}
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func openImage(t *testing.T, path string) *Image {
	t.Helper()
	im, err := OpenImage(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { im.Close() })
	return im
}

// usedSlot returns the byte offset of the first slot of the file at path
// that holds a fingerprint.
func usedSlot(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for off := int64(HeaderSize); off < int64(len(b)); off += 64 {
		if binary.LittleEndian.Uint64(b[off+slotFP0:]) != 0 {
			return off
		}
	}
	t.Fatal("no used slot")
	return 0
}

func writeAt(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func TestImage_clean(t *testing.T) {
	path := fillFile(t, 300)
	before, _ := os.ReadFile(path)
	im := openImage(t, path)
	r := im.Inspect(500)
	if r.State != Clean || r.Version != FormatVersion || r.Geometry.SlotCount != 1024 || r.Geometry.SlotSize != 64 {
		t.Fatalf("report %+v", r)
	}
	if r.Used != 300 || r.Live != 300 || r.ByKind[7] != 300 || r.Fresh != 0 || r.Conservative != 0 {
		t.Fatalf("counts: used %d live %d by kind %v fresh %d", r.Used, r.Live, r.ByKind, r.Fresh)
	}
	if r2 := im.Inspect(1000); r2.Fresh != 300 {
		t.Fatalf("fresh at 1000: %d", r2.Fresh)
	}
	var sum uint64
	for _, n := range r.Displacement {
		sum += n
	}
	if sum != 300 || r.Displacement[0] == 0 || r.MaxDisplacement >= uint64(1)<<len(r.Displacement) {
		t.Fatalf("displacements %v, max %d", r.Displacement, r.MaxDisplacement)
	}
	if r.Stats.Inserts != 300 || r.Load() != 300.0/1024 {
		t.Fatalf("stats %+v, load %v", r.Stats, r.Load())
	}
	if err := im.Verify(); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Fatal("inspecting the file changed it")
	}
}

// Ensure a torn slot (its checksum no longer matches) is reported with its
// index, by Verify of the image as by the table's.
func TestImage_torn(t *testing.T) {
	path := fillFile(t, 50)
	off := usedSlot(t, path)
	writeAt(t, path, off+slotState+3, []byte{0x5a}) // a byte of the state that was not written
	im := openImage(t, path)
	err := im.Verify()
	slot := (off - HeaderSize) / 64
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), fmt.Sprintf("slot %d: checksum ", slot)) {
		t.Fatalf("Verify = %v, want slot %d's checksum", err, slot)
	}
}

// Ensure a file whose owner died mid-update reads as dirty, and a slot it
// left locked is reported.
func TestImage_dirty(t *testing.T) {
	tb, path := newFile(t, Options{SlotCount: 1024})
	for i := range 20 {
		put(t, tb, fmt.Sprint("k", i), int64(i), 1000, 0)
	}
	if err := tb.Sync(); err != nil {
		t.Fatal(err)
	}
	// The file as a crash leaves it: dirty, the owner registered under a
	// pid that no longer runs.
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	crashed := filepath.Join(t.TempDir(), "crashed")
	reg := int(registryOffset(tb.n, int(tb.slotSize), tb.cells))
	for i := range NumHolders {
		if e := reg + i*holderSize; binary.LittleEndian.Uint32(b[e:]) == tb.gen {
			binary.LittleEndian.PutUint32(b[e+4:], 1<<22+1) // above the largest pid Linux hands out
		}
	}
	os.WriteFile(crashed, b, 0o600)
	im := openImage(t, crashed)
	if r := im.Inspect(0); r.State != Dirty || r.Used != 20 {
		t.Fatalf("state %v, used %d", r.State, r.Used)
	}
	if err := im.Verify(); err != nil {
		t.Fatalf("a dirty file without damage: %v", err)
	}
	// Lock a slot as the dead owner would have left it.
	off := usedSlot(t, crashed)
	w := binary.LittleEndian.Uint32(b[off:]) | lockHeld | tb.gen<<genShift
	writeAt(t, crashed, off, binary.LittleEndian.AppendUint32(nil, w))
	err = openImage(t, crashed).Verify()
	if want := fmt.Sprintf("slot %d: lock held by a process that is gone", (off-HeaderSize)/64); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Verify = %v, want %q", err, want)
	}
}

// Ensure inspect and verify beside a live owner that keeps writing see the
// file in use and report no damage.
func TestImage_live(t *testing.T) {
	tb, path := newFile(t, Options{SlotCount: 4096, SlotSize: 128})
	var stop atomic.Bool
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				put(t, tb, fmt.Sprint("g", g, "k", i%1000), int64(i), int64(i), int64(i))
			}
		})
	}
	defer func() { stop.Store(true); wg.Wait() }()
	for range 5 {
		im := openImage(t, path)
		if r := im.Inspect(0); r.State != InUse || r.Owner != os.Getpid() {
			t.Fatalf("state %v, owner %d", r.State, r.Owner)
		}
		if err := im.Verify(); err != nil {
			t.Fatalf("Verify beside a live owner: %v", err)
		}
	}
}

func TestOpenImage_errors(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "text")
	os.WriteFile(text, []byte("hello"), 0o600)
	if _, err := OpenImage(text); !errors.Is(err, ErrNotStateFile) {
		t.Errorf("a text file: %v", err)
	}
	if _, err := OpenImage(dir); !errors.Is(err, ErrNotRegular) {
		t.Errorf("a directory: %v", err)
	}
	path := fillFile(t, 1)
	writeAt(t, path, offSlotCount, []byte{9})
	if _, err := OpenImage(path); !errors.Is(err, ErrChecksum) {
		t.Errorf("a damaged header: %v", err)
	}
}
