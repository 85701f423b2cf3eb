package global

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/bench/lua"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/redistest"
)

// What sliding_log and window_counters cost Redis, beside the scripts
// their users run today: CALLR's sorted set (bench/lua/callr_sliding_log.lua)
// and a Figma-style hash of sub-window counters (bench/lua/figma_counters.lua).
// Each side decides on 100 buckets of one local Redis, in pipelines of 32
// calls from 8 goroutines (the Store's functions with FCALL, the users'
// scripts with EVALSHA): first limit requests per bucket, all admitted
// (redis-us/admit: Redis's CPU per decision, INFO cpu), then as many more,
// all denied (redis-us/deny); bytes/bucket is a bucket's MEMORY USAGE after
// the admissions (its key, value and Redis's overhead), the mean of all. window_counters' buckets are also filled one
// request per sub-window over the 60 sub-windows of the window, at explicit
// times (bytes/bucket-60), where the hash holds 60 fields. Run it with
// -benchtime 1x (make bench-global).
func BenchmarkGlobalAlgorithms(b *testing.B) {
	for _, limit := range []int64{100, 1000} {
		for _, side := range []string{"sliding_log", "callr-zset", "window_counters", "figma-hash"} {
			b.Run(side+"/"+strconv.FormatInt(limit, 10), func(b *testing.B) {
				for b.Loop() {
					algorithmCost(b, side, limit)
				}
			})
		}
	}
	b.Run("concurrency/5", func(b *testing.B) {
		for b.Loop() {
			algorithmCost(b, "concurrency", 5)
		}
	})
}

const costBuckets = 100

// costKey is the caller's key of bucket k.
func costKey(k int) string { return "b:" + strconv.Itoa(k) }

func algorithmCost(b *testing.B, side string, limit int64) {
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	ctx := context.Background()
	if err := rdb.FunctionLoad(ctx, library).Err(); err != nil {
		b.Fatal(err)
	}
	var l bucket.Limit
	var script *redis.Script
	switch side {
	case "sliding_log", "callr-zset":
		l = bucket.Limit{Algorithm: bucket.SlidingLog, Max: limit, Window: int64(time.Hour)}
		script = redis.NewScript(lua.CallrSlidingLog)
	case "window_counters", "figma-hash":
		l = bucket.Limit{Algorithm: bucket.WindowCounters, Max: limit, Window: int64(time.Hour), Counters: 60}
		script = redis.NewScript(lua.FigmaCounters)
	case "concurrency":
		l = bucket.Limit{Algorithm: bucket.Concurrency, Max: limit, Lease: int64(time.Hour)}
	}
	if err := l.Validate(); err != nil {
		b.Fatal(err)
	}
	p := prepare(&l, 0)
	users := side == "callr-zset" || side == "figma-hash"
	if users {
		if err := script.Load(ctx, rdb).Err(); err != nil {
			b.Fatal(err)
		}
	}
	// call queues one decision on bucket k at explicit time at (0: Redis's).
	call := func(pipe redis.Pipeliner, k int, at int64) {
		key := costKey(k)
		switch {
		case side == "callr-zset":
			script.EvalSha(ctx, pipe, []string{key}, limit, 3600000, 1)
		case side == "figma-hash" && at != 0:
			script.EvalSha(ctx, pipe, []string{key}, limit, 3600000, 60, 1, at/1e6)
		case side == "figma-hash":
			script.EvalSha(ctx, pipe, []string{key}, limit, 3600000, 60, 1)
		case side == "concurrency":
			r := Request{Limit: l, Key: key, Lease: int64(k)<<32 | int64(time.Now().UnixNano()&0xffffffff)}
			key, args := r.leaseArgs("", p, opHold)
			pipe.FCall(ctx, p.g.function, []string{key}, args...)
		default:
			r := Request{Limit: l, Key: key, Cost: 1, At: at}
			key, args := r.args("", p, 0)
			pipe.FCall(ctx, p.g.function, []string{key}, args...)
		}
	}
	// run makes per decisions on every bucket, 8 goroutines each sending
	// pipelines of 32, and returns Redis's CPU per decision, us.
	run := func(per int64, at func(i int64) int64) float64 {
		cpu := redisCPU(b, []*redis.Client{rdb})
		var wg sync.WaitGroup
		const workers, batch = 8, 32
		total := per * costBuckets
		for w := range workers {
			wg.Go(func() {
				pipe := rdb.Pipeline()
				for i := int64(w); i < total; i += workers {
					call(pipe, int(i%costBuckets), at(i/costBuckets))
					if pipe.Len() == batch {
						if _, err := pipe.Exec(ctx); err != nil {
							b.Error(err)
							return
						}
					}
				}
				if _, err := pipe.Exec(ctx); err != nil && pipe.Len() > 0 {
					b.Error(err)
				}
			})
		}
		wg.Wait()
		return (redisCPU(b, []*redis.Client{rdb}) - cpu) / 1e3 / float64(total)
	}
	now := func(int64) int64 { return 0 }
	redisKey := func(k int) string { return costKey(k) }
	if !users {
		redisKey = func(k int) string { return string(AppendKey(nil, "", &l, costKey(k))) }
	}
	admit := run(limit, now)
	mem := bucketMemory(b, rdb, redisKey)
	deny := run(limit, now)
	b.ReportMetric(admit, "redis-us/admit")
	b.ReportMetric(deny, "redis-us/deny")
	b.ReportMetric(mem, "bytes/bucket")
	if side == "window_counters" || side == "figma-hash" {
		rdb.FlushAll(ctx)
		t := time.Now().UnixNano()
		run(60, func(i int64) int64 { return t + i*int64(time.Minute) })
		b.ReportMetric(bucketMemory(b, rdb, redisKey), "bytes/bucket-60")
	}
}

// bucketMemory returns the mean MEMORY USAGE of the benchmark's buckets,
// bytes: the key, its value and Redis's overhead for them.
func bucketMemory(b *testing.B, rdb *redis.Client, key func(k int) string) float64 {
	var total int64
	for k := range costBuckets {
		n, err := rdb.MemoryUsage(context.Background(), key(k), 0).Result()
		if err != nil && err != redis.Nil {
			b.Fatal(err)
		}
		total += n
	}
	return float64(total) / costBuckets
}
