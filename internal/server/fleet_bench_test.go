package server

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/clients/go/sluice"
	"github.com/sluicehq/sluice/internal/global"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/proto"
)

// BenchmarkFleet (make bench-global) is the fleet of TestFleet at full
// speed: four sidecars on this host as four hosts, eight client processes
// each, every client running eight goroutines that acquire a global token
// bucket on keys of their own for a fixed time; beside them, the same 32
// processes of eight goroutines calling Redis + Lua themselves
// (global.Eval: one EVALSHA per decision, go-redis's pool), which is what
// users run today; and a local limit through the same sidecars, the floor
// of the socket path. Reported: decisions/s of the fleet, p50 and p99 at
// the application, and Redis commands (script calls) per decision. Run it
// with -benchtime 1x.
func BenchmarkFleet(b *testing.B) {
	for _, target := range []string{"redis", "cluster"} {
		b.Run(target, func(b *testing.B) {
			var addrs []string
			var cluster bool
			var rdb redis.UniversalClient
			if target == "redis" {
				r := redistest.Start(b)
				addrs = []string{r.Addr}
				rdb = redis.NewClient(&redis.Options{Network: "unix", Addr: r.Addr})
			} else {
				c := redistest.StartCluster(b)
				addrs, cluster = c.Addrs(), true
				rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
			}
			defer rdb.Close()
			commands := func() int64 { return redisCommands(b, rdb) }
			for _, mode := range []string{"redis+lua", "exact", "leased", "local"} {
				b.Run(mode, func(b *testing.B) {
					for b.Loop() {
						fleetRun(b, mode, addrs, cluster, commands)
					}
				})
			}
		})
	}
}

// fleetBenchConfig: the benchmark's limit, plenty for the run, exact and
// leased (leases sized from demand).
const fleetBenchConfig = `limits:
  exact: {limit: "token_bucket:max=1000000000,refill_time=1ms,refill_amount=1000", scope: global}
  leased: {limit: "token_bucket:max=1000000000,refill_time=1ms,refill_amount=1000", scope: global, lease: auto}
  local: {limit: "token_bucket:max=1000000000,refill_time=1ms,refill_amount=1000"}
`

// fleetRun runs one mode for the benchmark's duration and reports it.
func fleetRun(b *testing.B, mode string, addrs []string, cluster bool, commands func() int64) {
	const hosts, clients = 4, 8
	duration := time.Second // make bench-global runs 5 s: SLUICE_FLEET_SECONDS
	if s := os.Getenv("SLUICE_FLEET_SECONDS"); s != "" {
		if v, err := strconv.ParseFloat(s, 64); err == nil {
			duration = time.Duration(v * float64(time.Second))
		}
	}
	var socks []string
	stop := func() {}
	if mode != "redis+lua" {
		var cmds []*partCmd
		socks, cmds = startFleet(b, hosts, fleetBenchConfig, fleetSidecar{Addrs: addrs, Cluster: cluster, Timeout: time.Second})
		stop = func() { stopFleet(b, cmds) }
	}
	before := commands()
	var mu sync.Mutex
	var lat []time.Duration
	var decisions int
	var wg sync.WaitGroup
	for h := range hosts {
		for c := range clients {
			p := fleetBench{Mode: mode, Addrs: addrs, Cluster: cluster, Key: fmt.Sprintf("h%dc%d", h, c), Seconds: duration.Seconds()}
			if socks != nil {
				p.Socket = socks[h]
			}
			cmd, _, out := startPart(b, "SLUICE_FLEET_BENCH", p)
			wg.Go(func() {
				for out.Scan() {
					f := strings.Fields(out.Text())
					if len(f) == 2 && f[0] == "n" {
						n, _ := strconv.Atoi(f[1])
						mu.Lock()
						decisions += n
						mu.Unlock()
						continue
					}
					if ns, err := strconv.ParseInt(out.Text(), 10, 64); err == nil {
						mu.Lock()
						lat = append(lat, time.Duration(ns))
						mu.Unlock()
					}
				}
				if err := cmd.Wait(); err != nil {
					b.Errorf("a client exited with %v", err)
				}
			})
		}
	}
	wg.Wait()
	stop()
	cmds := commands() - before
	slices.Sort(lat)
	if len(lat) == 0 || decisions == 0 {
		b.Fatal("no decisions")
	}
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / 1e3 }
	b.ReportMetric(float64(decisions)/duration.Seconds(), "decisions/s")
	b.ReportMetric(q(0.50), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
	b.ReportMetric(float64(cmds)/float64(decisions), "redis-cmds/decision")
}

// redisCommands returns the script calls (EVALSHA and EVAL) Redis has
// processed, every master's for a Cluster, read with INFO commandstats:
// the commands clients send per decision (the commands a script runs
// inside are not sent).
func redisCommands(b *testing.B, rdb redis.UniversalClient) int64 {
	var total int64
	read := func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		for _, line := range strings.Split(info, "\r\n") {
			for _, cmd := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
				if v, ok := strings.CutPrefix(line, cmd); ok {
					v, _, _ = strings.Cut(v, ",")
					n, _ := strconv.ParseInt(v, 10, 64)
					total += n
				}
			}
		}
		return nil
	}
	ctx := context.Background()
	var err error
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		var mu sync.Mutex
		err = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return read(ctx, m)
		})
	case *redis.Client:
		err = read(ctx, c)
	}
	if err != nil {
		b.Fatal(err)
	}
	return total
}

// fleetBench is a benchmark client's part: decide on Key for Seconds, by
// Mode (redis+lua, exact, leased), printing one in 16 latencies (ns) as it
// goes and "n COUNT" at the end.
type fleetBench struct {
	Mode, Socket, Key string
	Addrs             []string
	Cluster           bool
	Seconds           float64
}

func (p *fleetBench) run() int {
	var decide func() error
	if p.Mode == "redis+lua" {
		var rdb redis.UniversalClient
		if p.Cluster {
			rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: p.Addrs})
		} else {
			rdb = redis.NewClient(&redis.Options{Network: "unix", Addr: p.Addrs[0]})
		}
		l := bucket.Limit{Algorithm: bucket.TokenBucket, Max: 1_000_000_000, RefillTime: 1e6, RefillAmount: 1000}
		decide = func() error {
			_, err := global.Eval(context.Background(), rdb, "bench:", global.Request{Limit: l, Key: p.Key, Cost: 1})
			return err
		}
	} else {
		c, err := sluice.Dial(p.Socket, sluice.WithTimeout(10*time.Second), sluice.WithFailurePolicy(sluice.FailError))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		l := proto.Named(p.Mode)
		decide = func() error { _, err := c.Acquire(context.Background(), l, p.Key, 1); return err }
	}
	end := time.Now().Add(time.Duration(p.Seconds * float64(time.Second)))
	var mu sync.Mutex
	out := make([]byte, 0, 1<<16)
	total, failed := 0, false
	var wg sync.WaitGroup
	for range fleetGoroutines {
		wg.Go(func() {
			var lat []byte
			n, sample := 0, rand.IntN(16)
			for time.Now().Before(end) {
				start := time.Now()
				if err := decide(); err != nil {
					fmt.Fprintln(os.Stderr, err)
					mu.Lock()
					failed = true
					mu.Unlock()
					return
				}
				n++
				if n%16 == sample {
					lat = strconv.AppendInt(lat, int64(time.Since(start)), 10)
					lat = append(lat, '\n')
				}
			}
			mu.Lock()
			out, total = append(out, lat...), total+n
			mu.Unlock()
		})
	}
	wg.Wait()
	if failed {
		return 1
	}
	out = fmt.Appendf(out, "n %d\n", total)
	os.Stdout.Write(out)
	return 0
}

// fleetGoroutines is how many goroutines of each benchmark client decide
// at once.
const fleetGoroutines = 8
