package global

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/redistest"
)

// Decisions per second on a global token bucket in one local Redis, 32
// goroutines per core: the baseline, the same script called by the
// application itself (one EVALSHA per decision through go-redis's pool, no
// batching); a Store (exact mode, batched per shard); Leases (leased mode,
// automatic size). Reported per decision: redis-cmds/op, and the latency
// at the caller, p50-ns and p99-ns.
func BenchmarkGlobal(b *testing.B) {
	srv := redistest.Start(b)
	benchGlobal(b, []string{srv.Addr}, func(b *testing.B) redis.Scripter { return srv.Client(b) }, 1)
}

// The same on a Redis Cluster of three masters (each with a replica), on
// 64 keys spread over them.
func BenchmarkGlobalCluster(b *testing.B) {
	c := redistest.StartCluster(b)
	benchGlobal(b, c.Addrs(), func(b *testing.B) redis.Scripter {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
		b.Cleanup(func() { cc.Close() })
		return cc
	}, 64)
}

func benchGlobal(b *testing.B, addrs []string, direct func(*testing.B) redis.Scripter, nkeys int) {
	l := tokenBucket(1<<50, hour) // never runs out during a benchmark
	ctx := context.Background()
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = "bench" + strconv.Itoa(i)
	}
	var next atomic.Uint64
	key := func() string { return keys[next.Add(1)%uint64(nkeys)] }
	run := func(b *testing.B, decide func() error) {
		var mu sync.Mutex
		var all []time.Duration
		b.ReportAllocs()
		b.SetParallelism(32)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			var lat []time.Duration
			for pb.Next() {
				start := time.Now()
				if err := decide(); err != nil {
					b.Error(err)
					return
				}
				lat = append(lat, time.Since(start))
			}
			mu.Lock()
			all = append(all, lat...)
			mu.Unlock()
		})
		b.StopTimer()
		if len(all) > 0 {
			slices.Sort(all)
			b.ReportMetric(float64(all[len(all)/2]), "p50-ns")
			b.ReportMetric(float64(all[len(all)*99/100]), "p99-ns")
		}
	}
	b.Run("direct", func(b *testing.B) {
		rdb := direct(b)
		run(b, func() error {
			_, err := Eval(ctx, rdb, DefaultPrefix, Request{Limit: l, Key: key(), Cost: 1})
			return err
		})
		b.ReportMetric(1, "redis-cmds/op")
	})
	b.Run("exact", func(b *testing.B) {
		s := newStore(b, Options{Addrs: addrs, Timeout: time.Second})
		run(b, func() error {
			_, err := s.Decide(ctx, Request{Limit: l, Key: key(), Cost: 1})
			return err
		})
		st := s.Stats()
		b.ReportMetric(float64(st.Commands)/float64(b.N), "redis-cmds/op")
		b.ReportMetric(float64(st.Requests)/float64(max(st.RoundTrips, 1)), "batch")
	})
	b.Run("leased", func(b *testing.B) {
		s := newStore(b, Options{Addrs: addrs, Timeout: time.Second})
		ls := NewLeases(s, LeaseOptions{TTL: time.Second})
		defer ls.Close(ctx)
		run(b, func() error {
			_, err := ls.Decide(ctx, l, key(), 1)
			return err
		})
		b.ReportMetric(float64(s.Stats().Commands)/float64(b.N), "redis-cmds/op")
	})
}
