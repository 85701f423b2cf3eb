package server

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/locktest"
	"github.com/sluicehq/sluice/internal/sidecartest"
	"github.com/sluicehq/sluice/proto"
	"github.com/sluicehq/sluice/shm"
)

var crashIterations = flag.Int("crash.iterations", 30, "kill -9 rounds in TestCrash_kill9")

// TestMain lets the test binary double as a sidecar (sidecartest.Child), for tests that kill it with SIGKILL (and as a fleet
// member, a direct client holding a lock, a peer of another uid:
// fleetChild, locktest.Child, peerChild).
func TestMain(m *testing.M) {
	if code, ok := fleetChild(); ok {
		os.Exit(code)
	}
	if code, ok := locktest.Child(); ok {
		os.Exit(code)
	}
	if code, ok := peerChild(); ok {
		os.Exit(code)
	}
	if code, ok := sidecartest.Child(func(ctx context.Context, dir string) error {
		return Run(ctx, Config{StatePath: filepath.Join(dir, "state"), SocketPath: filepath.Join(dir, "sock"),
			RESPSocket: "-", Slots: 2048, SlotSize: 64, ArenaCells: 1 << 16, Logger: quiet()})
	}); ok {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// child is a sidecar in another process.
type child struct {
	cmd  *exec.Cmd
	sock string
}

func startChild(t *testing.T, dir string) *child {
	t.Helper()
	return &child{cmd: sidecartest.StartChild(t, dir), sock: filepath.Join(dir, "sock")}
}

// Ensure kill -9 loses nothing: several clients pipeline acquires with
// client timestamps on a few hundred buckets; the sidecar is killed with
// SIGKILL at random moments and restarted on the same file. Every bucket
// must reflect every acknowledged acquire, and none twice: what it has
// consumed lies between what was acknowledged and that plus what was in
// flight when the sidecar died. A bucket whose slot (or block) was caught
// mid-update is reset to grant nothing (and counted). The file verifies at
// the end. The algorithms whose state lives in the arena are killed the
// same way.
func TestCrash_kill9(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	for _, tc := range []struct {
		limit proto.Limit
		max   int64
	}{
		{proto.TokenBucketLimit(1<<40, time.Hour, 1), 1 << 40},
		{proto.SlidingLogLimit(1000, time.Hour), 1000},
		{proto.WindowCountersLimit(1<<40, time.Hour, 60, false), 1 << 40},
	} {
		t.Run(tc.limit.Algorithm.String(), func(t *testing.T) { crashLoop(t, tc.limit, tc.max) })
	}
}

// crashLoop is TestCrash_kill9 for one limit, whose remaining count is max
// minus what it consumed (no refill happens at the client time it uses).
func crashLoop(t *testing.T, limit proto.Limit, max int64) {
	seed := rand.Uint64()
	t.Logf("seed %d (iterations: -crash.iterations)", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	dir := shortDir(t)
	const keys = 300
	// A client timestamp: no refill during the test. It lies ahead of the
	// server's clock: a bucket written at a past time would be fresh at the
	// server's clock, which alone decides that a slot may be reclaimed.
	at := int64(4_102_444_800) * 1e9 // 2100-01-01
	consumed := make([]int64, keys)  // the model: tokens known to be taken
	inflight := make([]int64, keys)
	for it := range *crashIterations {
		ch := startChild(t, dir)
		// Check the model against the sidecar, then adopt what it says.
		c := dialPath(t, ch.sock)
		torn := stat(t, c, "torn_slots")
		for k := range keys {
			r := c.do(func(b []byte) []byte {
				// cost 0: the tokens available, nothing taken
				return proto.AppendItem(b, proto.OpAcquire, proto.FlagAt, limit, 0, at, []byte(fmt.Sprint("k", k)))
			})
			got := max - r.Decision.Remaining
			if r.Decision.Remaining == 0 && torn > 0 {
				got = consumed[k] // a slot reset conservatively: allowed, counted in torn_slots
			}
			if got < consumed[k] || got > consumed[k]+inflight[k] {
				t.Fatalf("iteration %d, key %d: consumed %d, model says %d..%d", it, k, got, consumed[k], consumed[k]+inflight[k])
			}
			consumed[k], inflight[k] = got, 0
		}
		c.c.Close()
		// Load, then kill at a random moment.
		var mu sync.Mutex
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				conn, err := net.Dial("unix", ch.sock)
				if err != nil {
					return
				}
				defer conn.Close()
				cl := &client{t: t, c: conn}
				r := rand.New(rand.NewPCG(seed, uint64(it*10+w)))
				for {
					var batch [8]int
					for i := range batch {
						batch[i] = r.IntN(keys)
					}
					mu.Lock()
					for _, k := range batch {
						inflight[k]++
					}
					mu.Unlock()
					cl.next++
					b, start := proto.BeginFrame(nil, proto.KindRequest, cl.next)
					for _, k := range batch {
						b = proto.AppendItem(b, proto.OpAcquire, proto.FlagAt, limit, 1, at, []byte(fmt.Sprint("k", k)))
					}
					if _, err := conn.Write(proto.EndFrame(b, start, len(batch))); err != nil {
						return
					}
					_, rs, err := cl.tryRecv()
					if err != nil || len(rs) != len(batch) {
						return // died: the batch stays in flight
					}
					mu.Lock()
					for i, k := range batch {
						inflight[k]--
						if rs[i].Decision.Allowed {
							consumed[k]++
						}
					}
					mu.Unlock()
				}
			}()
		}
		time.Sleep(time.Duration(5+rng.IntN(40)) * time.Millisecond)
		ch.cmd.Process.Signal(syscall.SIGKILL)
		ch.cmd.Wait()
		wg.Wait()
	}
	var total int64
	for _, n := range consumed {
		total += n
	}
	t.Logf("%d kills, %d acquires acknowledged across them", *crashIterations, total)
	// A last clean stop, then the file must verify with no lock held.
	ch := startChild(t, dir)
	ch.cmd.Process.Signal(syscall.SIGTERM)
	if err := ch.cmd.Wait(); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
	tb, err := shm.Open(filepath.Join(dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	if err := tb.Verify(); err != nil {
		t.Fatal(err)
	}
}

func dialPath(t *testing.T, path string) *client {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{t: t, c: c}
}

// stat returns one STATS counter.
func stat(t *testing.T, c *client, name string) uint64 {
	t.Helper()
	r := c.do(proto.AppendStats)
	for b := r.Stats; len(b) > 0; {
		n, v, rest, err := proto.NextStat(b)
		if err != nil {
			t.Fatal(err)
		}
		if string(n) == name {
			return v
		}
		b = rest
	}
	t.Fatalf("no stat %q", name)
	return 0
}

// Ensure concurrency leases survive a kill -9 of the sidecar: their clients
// are still running what they leased. After the restart the slots are still
// held, a lease taken before the crash is given back through the new
// sidecar, and one never given back expires at its lease time. A lease of
// 1 s is tried first; when the kill and the restart take longer than the
// lease (a loaded host), the checks cannot tell, and a longer lease is
// tried.
func TestCrash_leasesSurvive(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	for _, ttl := range []time.Duration{time.Second, 4 * time.Second, 16 * time.Second} {
		if leasesSurvive(t, ttl) {
			return
		}
		t.Logf("the restart took longer than a lease of %v: again with a longer lease", ttl)
	}
	t.Fatal("the sidecar never restarted within a lease of 16s")
}

// leasesSurvive runs TestCrash_leasesSurvive's checks with leases of ttl;
// it reports false, having checked nothing, if the restart took so long
// that the leases may have expired.
func leasesSurvive(t *testing.T, ttl time.Duration) bool {
	dir := shortDir(t)
	conc := proto.ConcurrencyLimit(3, ttl)
	lease := func(c *client) proto.Result {
		return c.do(func(b []byte) []byte { return proto.AppendLease(b, 0, conc, []byte("jobs")) })
	}
	free := func(c *client) int64 {
		return c.do(func(b []byte) []byte { return proto.AppendItem(b, proto.OpPeek, 0, conc, 0, 0, []byte("jobs")) }).Decision.Remaining
	}
	ch := startChild(t, dir)
	c := dialPath(t, ch.sock)
	asked := time.Now() // the leases expire after asked+ttl ...
	a, b := lease(c), lease(c)
	taken := time.Now() // ... and by taken+ttl
	if !a.Decision.Allowed || !b.Decision.Allowed || free(c) != 1 {
		t.Fatalf("leases: %+v, %+v", a, b)
	}
	ch.cmd.Process.Signal(syscall.SIGKILL)
	ch.cmd.Wait()
	ch = startChild(t, dir)
	c = dialPath(t, ch.sock)
	held := free(c)
	r := c.do(func(buf []byte) []byte { return proto.AppendRelease(buf, 0, conc, a.Lease, []byte("jobs")) })
	after := free(c)
	if time.Since(asked) >= ttl {
		return false
	}
	if held != 1 {
		t.Fatalf("after kill -9: %d free, want 1 (two leases held)", held)
	}
	if !r.Released || after != 2 {
		t.Errorf("release through the new sidecar: %+v, then %d free, want 2", r, after)
	}
	time.Sleep(time.Until(taken.Add(ttl + 50*time.Millisecond)))
	if n := free(c); n != 3 {
		t.Errorf("after the lease time: %d free, want 3", n)
	}
	return true
}
