package shm

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// BenchmarkFingerprint measures both halves in one pass against the two
// passes of xxhash.Sum64 they replace.
func BenchmarkFingerprint(b *testing.B) {
	tb := newHeap(b, Options{SlotCount: 1024})
	for _, n := range []int{7, 15, 32, 200} {
		key := make([]byte, n)
		b.Run(fmt.Sprintf("key=%dB", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				tb.Fingerprint(key, 42)
			}
		})
		b.Run(fmt.Sprintf("key=%dB/xxhash-twice", n), func(b *testing.B) {
			buf := make([]byte, 8+n)
			for b.Loop() {
				binary.LittleEndian.PutUint64(buf, tb.seed0^42)
				lo := xxhash.Sum64(buf)
				binary.LittleEndian.PutUint64(buf, tb.seed1^42)
				sink = lo ^ xxhash.Sum64(buf)
			}
		})
	}
}

var sink uint64

// BenchmarkSlot measures the table alone: lookup, lock, commit of one bucket.
func BenchmarkSlot(b *testing.B) {
	tb := newHeap(b, Options{SlotCount: 1024})
	f := fp(tb, "user:42")
	s, _, _ := tb.LookupOrInsert(f, 1, nil, 0, nil)
	s.Commit(0)
	b.ReportAllocs()
	for b.Loop() {
		s, _ := tb.lookup(f)
		s.State()[0]++
		s.Commit(1)
	}
}
