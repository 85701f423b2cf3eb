package shm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// asVersion6 returns the bytes of a version-7 file closed cleanly as the
// last release of version 6 would have left the same table: without the
// tags, under version 6.
func asVersion6(b []byte) []byte {
	le := binary.LittleEndian
	n, ss, cells := le.Uint64(b[offSlotCount:]), int(le.Uint32(b[offSlotSize:])), le.Uint64(b[offArenaCells:])
	b = bytes.Clone(b[:tagsOffset(n, ss, cells)])
	le.PutUint32(b[offVersion:], 6)
	le.PutUint64(b[offChecksum:], headerSum(b))
	return b
}

// Ensure an upgrade to the tags' version killed at any point (as kill -9
// leaves it: what it wrote is in the page cache), or cut by a power loss
// there (a random subset of the pages it wrote reached the disk), is
// redone by the next Open: every bucket is found with its value and the
// table verifies, its tags included. Both for a file closed cleanly and
// for one whose owner died.
func TestUpgrade_killedMidway(t *testing.T) {
	tb, path := newFile(t, Options{SlotCount: 1024, SlotSize: 128})
	const keys = 700
	for i := range keys {
		put(t, tb, fmt.Sprintf("k%d", i), int64(i), math.MaxInt64, 0)
	}
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}
	cur, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	for _, dirty := range []bool{false, true} {
		img := asVersion6(cur)
		if dirty {
			binary.LittleEndian.PutUint32(img[offCleanFlag:], dirtyMagic)
		}
		_, points := recoverImage(t, img, 0)
		if points < 6 {
			t.Fatalf("only %d crash points in the upgrade", points)
		}
		for k := 1; k <= points; k++ {
			killed, _ := recoverImage(t, img, k)
			lost := append(bytes.Clone(img), make([]byte, len(killed)-len(img))...)
			for p := 0; p < len(lost); p += pageSize {
				if rng.IntN(2) == 0 {
					copy(lost[p:p+pageSize], killed[p:p+pageSize])
				}
			}
			for what, b := range map[string][]byte{"killed": killed, "power lost": lost} {
				p := filepath.Join(t.TempDir(), "state")
				if err := os.WriteFile(p, b, 0o600); err != nil {
					t.Fatal(err)
				}
				tb, err := Open(p)
				if err != nil {
					t.Fatalf("dirty %v, %s at crash point %d of %d: %v", dirty, what, k, points, err)
				}
				for i := range keys {
					if v, ok := get(tb, fmt.Sprintf("k%d", i)); !ok || v != int64(i) {
						t.Fatalf("dirty %v, %s at crash point %d of %d: k%d = %d, %v", dirty, what, k, points, i, v, ok)
					}
				}
				if err := tb.Verify(); err != nil {
					t.Fatalf("dirty %v, %s at crash point %d of %d: %v", dirty, what, k, points, err)
				}
				tb.Close()
			}
		}
	}
}
