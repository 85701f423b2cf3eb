// Package baseline holds the in-process limiters users would otherwise
// run, benchmarked the way internal/engine's BenchmarkAcquire runs the
// engine (same key draw, same simulated clock), so that make bench shows
// both side by side. It lives in the bench module so that x/time/rate stays
// out of the main module.
package baseline

import (
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice/internal/cputime"
)

const (
	t0         = int64(1_700_000_000) * int64(time.Second) // internal/engine's anchor
	randomKeys = 1_000_000
)

// benchKey writes the key of bucket i into buf, as internal/engine's
// benchmark does.
func benchKey(buf []byte, i int) []byte {
	return strconv.AppendInt(append(buf[:0], "user:"...), int64(i), 10)
}

// BenchmarkBaseline is what users would otherwise run in process:
// golang.org/x/time/rate, one limiter, and a mutex-guarded map of limiters
// with the same key draw as BenchmarkAcquire.
func BenchmarkBaseline(b *testing.B) {
	start := time.Unix(0, t0)
	newLimiter := func() *rate.Limiter { return rate.NewLimiter(rate.Limit(1e6), 1000) }
	b.Run("xrate/hot", func(b *testing.B) {
		lim, now := newLimiter(), start
		b.ReportAllocs()
		cpu := cputime.Start()
		for b.Loop() {
			now = now.Add(time.Microsecond)
			lim.AllowN(now, 1)
		}
		cpu.Report(b)
	})
	b.Run("xrate-mutex-map/1M-random", func(b *testing.B) {
		var mu sync.Mutex
		m := make(map[string]*rate.Limiter, randomKeys)
		buf := make([]byte, 0, 32)
		for i := range randomKeys {
			m[string(benchKey(buf, i))] = newLimiter()
		}
		rng := rand.New(rand.NewPCG(2, 2))
		now := start
		b.ReportAllocs()
		b.ResetTimer()
		cpu := cputime.Start()
		for b.Loop() {
			now = now.Add(time.Microsecond)
			k := benchKey(buf, rng.IntN(randomKeys))
			mu.Lock()
			lim := m[string(k)]
			lim.AllowN(now, 1)
			mu.Unlock()
		}
		cpu.Report(b)
	})
}
