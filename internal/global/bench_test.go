package global

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/redistest"
)

// Decisions per second on a global token bucket in one local Redis, 32
// goroutines per core: the baseline, an application calling Redis itself
// with a short token-bucket script (bench/lua/token_bucket.lua: one
// EVALSHA per decision through go-redis's pool, no batching); a Store
// (exact mode, batched per shard); Leases (leased mode, automatic size).
// Reported per decision: redis-cmds/op, Redis's own CPU time
// (redis-cpu-ns/op: INFO cpu of every server, before and after), and the
// latency at the caller, p50-ns and p99-ns.
func BenchmarkGlobal(b *testing.B) {
	srv := redistest.Start(b)
	benchGlobal(b, []string{srv.Addr}, func(b *testing.B) redis.Scripter { return srv.Client(b) }, []*redis.Client{srv.Client(b)}, 1)
}

// The same on a Redis Cluster of three masters (each with a replica), on
// 64 keys spread over them.
func BenchmarkGlobalCluster(b *testing.B) {
	c := redistest.StartCluster(b)
	var servers []*redis.Client
	for _, n := range c.Nodes {
		servers = append(servers, n.Client(b))
	}
	benchGlobal(b, c.Addrs(), func(b *testing.B) redis.Scripter {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
		b.Cleanup(func() { cc.Close() })
		return cc
	}, servers, 64)
}

// redisCPU returns the CPU time the servers have used, ns.
func redisCPU(b *testing.B, servers []*redis.Client) float64 {
	var total float64
	for _, c := range servers {
		info, err := c.Info(context.Background(), "cpu").Result()
		if err != nil {
			b.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			for _, field := range []string{"used_cpu_sys:", "used_cpu_user:"} {
				if v, ok := strings.CutPrefix(line, field); ok {
					f, _ := strconv.ParseFloat(v, 64)
					total += f * 1e9
				}
			}
		}
	}
	return total
}

func benchGlobal(b *testing.B, addrs []string, direct func(*testing.B) redis.Scripter, servers []*redis.Client, nkeys int) {
	// Never runs out during a benchmark; a bucket in use stays in Redis.
	l := bucket.Limit{Algorithm: bucket.TokenBucket, Max: 1e9, RefillTime: 1e9, RefillAmount: 1e6}
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
		cpu := redisCPU(b, servers)
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
		b.ReportMetric((redisCPU(b, servers)-cpu)/float64(b.N), "redis-cpu-ns/op")
		if len(all) > 0 {
			slices.Sort(all)
			b.ReportMetric(float64(all[len(all)/2]), "p50-ns")
			b.ReportMetric(float64(all[len(all)*99/100]), "p99-ns")
		}
	}
	b.Run("direct", func(b *testing.B) {
		text, err := os.ReadFile("../../bench/lua/token_bucket.lua")
		if err != nil {
			b.Fatal(err)
		}
		script, rdb := redis.NewScript(string(text)), direct(b)
		run(b, func() error {
			// max, refill_time (ms), refill_amount, cost: the limit above.
			return script.Run(ctx, rdb, []string{"bench:{" + key() + "}"}, l.Max, l.RefillTime/1e6, l.RefillAmount, 1).Err()
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
