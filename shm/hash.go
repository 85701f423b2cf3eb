package shm

import (
	"encoding/binary"
	"math/bits"
)

// The fingerprint's two halves are xxhash64 (seed 0) of two inputs that
// differ only in their first 8 bytes (format.go). sum64x2 computes both in
// one pass, two lanes interleaved, so that they run in parallel on the
// processor instead of one after the other, and words common to both inputs
// are mixed once. It is XXH64 as specified
// (github.com/Cyan4973/xxHash, doc/xxhash_spec.md), and
// TestSum64x2 checks it against github.com/cespare/xxhash/v2 for every
// length.

const (
	prime1 uint64 = 11400714785074694791
	prime2 uint64 = 14029467366897019727
	prime3 uint64 = 1609587929392839161
	prime4 uint64 = 9650029242287828579
	prime5 uint64 = 2870177450012600261
)

func xround(acc, input uint64) uint64 {
	acc += input * prime2
	acc = bits.RotateLeft64(acc, 31)
	return acc * prime1
}

func xmerge(acc, val uint64) uint64 {
	acc ^= xround(0, val)
	return acc*prime1 + prime4
}

func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

// sum64x2 returns xxhash64 (seed 0) of p0 (8 bytes, little-endian)
// followed by key, and of p1 followed by key.
func sum64x2(p0, p1 uint64, key []byte) (h0, h1 uint64) {
	n := uint64(8 + len(key))
	tail := key
	if n >= 32 {
		q1, q2 := prime1, prime2 // variables: the sums below wrap around, as the spec says
		a1, a2, a3, a4 := q1+q2, q2, uint64(0), -q1
		b1, b2, b3, b4 := a1, a2, a3, a4
		// The first stripe: the differing word, then three of the key.
		a1, b1 = xround(a1, p0), xround(b1, p1)
		w := le64(key[0:8])
		a2, b2 = xround(a2, w), xround(b2, w)
		w = le64(key[8:16])
		a3, b3 = xround(a3, w), xround(b3, w)
		w = le64(key[16:24])
		a4, b4 = xround(a4, w), xround(b4, w)
		tail = key[24:]
		for len(tail) >= 32 {
			w0, w1, w2, w3 := le64(tail[0:8]), le64(tail[8:16]), le64(tail[16:24]), le64(tail[24:32])
			a1, b1 = xround(a1, w0), xround(b1, w0)
			a2, b2 = xround(a2, w1), xround(b2, w1)
			a3, b3 = xround(a3, w2), xround(b3, w2)
			a4, b4 = xround(a4, w3), xround(b4, w3)
			tail = tail[32:]
		}
		h0 = bits.RotateLeft64(a1, 1) + bits.RotateLeft64(a2, 7) + bits.RotateLeft64(a3, 12) + bits.RotateLeft64(a4, 18)
		h1 = bits.RotateLeft64(b1, 1) + bits.RotateLeft64(b2, 7) + bits.RotateLeft64(b3, 12) + bits.RotateLeft64(b4, 18)
		h0 = xmerge(xmerge(xmerge(xmerge(h0, a1), a2), a3), a4)
		h1 = xmerge(xmerge(xmerge(xmerge(h1, b1), b2), b3), b4)
		h0 += n
		h1 += n
	} else {
		// Fewer than 32 bytes: the differing word is the first of the tail.
		h0, h1 = prime5+n, prime5+n
		h0 ^= xround(0, p0)
		h1 ^= xround(0, p1)
		h0 = bits.RotateLeft64(h0, 27)*prime1 + prime4
		h1 = bits.RotateLeft64(h1, 27)*prime1 + prime4
	}
	for ; len(tail) >= 8; tail = tail[8:] {
		k := xround(0, le64(tail[:8]))
		h0 = bits.RotateLeft64(h0^k, 27)*prime1 + prime4
		h1 = bits.RotateLeft64(h1^k, 27)*prime1 + prime4
	}
	if len(tail) >= 4 {
		k := uint64(binary.LittleEndian.Uint32(tail[:4])) * prime1
		h0 = bits.RotateLeft64(h0^k, 23)*prime2 + prime3
		h1 = bits.RotateLeft64(h1^k, 23)*prime2 + prime3
		tail = tail[4:]
	}
	for _, c := range tail {
		k := uint64(c) * prime5
		h0 = bits.RotateLeft64(h0^k, 11) * prime1
		h1 = bits.RotateLeft64(h1^k, 11) * prime1
	}
	return avalanche(h0), avalanche(h1)
}

func avalanche(h uint64) uint64 {
	h ^= h >> 33
	h *= prime2
	h ^= h >> 29
	h *= prime3
	h ^= h >> 32
	return h
}
