package global

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/redistest"
)

// What a MULTI of two global items costs beside the two items decided one
// after the other, on one local Redis, 32 goroutines per core, 64 tags:
// per MULTI (or pair of decisions), Redis's own CPU time (redis-cpu-ns/op)
// and its commands.
func BenchmarkStoreMulti(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	s := newStore(b, Options{Addrs: []string{srv.Addr}})
	l := bucket.Limit{Algorithm: bucket.TokenBucket, Max: 1e9, RefillTime: 1e9, RefillAmount: 1e6}
	w := bucket.Limit{Algorithm: bucket.FixedWindow, Max: 1e12, Window: 3600e9}
	ctx := context.Background()
	var next atomic.Uint64
	pair := func() (Request, Request) {
		tag := "{t" + strconv.Itoa(int(next.Add(1)%64)) + "}"
		return Request{Limit: l, Key: tag + ":a", Cost: 1}, Request{Limit: w, Key: tag + ":b", Cost: 1}
	}
	run := func(b *testing.B, decide func(a, c Request) error) {
		st := s.Stats()
		cpu := redisCPU(b, []*redis.Client{rdb})
		b.SetParallelism(32)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := decide(pair()); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.StopTimer()
		b.ReportMetric((redisCPU(b, []*redis.Client{rdb})-cpu)/float64(b.N), "redis-cpu-ns/op")
		b.ReportMetric(float64(s.Stats().Commands-st.Commands)/float64(b.N), "redis-cmds/op")
	}
	b.Run("multi", func(b *testing.B) {
		reqs := func(a, c Request) []Request { return []Request{a, c} }
		run(b, func(a, c Request) error {
			_, ok, err := s.Multi(ctx, reqs(a, c), AllOrNothing, nil)
			if err == nil && !ok {
				b.Error("denied")
			}
			return err
		})
	})
	b.Run("two-decides", func(b *testing.B) {
		run(b, func(a, c Request) error {
			if _, err := s.Decide(ctx, a); err != nil {
				return err
			}
			_, err := s.Decide(ctx, c)
			return err
		})
	})
}
