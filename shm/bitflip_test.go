package shm

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"
)

var flipAll = flag.Bool("bitflip.all", false, "flip every bit of the whole header page, not only its fields")

// flipDir returns a directory on tmpfs when there is one: the bit-flip test
// opens thousands of files, and msync on tmpfs costs nothing.
func flipDir(t *testing.T) string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if dir, err := os.MkdirTemp("/dev/shm", "sluice-flip"); err == nil {
			t.Cleanup(func() { os.RemoveAll(dir) })
			return dir
		}
	}
	return t.TempDir()
}

// flipHighTime is the high time of TestBitFlips' file.
const flipHighTime = 1_700_000_000_000_000_000

// Ensure that a bit flipped anywhere in the header's fields or in any slot
// of a cleanly closed file never crashes, hangs or reads out of bounds:
// Open fails with one of its sentinel errors, or the table opens and the
// damage is detected and reset when the slot is used, and the high time is
// never raised (a flipped mark is ignored). The flips that go undetected
// are in fields that carry no meaning: counters, reserved bytes, the
// generation bits of a free lock.
func TestBitFlips(t *testing.T) {
	dir := flipDir(t)
	orig := filepath.Join(dir, "orig")
	tb, err := Create(orig, Options{SlotCount: 8, ProbeCap: 8}, 0)
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"a", "b", "c", "d", "e"}
	for i, k := range keys {
		put(t, tb, k, int64(i), math.MaxInt64, 0)
	}
	tb.RecordTime(flipHighTime - 1)
	tb.RecordTime(flipHighTime)
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}
	image, err := os.ReadFile(orig)
	if err != nil {
		t.Fatal(err)
	}
	sentinels := []error{ErrNotStateFile, ErrVersion, ErrByteOrder, ErrChecksum, ErrGeometry, ErrTruncated}
	headerBits := (offHighMarks + numHighMarks*highMarkSize) * 8
	if *flipAll {
		headerBits = HeaderSize * 8
	}
	var bits []int
	for b := range headerBits {
		bits = append(bits, b)
	}
	// The slots; the arena's flips are arena_test.go's.
	for b := HeaderSize * 8; b < (HeaderSize+8*MinSlotSize)*8; b++ {
		bits = append(bits, b)
	}
	path := filepath.Join(dir, "flipped")
	undetected := 0
	for _, bit := range bits {
		img := append([]byte(nil), image...)
		img[bit/8] ^= 1 << (bit % 8)
		if err := os.WriteFile(path, img, 0o600); err != nil {
			t.Fatal(err)
		}
		where := fmt.Sprintf("byte %#x bit %d", bit/8, bit%8)
		done := make(chan string, 1)
		go func() { done <- useFlipped(path, keys, bit, &undetected, sentinels) }()
		select {
		case msg := <-done:
			if msg != "" {
				t.Fatalf("%s: %s", where, msg)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: hang", where)
		}
	}
	t.Logf("%d flips; %d in the generation bits of free locks, harmless", len(bits), undetected)
}

// useFlipped opens a damaged file and uses every slot and key, as serving
// would. It returns "" if the damage was refused with a sentinel error or
// detected (or is a known blind spot, counted in undetected), else what went
// wrong. The table is closed before it returns.
func useFlipped(path string, keys []string, bit int, undetected *int, sentinels []error) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprintf("panic: %v", r)
		}
	}()
	tb, err := Open(path)
	if err != nil {
		for _, s := range sentinels {
			if errors.Is(err, s) {
				return ""
			}
		}
		return fmt.Sprintf("untyped error %v", err)
	}
	defer tb.Close()
	if v, ok := tb.HighTime(); !ok || v > flipHighTime || v < flipHighTime-1 {
		return fmt.Sprintf("high time %d, %v after a flip; it was %d", v, ok, flipHighTime)
	}
	for i := range tb.n {
		tb.lockIndex(i).Release()
	}
	for _, k := range keys {
		if s, ok := tb.lookup(fp(tb, k)); ok {
			s.Release()
		}
		if s, _, err := tb.LookupOrInsert(fp(tb, k+"-new"), 1, nil, math.MaxInt64, nil); err == nil {
			s.Release()
		}
	}
	if tb.Stats().Torn == 0 && bit/8 >= HeaderSize {
		off := (bit/8 - HeaderSize) % 64
		if off >= slotLock+4 || bit%32 == 0 || bit%32 >= reachShift {
			return "damage not detected" // a field under the checksum, the lock bit or the reach
		}
		// Otherwise a generation bit of a free lock: it means nothing and is
		// overwritten by the next lock.
		*undetected++
	}
	return ""
}
