package shm

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"

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

// findBySlots is find as it was before the tags: it reads the home slot's
// reach, then each slot's fingerprint. BenchmarkFind compares the two.
func (t *Table) findBySlots(fp Fingerprint) (p unsafe.Pointer, idx uint64, ok bool) {
	i := t.home(fp)
	for range t.reach(i) + 1 {
		p := t.slotPtr(i)
		got := loadFP(p)
		if got == fp {
			return p, i, true
		}
		if got == (Fingerprint{}) {
			return nil, 0, false
		}
		i = t.next(i)
	}
	return nil, 0, false
}

// BenchmarkFind measures a lookup and lock of a random one of 1M buckets
// (64-byte slots at a load of 0.7), through the tags and, for comparison,
// through the slots alone, on the same table, in alternating batches so
// that a shared machine's load falls on both alike: the metrics tags-ns/op
// and slots-ns/op, and their ratio. hot looks for one bucket, over and
// over; miss for absent keys.
func BenchmarkFind(b *testing.B) {
	const keys = 1 << 20
	tb := newHeap(b, Options{SlotCount: keys * 10 / 7})
	fps := make([]Fingerprint, keys)
	for i := range fps {
		k := fmt.Sprintf("key-%d", i)
		put(b, tb, k, 1, math.MaxInt64, 0)
		fps[i] = fp(tb, k)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	order := make([]Fingerprint, 1<<22)
	for i := range order {
		order[i] = fps[rng.IntN(keys)]
	}
	for _, name := range []string{"hit", "hot", "miss"} {
		miss := name == "miss"
		switch name {
		case "hot":
			order = []Fingerprint{fps[0]}
		case "miss":
			order = make([]Fingerprint, 1<<22)
			for i := range order {
				order[i] = fp(tb, fmt.Sprintf("absent-%d", i))
			}
		}
		b.Run(name, func(b *testing.B) {
			finds := [2]func(Fingerprint) (unsafe.Pointer, uint64, bool){tb.find, tb.findBySlots}
			var spent [2]time.Duration
			var ops [2]int
			v, n, start := 0, 0, time.Now()
			for b.Loop() {
				p, _, ok := finds[v](order[(ops[0]+ops[1]+n)%len(order)])
				if ok != !miss {
					b.Fatal("lookup disagrees")
				}
				if ok {
					tb.lockWord(u32at(p, slotLock), nil)
					unlockWord(u32at(p, slotLock))
				}
				if n++; n == 4096 {
					now := time.Now()
					spent[v] += now.Sub(start)
					ops[v] += n
					v, n, start = 1-v, 0, now
				}
			}
			if ops[0] > 0 && ops[1] > 0 {
				tags, slots := float64(spent[0])/float64(ops[0]), float64(spent[1])/float64(ops[1])
				b.ReportMetric(tags, "tags-ns/op")
				b.ReportMetric(slots, "slots-ns/op")
				b.ReportMetric(tags/slots, "tags/slots")
			}
		})
	}
}
