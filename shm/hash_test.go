package shm

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// Ensure sum64x2 is xxhash64 of each prefix followed by the key, for every
// key length through several stripes, so fingerprints (and the files that
// hold them) are what they were.
func TestSum64x2(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for n := range 300 {
		key := make([]byte, n)
		for i := range key {
			key[i] = byte(rng.Uint32())
		}
		p0, p1 := rng.Uint64(), rng.Uint64()
		h0, h1 := sum64x2(p0, p1, key)
		for _, c := range []struct{ p, h uint64 }{{p0, h0}, {p1, h1}} {
			buf := binary.LittleEndian.AppendUint64(nil, c.p)
			if want := xxhash.Sum64(append(buf, key...)); c.h != want {
				t.Fatalf("key of %d bytes: %#x, xxhash64 says %#x", n, c.h, want)
			}
		}
	}
}

func FuzzSum64x2(f *testing.F) {
	f.Add(uint64(0), uint64(1), []byte("login:alice"))
	f.Fuzz(func(t *testing.T, p0, p1 uint64, key []byte) {
		h0, h1 := sum64x2(p0, p1, key)
		b0 := append(binary.LittleEndian.AppendUint64(nil, p0), key...)
		b1 := append(binary.LittleEndian.AppendUint64(nil, p1), key...)
		if h0 != xxhash.Sum64(b0) || h1 != xxhash.Sum64(b1) {
			t.Fatalf("sum64x2 differs from xxhash64 for a key of %d bytes", len(key))
		}
	})
}
