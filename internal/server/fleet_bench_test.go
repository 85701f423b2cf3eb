package server

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/clients/go/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/proto"
)

// BenchmarkFleet (make bench-global) is the fleet of TestFleet at full
// speed, on one Redis and on a Redis Cluster: four sidecars on this host as
// four hosts, eight client processes each, every client running eight
// goroutines that acquire a global token bucket on a key of its own for a
// fixed time. Beside them, the same 32 processes of eight goroutines
// calling Redis directly with a short token-bucket script, what users run
// (bench/lua/token_bucket.lua: one EVALSHA per decision through go-redis
// with its default options); and a local limit through the same sidecars,
// the floor of the socket path.
//
// The sides take turns within one run (SLUICE_FLEET_ROUNDS rounds, the
// order rotated each round, SLUICE_FLEET_SECONDS each), so that ratios
// between them come from the same minutes of a shared machine; the busy
// variant runs a busy loop on every core meanwhile. Each side's medians
// are printed as a table: decisions/s of the fleet, p50 and p99 at the
// application, Redis's own CPU time per decision (INFO cpu, used_cpu_sys
// plus used_cpu_user, of every server of the deployment, before and after)
// the commands clients sent Redis per decision (INFO commandstats) and the
// sidecars' requests per Redis round trip (their STATS); the benchmark's
// metrics are the ratios of exact and leased mode to Redis + Lua (the
// median of each round's ratio). Run it with -benchtime 1x. To profile a
// side, SLUICE_FLEET_MODES=exact runs it alone (and prints its figures),
// SLUICE_FLEET_CPUPROFILE=DIR writes each sidecar's CPU profile there and
// SLUICE_FLEET_CLIENTPROFILE=DIR each client process's;
// SLUICE_FLEET_TRANSPORT and SLUICE_FLEET_LOOPSPIN (a Go duration) give the
// sidecars a transport and a LoopSpin other than the default, to compare
// them. The table gives the CPU time of the client processes and of the
// sidecars per decision, which is what bounds the socket path on a small
// host. SLUICE_FLEET_CLIENT_GOMAXPROCS=N runs every client process, of
// every side, with GOMAXPROCS N (the sidecars keep theirs), to measure what
// the Go runtime's second thread costs a client that mostly waits.
func BenchmarkFleet(b *testing.B) {
	script, err := os.ReadFile("../../bench/lua/token_bucket.lua")
	if err != nil {
		b.Fatal(err)
	}
	for _, target := range []string{"redis", "cluster"} {
		b.Run(target, func(b *testing.B) {
			dep := fleetDeployment{script: string(script)}
			if target == "redis" {
				r := redistest.Start(b)
				dep.addrs, dep.servers = []string{r.Addr}, []*redis.Client{r.Client(b)}
			} else {
				c := redistest.StartCluster(b)
				dep.addrs, dep.cluster = c.Addrs(), true
				for _, n := range c.Nodes {
					dep.servers = append(dep.servers, n.Client(b))
				}
			}
			for _, load := range []string{"idle", "busy"} {
				b.Run(load, func(b *testing.B) {
					if load == "busy" {
						defer busyLoops(b)()
					}
					for b.Loop() {
						fleetCompare(b, &dep)
					}
				})
			}
		})
	}
}

// fleetDeployment is the Redis the benchmark runs on.
type fleetDeployment struct {
	addrs   []string
	cluster bool
	servers []*redis.Client // every server, masters and replicas: INFO
	script  string          // the users' token bucket
}

// busyLoops starts a busy loop on every core and returns what stops them.
func busyLoops(b *testing.B) func() {
	var stops []func() error
	for range runtime.NumCPU() {
		_, in, _ := startPart(b, "SLUICE_FLEET_BUSY", struct{}{})
		stops = append(stops, in.Close)
	}
	return func() {
		for _, stop := range stops {
			stop()
		}
	}
}

// fleetModes are the sides of the comparison: the users' Redis + Lua
// first, the baseline of the ratios.
var fleetModes = []string{"redis+lua", "exact", "leased", "local"}

// fleetResult is one side's figures in one round.
type fleetResult struct {
	decisions, p50, p99, cpu, cmds float64 // per second, µs, µs, µs per decision, per decision
	batch                          float64 // the sidecars' Redis requests per round trip, 1 for Redis + Lua
	clientCPU, sidecarCPU          float64 // the client processes' and the sidecars' CPU time (user and system), µs per decision
	clientCS, sidecarCS            float64 // their context switches (voluntary and not) per decision
}

// fleetCompare runs every side in turn, SLUICE_FLEET_ROUNDS times, and
// reports their medians and ratios.
func fleetCompare(b *testing.B, dep *fleetDeployment) {
	rounds := 1
	if v, err := strconv.Atoi(os.Getenv("SLUICE_FLEET_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	modes := fleetModes
	if v := os.Getenv("SLUICE_FLEET_MODES"); v != "" { // to profile one side: exact, say
		modes = strings.Split(v, ",")
	}
	results := make(map[string][]fleetResult)
	for r := range rounds {
		for i := range modes {
			mode := modes[(i+r)%len(modes)]
			results[mode] = append(results[mode], fleetRun(b, mode, dep))
		}
	}
	if len(modes) < len(fleetModes) {
		for _, mode := range modes {
			r := results[mode][len(results[mode])-1]
			fmt.Printf("%s %s: %+v\n", b.Name(), mode, r)
		}
		return
	}
	median := func(v []float64) float64 {
		slices.Sort(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	of := func(mode string, f func(fleetResult) float64) float64 {
		var v []float64
		for _, r := range results[mode] {
			v = append(v, f(r))
		}
		return median(v)
	}
	ratio := func(mode string, f func(fleetResult) float64) float64 {
		var v []float64
		for i, r := range results[mode] {
			v = append(v, f(r)/f(results[fleetModes[0]][i]))
		}
		return median(v)
	}
	decisions := func(r fleetResult) float64 { return r.decisions }
	p99 := func(r fleetResult) float64 { return r.p99 }
	cpu := func(r fleetResult) float64 { return r.cpu }
	var out strings.Builder
	fmt.Fprintf(&out, "\n%s, medians of %d rounds:\n", b.Name(), rounds)
	fmt.Fprintf(&out, "| side | decisions/s | p50 | p99 | Redis CPU per decision | Redis commands per decision | requests per round trip | clients' CPU per decision | sidecars' CPU per decision | x decisions/s | x p99 | x Redis CPU |\n")
	fmt.Fprintf(&out, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, mode := range fleetModes {
		fmt.Fprintf(&out, "| %s | %.0f | %.2f ms | %.2f ms | %.2f µs | %.4f | %.1f | %.2f µs | %.2f µs | %.2f | %.2f | %.2f |\n", mode,
			of(mode, decisions), of(mode, func(r fleetResult) float64 { return r.p50 })/1e3, of(mode, p99)/1e3,
			of(mode, cpu), of(mode, func(r fleetResult) float64 { return r.cmds }), of(mode, func(r fleetResult) float64 { return r.batch }),
			of(mode, func(r fleetResult) float64 { return r.clientCPU }), of(mode, func(r fleetResult) float64 { return r.sidecarCPU }),
			ratio(mode, decisions), ratio(mode, p99), ratio(mode, cpu))
	}
	fmt.Print(out.String())
	b.ReportMetric(ratio("exact", cpu), "exact-x-cpu")
	b.ReportMetric(ratio("exact", decisions), "exact-x-decisions")
	b.ReportMetric(ratio("exact", p99), "exact-x-p99")
	b.ReportMetric(ratio("leased", decisions), "leased-x-decisions")
	b.ReportMetric(of("leased", func(r fleetResult) float64 { return r.cmds }), "leased-cmds/decision")
}

// fleetBenchConfig: the benchmark's limit, plenty for the run, exact and
// leased (leases sized from demand); a bucket in use stays in Redis (it is
// full again a second after its last request). The users' script gets the
// same.
const fleetBenchConfig = `limits:
  exact: {limit: "token_bucket:max=1000000000,refill_time=1s,refill_amount=1000000", scope: global}
  leased: {limit: "token_bucket:max=1000000000,refill_time=1s,refill_amount=1000000", scope: global, lease: auto}
  local: {limit: "token_bucket:max=1000000000,refill_time=1s,refill_amount=1000000"}
`

// fleetRun runs one side for the benchmark's duration and returns its
// figures.
func fleetRun(b *testing.B, mode string, dep *fleetDeployment) fleetResult {
	const hosts, clients = 4, 8
	duration := time.Second // make bench-global sets SLUICE_FLEET_SECONDS
	if s := os.Getenv("SLUICE_FLEET_SECONDS"); s != "" {
		if v, err := strconv.ParseFloat(s, 64); err == nil {
			duration = time.Duration(v * float64(time.Second))
		}
	}
	var socks []string
	var sidecars []*partCmd
	if mode != "redis+lua" {
		socks, sidecars = startFleet(b, hosts, fleetBenchConfig, fleetSidecar{Addrs: dep.addrs, Cluster: dep.cluster, Timeout: time.Second})
	}
	before := redisUsage(b, dep.servers)
	var mu sync.Mutex
	var lat []time.Duration
	var decisions int
	var clientCPU time.Duration
	var clientCS int64
	var wg sync.WaitGroup
	for h := range hosts {
		for c := range clients {
			p := fleetBench{Mode: mode, Addrs: dep.addrs, Cluster: dep.cluster, Key: fmt.Sprintf("h%dc%d", h, c), Seconds: duration.Seconds()}
			if socks != nil {
				p.Socket = socks[h]
			} else {
				p.Script = dep.script
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
				mu.Lock()
				cpu, cs := partCPU(cmd)
				clientCPU, clientCS = clientCPU+cpu, clientCS+cs
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	var requests, trips uint64 // the sidecars' global requests and Redis round trips
	for _, sock := range socks {
		c, err := sluice.Dial(sock, sluice.WithTimeout(10*time.Second), sluice.WithFailurePolicy(sluice.FailError))
		if err != nil {
			b.Fatal(err)
		}
		st, err := c.Stats(context.Background())
		c.Close()
		if err != nil {
			b.Fatal(err)
		}
		requests, trips = requests+st["global_requests"], trips+st["global_round_trips"]
	}
	stopFleet(b, sidecars)
	var sidecarCPU time.Duration
	var sidecarCS int64
	for _, cmd := range sidecars {
		cpu, cs := partCPU(cmd)
		sidecarCPU, sidecarCS = sidecarCPU+cpu, sidecarCS+cs
	}
	after := redisUsage(b, dep.servers)
	slices.Sort(lat)
	if len(lat) == 0 || decisions == 0 {
		b.Fatal("no decisions")
	}
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / 1e3 }
	return fleetResult{
		decisions: float64(decisions) / duration.Seconds(),
		p50:       q(0.50),
		p99:       q(0.99),
		cpu:       (after.cpu - before.cpu) * 1e6 / float64(decisions),
		cmds:      float64(after.calls-before.calls) / float64(decisions),
		batch:     max(float64(requests)/float64(max(trips, 1)), 1),

		clientCPU:  clientCPU.Seconds() * 1e6 / float64(decisions),
		sidecarCPU: sidecarCPU.Seconds() * 1e6 / float64(decisions),
		clientCS:   float64(clientCS) / float64(decisions),
		sidecarCS:  float64(sidecarCS) / float64(decisions),
	}
}

// partCPU is the CPU time, user and system, of a part that has exited, and
// its context switches.
func partCPU(cmd *partCmd) (time.Duration, int64) {
	if cmd.ProcessState == nil {
		return 0, 0
	}
	var cs int64
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		cs = ru.Nvcsw + ru.Nivcsw
	}
	return cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), cs
}

// fleetUsage is what Redis has done: the CPU time of every server of the
// deployment (masters and replicas), s, and the script calls clients sent
// (EVALSHA, EVAL, FCALL: the commands a script runs inside are not sent).
type fleetUsage struct {
	cpu   float64
	calls int64
}

// redisUsage reads what servers have done so far.
func redisUsage(b *testing.B, servers []*redis.Client) (u fleetUsage) {
	for _, c := range servers {
		info, err := c.Info(context.Background(), "cpu", "commandstats").Result()
		if err != nil {
			b.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			for _, field := range []string{"used_cpu_sys:", "used_cpu_user:"} {
				if v, ok := strings.CutPrefix(line, field); ok {
					f, _ := strconv.ParseFloat(v, 64)
					u.cpu += f
				}
			}
			for _, cmd := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls=", "cmdstat_fcall:calls="} {
				if v, ok := strings.CutPrefix(line, cmd); ok {
					v, _, _ = strings.Cut(v, ",")
					n, _ := strconv.ParseInt(v, 10, 64)
					u.calls += n
				}
			}
		}
	}
	return u
}

// fleetBench is a benchmark client's part: decide on Key for Seconds, by
// Mode (redis+lua, exact, leased, local), printing one in 16 latencies (ns)
// as it goes and "n COUNT" at the end. Redis + Lua runs Script, the users'
// token bucket, with the benchmark's limit.
type fleetBench struct {
	Mode, Socket, Key, Script string
	Addrs                     []string
	Cluster                   bool
	Seconds                   float64
}

func (p *fleetBench) run() int {
	if n, err := strconv.Atoi(os.Getenv("SLUICE_FLEET_CLIENT_GOMAXPROCS")); err == nil && n > 0 {
		runtime.GOMAXPROCS(n)
	}
	if dir := os.Getenv("SLUICE_FLEET_CLIENTPROFILE"); dir != "" { // profiling the clients of BenchmarkFleet
		f, err := os.CreateTemp(dir, "client-*.pprof")
		if err == nil && pprof.StartCPUProfile(f) == nil {
			defer f.Close()
			defer pprof.StopCPUProfile()
		}
	}
	var decide func() error
	if p.Mode == "redis+lua" {
		// What a user writes: go-redis with its default options (a pool of
		// connections, one command per round trip) and the script by SHA.
		var rdb redis.UniversalClient
		if p.Cluster {
			rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: p.Addrs})
		} else {
			rdb = redis.NewClient(&redis.Options{Network: "unix", Addr: p.Addrs[0]})
		}
		script := redis.NewScript(p.Script)
		keys := []string{"bench:{" + p.Key + "}"}
		// max, refill_time (ms), refill_amount, cost: the config's limit.
		decide = func() error {
			return script.Run(context.Background(), rdb, keys, 1_000_000_000, 1000, 1_000_000, 1).Err()
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
