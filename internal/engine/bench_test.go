package engine

import (
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/shm"
)

// The benchmark limits admit about one request per simulated microsecond,
// and simulated time advances 1 µs per request, so nearly every request is
// allowed and writes its slot: the expensive path.
var benchLimits = []struct {
	name string
	l    *Limit
}{
	{"token_bucket", lim(bucket.Limit{Algorithm: bucket.TokenBucket, Max: 1000, RefillTime: bucket.Millisecond, RefillAmount: 1000})},
	{"gcra", lim(bucket.Limit{Algorithm: bucket.GCRA, Burst: 1000, Count: 1_000_000, Period: int64(time.Second)})},
}

const randomKeys = 1_000_000

// benchKey writes the key of bucket i into buf, as a server finds a key in
// its (cache-hot) read buffer. The random benchmarks and their baseline draw
// i the same way, so the only memory they miss is their own table's.
func benchKey(buf []byte, i int) []byte {
	return strconv.AppendInt(append(buf[:0], "user:"...), int64(i), 10)
}

// benchTable creates a state file sized for n buckets at a load of 0.7.
func benchTable(b *testing.B, n int) *Engine {
	b.Helper()
	tb, err := shm.Create(filepath.Join(b.TempDir(), "state"), shm.Options{SlotCount: uint64(n*10/7 + 1)}, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tb.Close() })
	return New(tb)
}

func BenchmarkAcquire(b *testing.B) {
	for _, bl := range benchLimits {
		b.Run(bl.name, func(b *testing.B) {
			b.Run("hot", func(b *testing.B) {
				e := benchTable(b, 1000)
				key, now := []byte("user:42"), t0
				var d bucket.Decision
				b.ReportAllocs()
				for b.Loop() {
					now += 1000
					if err := e.Acquire(&d, key, bl.l, 1, At(now), 0); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("1M-random", func(b *testing.B) {
				e := benchTable(b, randomKeys)
				now := t0
				buf := make([]byte, 0, 32)
				var d bucket.Decision
				for i := range randomKeys {
					if err := e.Acquire(&d, benchKey(buf, i), bl.l, 1, At(now), 0); err != nil {
						b.Fatal(err)
					}
				}
				rng := rand.New(rand.NewPCG(2, 2))
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					now += 1000
					if err := e.Acquire(&d, benchKey(buf, rng.IntN(randomKeys)), bl.l, 1, At(now), 0); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// BenchmarkAcquireParallel measures contention: every goroutine draws from
// the same 1M keys (or hammers one key).
func BenchmarkAcquireParallel(b *testing.B) {
	bl := benchLimits[1]
	b.Run(bl.name+"/1M-random", func(b *testing.B) {
		e := benchTable(b, randomKeys)
		buf := make([]byte, 0, 32)
		var d bucket.Decision
		for i := range randomKeys {
			e.Acquire(&d, benchKey(buf, i), bl.l, 1, At(t0), 0)
		}
		b.ReportAllocs()
		b.ResetTimer()
		var seq uint64
		var mu sync.Mutex
		b.RunParallel(func(pb *testing.PB) {
			mu.Lock()
			seq++
			rng := rand.New(rand.NewPCG(3, seq))
			mu.Unlock()
			now, buf := t0, make([]byte, 0, 32)
			var d bucket.Decision
			for pb.Next() {
				now += 1000
				e.Acquire(&d, benchKey(buf, rng.IntN(randomKeys)), bl.l, 1, At(now), 0)
			}
		})
	})
}
