package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/clients/go/sluice"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/global"
	"github.com/sluicehq/sluice/internal/redistest"
)

// The fleet tests: sidecars in their own processes, as hosts, share global
// limits in a real Redis (or Redis Cluster), each with client processes of
// its own. The test binary plays every part: SLUICE_FLEET_SIDECAR and
// SLUICE_FLEET_CLIENT carry a part's settings as JSON.

// fleetSidecar is a sidecar's part.
type fleetSidecar struct {
	Dir, Config  string
	Addrs        []string
	Cluster      bool
	WaitReplicas int
	Timeout      time.Duration
}

// masterOf returns the master of cl that holds the buckets of key.
func masterOf(t *testing.T, cl *redistest.Cluster, key string) *redistest.Node {
	t.Helper()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	defer c.Close()
	mc, err := c.MasterForKey(context.Background(), "{"+key+"}")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range cl.Masters() {
		if n.Addr == mc.Options().Addr {
			return n
		}
	}
	t.Fatalf("no master of the cluster is at %s, which holds key %s", mc.Options().Addr, key)
	return nil
}

// fleetClient is a client's part: acquire each limit Attempts times on
// one of Keys in turn, then print "LIMIT ALLOWED" per limit; or, with
// Attempts 0, acquire until stdin closes and print each allowed request's
// "LIMIT KEY" as it happens.
type fleetClient struct {
	Socket   string
	Limits   []string
	Keys     []string
	Attempts int
}

// fleetChild plays a part of a fleet test if the environment gives one.
func fleetChild() (int, bool) {
	if v := os.Getenv("SLUICE_FLEET_SIDECAR"); v != "" {
		var p fleetSidecar
		if err := json.Unmarshal([]byte(v), &p); err != nil {
			panic(err)
		}
		return p.run(), true
	}
	if v := os.Getenv("SLUICE_FLEET_BENCH"); v != "" {
		var p fleetBench
		if err := json.Unmarshal([]byte(v), &p); err != nil {
			panic(err)
		}
		return p.run(), true
	}
	if os.Getenv("SLUICE_FLEET_BUSY") != "" { // a busy loop on one core until stdin closes
		var done atomic.Bool
		go func() { io.Copy(io.Discard, os.Stdin); done.Store(true) }()
		for n := 0; !done.Load(); n++ {
		}
		return 0, true
	}
	if v := os.Getenv("SLUICE_FLEET_HOLDER"); v != "" {
		var p fleetHolder
		if err := json.Unmarshal([]byte(v), &p); err != nil {
			panic(err)
		}
		return p.run(), true
	}
	if v := os.Getenv("SLUICE_FLEET_CLIENT"); v != "" {
		var p fleetClient
		if err := json.Unmarshal([]byte(v), &p); err != nil {
			panic(err)
		}
		return p.run(), true
	}
	return 0, false
}

func (p *fleetSidecar) run() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if dir := os.Getenv("SLUICE_FLEET_CPUPROFILE"); dir != "" { // profiling the sidecars of BenchmarkFleet
		f, err := os.CreateTemp(dir, "sidecar-*.pprof")
		if err == nil && pprof.StartCPUProfile(f) == nil {
			defer f.Close()
			defer pprof.StopCPUProfile()
		}
	}
	set, err := config.Load(p.Config)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	redistest.QuietClientLogs()
	// The benchmark's sidecars may take another transport, to compare them
	// (BenchmarkFleet).
	var spin time.Duration
	if v := os.Getenv("SLUICE_FLEET_LOOPSPIN"); v != "" {
		if spin, err = time.ParseDuration(v); err != nil {
			fmt.Fprintln(os.Stderr, "SLUICE_FLEET_LOOPSPIN:", err)
			return 1
		}
	}
	err = Run(ctx, Config{StatePath: filepath.Join(p.Dir, "state"), SocketPath: filepath.Join(p.Dir, "sock"),
		RESPSocket: "-", Slots: 4096, Logger: quiet(), Limits: config.NewHolder(set),
		Transport: os.Getenv("SLUICE_FLEET_TRANSPORT"), LoopSpin: spin,
		Global: &global.Options{Addrs: p.Addrs, Cluster: p.Cluster, WaitReplicas: p.WaitReplicas, Timeout: p.Timeout}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func (p *fleetClient) run() int {
	// Dial's start check waits a minute, as every call does, not its
	// default second: a sidecar with dozens of processes starting beside
	// it on a loaded host can take longer than that to answer the first
	// PING, and the tests count on every client running.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	c, err := sluice.DialContext(ctx, p.Socket, sluice.WithTimeout(time.Minute), sluice.WithFailurePolicy(sluice.FailError))
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	acquire := func(name, key string) (bool, error) {
		d, err := c.Acquire(context.Background(), sluice.Limit{Name: name}, key, 1)
		return d.Allowed && !d.Degraded, err
	}
	if p.Attempts > 0 {
		for _, name := range p.Limits {
			n := 0
			for i := range p.Attempts {
				// A key of its own per limit: a named limit is the bucket of
				// its spec, and tb and ltb have the same spec.
				ok, err := acquire(name, p.Keys[i%len(p.Keys)]+"/"+name)
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					return 1
				}
				if ok {
					n++
				}
			}
			fmt.Printf("%s %d\n", name, n)
		}
		return 0
	}
	var done atomic.Bool
	go func() { io.Copy(io.Discard, os.Stdin); done.Store(true) }()
	for i := 0; !done.Load(); i++ {
		name, key := p.Limits[i%len(p.Limits)], p.Keys[i%len(p.Keys)]
		ok, err := acquire(name, key)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if ok {
			fmt.Printf("%s %s\n", name, key)
		}
	}
	return 0
}

// partCmd is a part's process.
type partCmd struct {
	*exec.Cmd
	once sync.Once
	err  error
}

// Wait waits for the part to exit, once however many ask: a test that
// reads its exit status and the cleanup that kills it.
func (p *partCmd) Wait() error {
	p.once.Do(func() { p.err = p.Cmd.Wait() })
	return p.err
}

// startPart starts the test binary in a part, its stdout piped.
func startPart(t testing.TB, env string, part any) (*partCmd, io.WriteCloser, *bufio.Scanner) {
	t.Helper()
	b, err := json.Marshal(part)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env+"="+string(b))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pc := &partCmd{Cmd: cmd}
	t.Cleanup(func() { cmd.Process.Kill(); pc.Wait() })
	return pc, in, bufio.NewScanner(out)
}

// startFleet starts hosts sidecars on Redis at addrs with the config text,
// and returns their sockets and processes.
func startFleet(t testing.TB, hosts int, text string, p fleetSidecar) ([]string, []*partCmd) {
	t.Helper()
	cfgPath := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(cfgPath, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	var socks []string
	var cmds []*partCmd
	for range hosts {
		p := p
		p.Dir, p.Config = shortDir(t), cfgPath
		cmd, sock := startSidecarPart(t, p)
		socks, cmds = append(socks, sock), append(cmds, cmd)
	}
	return socks, cmds
}

// startSidecarPart starts a sidecar's part in p.Dir and waits until it
// listens; it returns its process and socket.
func startSidecarPart(t testing.TB, p fleetSidecar) (*partCmd, string) {
	t.Helper()
	cmd, _, _ := startPart(t, "SLUICE_FLEET_SIDECAR", p)
	sock := filepath.Join(p.Dir, "sock")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return cmd, sock
		}
		if time.Now().After(deadline) {
			t.Fatal("a sidecar did not start")
		}
	}
}

// stopFleet stops the sidecars with SIGTERM and checks they exit cleanly.
func stopFleet(t testing.TB, cmds []*partCmd) {
	t.Helper()
	for _, cmd := range cmds {
		cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("a sidecar exited with %v", err)
		}
	}
}

// The limits of TestFleet: every algorithm at 100, exact and leased
// (leases of 10; a pacer cannot be leased). Nothing refills during the
// test, and no window ends.
const fleetConfig = `limits:
  tb: {limit: "token_bucket:max=100,refill_time=1h,refill_amount=1", scope: global, on_unavailable: closed}
  gcra: {limit: "gcra:burst=99,count=1,period=1h", scope: global, on_unavailable: closed}
  fw: {limit: "fixed_window:limit=100,window=1000h", scope: global, on_unavailable: closed}
  sw: {limit: "sliding_window:limit=100,window=600h", scope: global, on_unavailable: closed}
  pacer: {limit: "pacer:rate=1,period=1h,max_delay=99h", scope: global, on_unavailable: closed}
  ltb: {limit: "token_bucket:max=100,refill_time=1h,refill_amount=1", scope: global, lease: 10, on_unavailable: closed}
  lgcra: {limit: "gcra:burst=99,count=1,period=1h", scope: global, lease: 10, on_unavailable: closed}
  lfw: {limit: "fixed_window:limit=100,window=1000h", scope: global, lease: 10, on_unavailable: closed}
  lsw: {limit: "sliding_window:limit=100,window=600h", scope: global, lease: 10, on_unavailable: closed}
  sl: {limit: "sliding_log:limit=100,window=600h", scope: global, on_unavailable: closed}
  wc: {limit: "window_counters:limit=100,window=600h,counters=6", scope: global, on_unavailable: closed}
  lsl: {limit: "sliding_log:limit=100,window=600h", scope: global, lease: 10, on_unavailable: closed}
  lwc: {limit: "window_counters:limit=100,window=600h,counters=6", scope: global, lease: 10, on_unavailable: closed}
`

// Four sidecars as four hosts, each with eight client processes, share a
// limit of 100 of every algorithm in one Redis: in exact mode the fleet
// admits exactly 100; in leased mode never more, and at most the tokens
// idle in the other hosts' leases fewer (3 x 10).
func TestFleet_globalLimits(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 36 processes and Redis")
	}
	redis := redistest.Start(t)
	const hosts, clients, attempts = 4, 8, 8
	// Redis's answers may take a loaded host seconds: the sidecars wait for
	// them (no request is left to the outage policy, so the counts are exact).
	socks, sidecars := startFleet(t, hosts, fleetConfig, fleetSidecar{Addrs: []string{redis.Addr}, Timeout: 30 * time.Second})
	exact := []string{"tb", "gcra", "fw", "sw", "pacer", "sl", "wc"}
	leased := []string{"ltb", "lgcra", "lfw", "lsw", "lsl", "lwc"}
	totals := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for h := range hosts {
		for range clients {
			cmd, _, out := startPart(t, "SLUICE_FLEET_CLIENT", fleetClient{Socket: socks[h],
				Limits: append(append([]string{}, exact...), leased...), Keys: []string{"k"}, Attempts: attempts})
			wg.Go(func() {
				for out.Scan() {
					var name string
					var n int
					fmt.Sscan(out.Text(), &name, &n)
					mu.Lock()
					totals[name] += n
					mu.Unlock()
				}
				if err := cmd.Wait(); err != nil {
					t.Errorf("a client exited with %v", err)
				}
			})
		}
	}
	wg.Wait()
	for _, name := range exact {
		if totals[name] != 100 {
			t.Errorf("exact %s: the fleet admitted %d, want exactly 100", name, totals[name])
		}
	}
	for _, name := range leased {
		if n := totals[name]; n > 100 || n < 100-(hosts-1)*10 {
			t.Errorf("leased %s: the fleet admitted %d, want 70 to 100", name, n)
		}
	}
	t.Logf("admitted by %d hosts x %d clients x %d attempts: %v", hosts, clients, attempts, totals)
	stopFleet(t, sidecars)
}

// Four sidecars on a Redis Cluster of three masters with one replica
// each (--global-wait-replicas 1), with client processes hammering eight
// keys (spread over the masters) of three exact limits (token_bucket,
// sliding_log, window_counters), and a holder process per sidecar taking
// leases of a global concurrency limit of 2 in turn; the master of the
// concurrency key is killed under load: no sidecar fails, the closed
// outage policy denies what the dead master's keys ask meanwhile,
// decisions and leases resume once its replica is promoted, no key is
// admitted beyond its limit, and the holders' witness never counts more
// than 2 holders at once.
func TestFleet_clusterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Redis Cluster and 12 processes")
	}
	cl := redistest.StartCluster(t)
	witness := redistest.Start(t)
	const hosts, clients, limit, slots = 4, 2, 300, 2
	text := fmt.Sprintf(`limits:
  tb: {limit: "token_bucket:max=%[1]d,refill_time=1h", scope: global, on_unavailable: closed}
  sl: {limit: "sliding_log:limit=%[1]d,window=1h", scope: global, on_unavailable: closed}
  wc: {limit: "window_counters:limit=%[1]d,window=1h,counters=60", scope: global, on_unavailable: closed}
  cc: {limit: "concurrency:limit=%[2]d,lease=3s", scope: global, on_unavailable: closed}
`, limit, slots)
	socks, sidecars := startFleet(t, hosts, text, fleetSidecar{Addrs: cl.Addrs(), WaitReplicas: 1, Timeout: 300 * time.Millisecond})
	// The holders: one per sidecar, on a key of the master to be killed.
	m := masterOf(t, cl, "jobs")
	var holders sync.WaitGroup
	var holderStops []io.WriteCloser
	var mostHeld atomic.Int64
	for h := range hosts {
		cmd, in, out := startPart(t, "SLUICE_FLEET_HOLDER", fleetHolder{Socket: socks[h], Limit: "cc", Key: "jobs",
			Rounds: -1, Witness: witness.Addr})
		holderStops = append(holderStops, in)
		holders.Go(func() {
			for out.Scan() {
				var n int64
				fmt.Sscanf(out.Text(), "max %d", &n)
				for cur := mostHeld.Load(); n > cur && !mostHeld.CompareAndSwap(cur, n); cur = mostHeld.Load() {
				}
			}
			if err := cmd.Wait(); err != nil {
				t.Errorf("a holder exited with %v", err)
			}
		})
	}
	w := witness.Client(t)
	leases := func() int64 { n, _ := w.Get(context.Background(), "leases").Int64(); return n }
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	var admitted sync.Map // key -> *atomic.Int64
	var total atomic.Int64
	var stops []io.WriteCloser
	var wg sync.WaitGroup
	// Decisions on the dead master's keys, once its replica is promoted.
	// (Those of the other masters' keys go on throughout, and may have
	// spent their limits by then.)
	var afterFailover atomic.Int64
	var promoted atomic.Bool
	onKilled := make(map[string]bool)
	for _, k := range keys {
		if masterOf(t, cl, k).Addr == m.Addr {
			onKilled[k] = true
		}
	}
	if len(onKilled) == 0 {
		t.Fatalf("none of the keys %v is on the master to be killed", keys)
	}
	for h := range hosts {
		for range clients {
			cmd, in, out := startPart(t, "SLUICE_FLEET_CLIENT", fleetClient{Socket: socks[h], Limits: []string{"tb", "sl", "wc"}, Keys: keys})
			stops = append(stops, in)
			wg.Go(func() {
				for out.Scan() {
					v, _ := admitted.LoadOrStore(out.Text(), new(atomic.Int64)) // "LIMIT KEY"
					v.(*atomic.Int64).Add(1)
					total.Add(1)
					if _, key, _ := strings.Cut(out.Text(), " "); promoted.Load() && onKilled[key] {
						afterFailover.Add(1)
					}
				}
				if err := cmd.Wait(); err != nil {
					t.Errorf("a client exited with %v", err)
				}
			})
		}
	}
	for deadline := time.Now().Add(30 * time.Second); total.Load() < int64(3*len(keys)*limit/5) || leases() < 20; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("only %d admitted and %d leases taken before the kill", total.Load(), leases())
		}
	}
	r := cl.KillMaster(t, m)
	t.Logf("killed master %s with %d admitted, %d leases taken", m.Addr, total.Load(), leases())
	t.Logf("replica %s promoted after %v", r.Addr, cl.WaitFailover(t, r))
	promoted.Store(true)
	leasesBefore := leases()
	cl.Rejoin(t, m) // its decisions need a replica to acknowledge them (WaitReplicas)
	for deadline := time.Now().Add(20 * time.Second); (afterFailover.Load() < int64(limit/2) || leases() < leasesBefore+10) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	for _, in := range append(stops, holderStops...) {
		in.Close()
	}
	wg.Wait()
	holders.Wait()
	if n := mostHeld.Load(); n > slots || n < 1 {
		t.Errorf("the witness counted at most %d holders at once, want 1 to %d", n, slots)
	}
	if leases() == leasesBefore {
		t.Error("no lease was taken after the failover: leases did not resume")
	}
	t.Logf("%d leases in all, %d after the failover, at most %d holders at once", leases(), leases()-leasesBefore, mostHeld.Load())
	admitted.Range(func(k, v any) bool {
		if n := v.(*atomic.Int64).Load(); n > limit {
			t.Errorf("%s: admitted %d, above the limit %d", k, n, limit)
		}
		return true
	})
	if afterFailover.Load() == 0 {
		t.Error("nothing on the dead master's keys was admitted after the failover: decisions did not resume")
	}
	t.Logf("admitted %d in all, %d on the dead master's keys after the failover", total.Load(), afterFailover.Load())
	stopFleet(t, sidecars)
}
