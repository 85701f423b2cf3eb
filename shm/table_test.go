package shm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Ensure that buckets survive Close and Open, and that a clean file is
// reopened without repairs.
func TestTable_reopen(t *testing.T) {
	tb, path := newFile(t, Options{SlotCount: 1000, SlotSize: 128})
	for i, k := range []string{"a", "b", "login:alice"} {
		put(t, tb, k, int64(i+1), 1<<62, 0)
	}
	want := tb.Geometry()
	if err := tb.Verify(); err != nil {
		t.Fatal(err)
	}
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}
	tb, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	if got := tb.Geometry(); got != want {
		t.Errorf("geometry %+v, want %+v", got, want)
	}
	for i, k := range []string{"a", "b", "login:alice"} {
		if v, ok := get(tb, k); !ok || v != int64(i+1) {
			t.Errorf("%s = %d, %v; want %d", k, v, ok, i+1)
		}
	}
	if st := tb.Stats(); st.Torn != 0 || st.Inserts != 3 || st.Used != 3 {
		t.Errorf("stats after clean reopen: %+v", st)
	}
	if err := tb.Verify(); err != nil {
		t.Error(err)
	}
}

// Ensure that the file's blocks are allocated at creation (not sparse) and
// that its size is what Options.FileSize says.
func TestCreate_allocates(t *testing.T) {
	o := Options{SlotCount: 5000}
	tb, path := newFile(t, o)
	_ = tb
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	// Slots rounded up to a page, the bitmap's page, the cells (rounded up
	// to a page), the holders registry, the tags (a byte per slot, rounded
	// up to a page).
	if want := int64(327680 + 4096 + 81920 + 0x14000 + 8192); fi.Size() != o.FileSize() || fi.Size() != want {
		t.Errorf("size %d, want %d (FileSize %d)", fi.Size(), want, o.FileSize())
	}
	if blocks := fi.Sys().(*syscall.Stat_t).Blocks * 512; blocks < fi.Size() {
		t.Errorf("file is sparse: %d bytes allocated of %d", blocks, fi.Size())
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
}

// Ensure that Create never replaces an existing file and leaves no
// temporary file behind.
func TestCreate_exists(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state")
	if err := os.WriteFile(path, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Create(path, Options{SlotCount: 10}, 0); !errors.Is(err, os.ErrExist) {
		t.Errorf("Create over a file: %v, want ErrExist", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "precious" {
		t.Errorf("file changed: %q", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("directory holds %d entries, want 1", len(ents))
	}
}

func TestCreate_badOptions(t *testing.T) {
	for _, o := range []Options{{}, {SlotCount: 10, SlotSize: 96}, {SlotCount: MaxSlotCount + 1}, {SlotCount: 1, ProbeCap: -1}} {
		if _, err := NewHeap(o); !errors.Is(err, ErrOptions) {
			t.Errorf("NewHeap(%+v) = %v, want ErrOptions", o, err)
		}
		if _, err := Create(filepath.Join(t.TempDir(), "s"), o, 0); !errors.Is(err, ErrOptions) {
			t.Errorf("Create(%+v) = %v, want ErrOptions", o, err)
		}
	}
}

// Ensure that a second owner is refused while the first holds the file.
func TestOpen_locked(t *testing.T) {
	_, path := newFile(t, Options{SlotCount: 10})
	if _, err := Open(path); !errors.Is(err, ErrLocked) {
		t.Errorf("second Open: %v, want ErrLocked", err)
	}
}

// Ensure that Open refuses every kind of foreign or damaged file with its
// precise error and leaves the file's bytes unchanged.
func TestOpen_refuses(t *testing.T) {
	good := func(t *testing.T) []byte {
		tb, path := newFile(t, Options{SlotCount: 8})
		put(t, tb, "k", 1, 1<<62, 0)
		if err := tb.Close(); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	le := binary.LittleEndian
	reseal := func(b []byte) { le.PutUint64(b[offChecksum:], xxhashSum(b[:checksummed])) }
	rng := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 8192)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	cases := []struct {
		name   string
		damage func([]byte) []byte
		want   error
	}{
		{"empty", func([]byte) []byte { return nil }, ErrNotStateFile},
		{"random", func([]byte) []byte { return random }, ErrNotStateFile},
		{"foreign", func([]byte) []byte { return []byte("#!/bin/sh\necho hello\n") }, ErrNotStateFile},
		{"short header", func(b []byte) []byte { return b[:100] }, ErrTruncated},
		{"truncated slots", func(b []byte) []byte { return b[:len(b)-64] }, ErrTruncated},
		{"extended", func(b []byte) []byte { return append(b, make([]byte, 64)...) }, ErrGeometry},
		{"version", func(b []byte) []byte { le.PutUint32(b[offVersion:], FormatVersion+1); reseal(b); return b }, ErrVersion},
		{"version 0", func(b []byte) []byte { le.PutUint32(b[offVersion:], 0); reseal(b); return b }, ErrVersion},
		{"byte order", func(b []byte) []byte { le.PutUint32(b[offByteOrder:], 0x04030201); reseal(b); return b }, ErrByteOrder},
		{"checksum", func(b []byte) []byte { b[offSeed0] ^= 1; return b }, ErrChecksum},
		{"slot size", func(b []byte) []byte { le.PutUint32(b[offSlotSize:], 96); reseal(b); return b }, ErrGeometry},
		{"slot count", func(b []byte) []byte { le.PutUint64(b[offSlotCount:], 200); reseal(b); return b }, ErrTruncated},
		{"probe cap", func(b []byte) []byte { le.PutUint32(b[offProbeCap:], 0); reseal(b); return b }, ErrGeometry},
		{"header size", func(b []byte) []byte { le.PutUint32(b[offHeaderSize:], 8192); reseal(b); return b }, ErrGeometry},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := c.damage(good(t))
			path := filepath.Join(t.TempDir(), "state")
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			tb, err := Open(path)
			if err == nil {
				tb.Close()
			}
			if !errors.Is(err, c.want) {
				t.Errorf("Open: %v, want %v", err, c.want)
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(after, b) {
				t.Errorf("Open modified a file it refused")
			}
		})
	}
	t.Run("directory", func(t *testing.T) {
		if _, err := Open(t.TempDir()); err == nil {
			t.Error("Open of a directory succeeded")
		}
	})
	t.Run("symlink", func(t *testing.T) {
		_, target := newFile(t, Options{SlotCount: 8})
		link := filepath.Join(t.TempDir(), "link")
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(link); !errors.Is(err, ErrNotRegular) {
			t.Errorf("Open of a symlink: %v, want ErrNotRegular", err)
		}
	})
	t.Run("missing", func(t *testing.T) {
		if _, err := Open(filepath.Join(t.TempDir(), "nope")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Open of a missing file: %v, want ErrNotExist", err)
		}
	})
}

func TestClose_twice(t *testing.T) {
	tb, _ := newFile(t, Options{SlotCount: 8})
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tb.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
	if err := tb.Sync(); !errors.Is(err, ErrClosed) {
		t.Errorf("Sync after Close: %v", err)
	}
}

func TestSync_counts(t *testing.T) {
	tb, _ := newFile(t, Options{SlotCount: 8})
	put(t, tb, "k", 1, 1<<62, 0)
	for range 3 {
		if err := tb.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if st := tb.Stats(); st.Syncs != 3 || st.SyncErrors != 0 {
		t.Errorf("stats %+v", st)
	}
}

// Ensure the high time is kept in two checksummed marks: it only rises, a
// damaged mark is ignored (the other one holds), and with both damaged it
// is unknown rather than wrong.
func TestHighTime(t *testing.T) {
	tb, _ := newFile(t, Options{SlotCount: 8})
	check := func(want int64, wantOK bool) {
		t.Helper()
		if v, ok := tb.HighTime(); v != want || ok != wantOK {
			t.Fatalf("HighTime = %d, %v; want %d, %v", v, ok, want, wantOK)
		}
	}
	check(0, true)
	tb.RecordTime(10)
	tb.RecordTime(20)
	tb.RecordTime(15) // lower: ignored
	check(20, true)
	hdr := tb.headerBytes()
	newer := 0
	if v, _ := highMark(hdr, 1); v == 20 {
		newer = 1
	}
	hdr[offHighMarks+newer*highMarkSize+7] ^= 0x40 // the newer mark's time jumps years ahead
	check(10, true)
	tb.RecordTime(30) // rewrites the damaged mark
	check(30, true)
	hdr[offHighMarks+8] ^= 1
	hdr[offHighMarks+highMarkSize+8] ^= 1
	check(0, false)
	tb.RecordTime(40)
	check(40, true)
}
