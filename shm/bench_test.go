package shm

import (
	"fmt"
	"testing"
)

func BenchmarkFingerprint(b *testing.B) {
	tb := newHeap(b, Options{SlotCount: 1024})
	for _, n := range []int{7, 32, 200} {
		key := make([]byte, n)
		b.Run(fmt.Sprintf("key=%dB", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				tb.Fingerprint(key, 42)
			}
		})
	}
}

// BenchmarkSlot measures the table alone: lookup, lock, commit of one bucket.
func BenchmarkSlot(b *testing.B) {
	tb := newHeap(b, Options{SlotCount: 1024})
	f := fp(tb, "user:42")
	s, _, _ := tb.LookupOrInsert(f, 1, nil, 0)
	s.Commit(0)
	b.ReportAllocs()
	for b.Loop() {
		s, _ := tb.Lookup(f)
		s.State()[0]++
		s.Commit(1)
	}
}
