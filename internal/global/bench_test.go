package global

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// Decisions per second on one global token bucket in one local Redis, 32
// goroutines per core: a Store (exact mode, batched), Leases (leased mode),
// and the baseline, the same script called by the application itself
// (one EVALSHA per decision, go-redis's pool, no batching). redis-cmds/op
// is Redis commands per decision.
func BenchmarkGlobal(b *testing.B) {
	srv := redistest.Start(b)
	l := tokenBucket(1<<50, hour) // never runs out during a benchmark
	ctx := context.Background()
	b.Run("direct", func(b *testing.B) {
		rdb := srv.Client(b)
		b.ReportAllocs()
		b.SetParallelism(32)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := Eval(ctx, rdb, DefaultPrefix, Request{Limit: l, Key: "bench", Cost: 1}); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(1, "redis-cmds/op")
	})
	b.Run("exact", func(b *testing.B) {
		s := newStore(b, Options{Addrs: []string{srv.Addr}, Timeout: time.Second})
		b.ReportAllocs()
		b.SetParallelism(32)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := s.Decide(ctx, Request{Limit: l, Key: "bench", Cost: 1}); err != nil {
					b.Error(err)
					return
				}
			}
		})
		st := s.Stats()
		b.ReportMetric(float64(st.Commands)/float64(b.N), "redis-cmds/op")
		b.ReportMetric(float64(st.Requests)/float64(max(st.RoundTrips, 1)), "batch")
	})
	b.Run("leased", func(b *testing.B) {
		s := newStore(b, Options{Addrs: []string{srv.Addr}, Timeout: time.Second})
		ls := NewLeases(s, LeaseOptions{TTL: time.Second})
		defer ls.Close(ctx)
		b.ReportAllocs()
		b.SetParallelism(32)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := ls.Decide(ctx, l, "bench", 1); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(s.Stats().Commands)/float64(b.N), "redis-cmds/op")
	})
}
