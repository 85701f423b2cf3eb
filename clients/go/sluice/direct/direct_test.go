package direct_test

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clients/go/sluice"
	"github.com/sluicehq/sluice/clients/go/sluice/direct"
	"github.com/sluicehq/sluice/clients/go/sluice/internal/clientwire"
	"github.com/sluicehq/sluice/internal/locktest"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/internal/sidecartest"
	"github.com/sluicehq/sluice/proto"
	"github.com/sluicehq/sluice/shm"
)

var killRounds = flag.Int("direct.kills", 20, "kill -9 rounds of direct clients in TestDirect_kill9")

// TestMain lets the test binary double as a sidecar (sidecartest.Child),
// as a client process (SLUICE_DIRECT_WORKER), and as a process holding a
// bucket's lock (locktest), for the tests that run several processes.
func TestMain(m *testing.M) {
	if code, ok := locktest.Child(); ok {
		os.Exit(code)
	}
	if code, ok := sidecartest.Child(func(ctx context.Context, dir string) error {
		slots, _ := strconv.ParseUint(os.Getenv("SLUICE_DIRECT_SLOTS"), 10, 64)
		return server.Run(ctx, server.Config{StatePath: filepath.Join(dir, "state"), SocketPath: filepath.Join(dir, "sock"),
			RESPSocket: "-", Slots: max(slots, 1<<16), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}); ok {
		os.Exit(code)
	}
	if w := os.Getenv("SLUICE_DIRECT_WORKER"); w != "" {
		os.Exit(worker(w))
	}
	os.Exit(m.Run())
}

// sidecar is sluiced in another process, serving dir/state and dir/sock.
type sidecar struct {
	dir string
	cmd *exec.Cmd
}

func startSidecar(t testing.TB, dir string, slots uint64) *sidecar {
	t.Helper()
	cmd := sidecartest.StartChild(t, dir, "SLUICE_DIRECT_SLOTS="+strconv.FormatUint(slots, 10))
	return &sidecar{dir: dir, cmd: cmd}
}

func (s *sidecar) state() string { return filepath.Join(s.dir, "state") }
func (s *sidecar) sock() string  { return filepath.Join(s.dir, "sock") }

func (s *sidecar) kill9() {
	s.cmd.Process.Kill()
	s.cmd.Wait()
}

func (s *sidecar) stop(t testing.TB) {
	t.Helper()
	s.cmd.Process.Signal(syscall.SIGTERM)
	if err := s.cmd.Wait(); err != nil {
		t.Fatalf("sidecar: %v", err)
	}
}

var ctx = context.Background()

// strict are the socket client's options in these tests: an outage is an
// error, never a decision of the failure policy that would count as one.
var strict = []sluice.Option{sluice.WithFailurePolicy(sluice.FailError), sluice.WithTimeout(10 * time.Second)}

// The limits of the exactness tests: nothing refills while they run, and
// every request is decided at one fixed time (so windows do not roll).
var exactLimits = map[string]sluice.Limit{
	"token_bucket":    sluice.TokenBucket(200, time.Hour, 1),
	"gcra":            sluice.GCRA(199, 1, time.Hour),
	"fixed_window":    sluice.FixedWindow(200, 24*time.Hour),
	"sliding_window":  sluice.SlidingWindow(200, 24*time.Hour),
	"pacer":           sluice.Pacer(1, time.Hour, 199*time.Hour),
	"sliding_log":     sluice.SlidingLog(200, 24*time.Hour),
	"window_counters": sluice.WindowCounters(200, 24*time.Hour, 24, true),
}

// fixedAt is noon of a day some time ago: inside one window of a day.
var fixedAt = time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)

// directAndSocket starts a sidecar and returns a direct client of its file
// and a socket client, both closed after the test.
func directAndSocket(t *testing.T) (*direct.Client, *sluice.Client) {
	t.Helper()
	sc := startSidecar(t, t.TempDir(), 0)
	d, err := direct.Open(sc.state(), direct.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	s, err := sluice.Dial(sc.sock(), strict...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return d, s
}

// A bucket touched through the socket and in the file is one bucket, with
// the same answers.
func TestDirect_oneBucket(t *testing.T) {
	d, s := directAndSocket(t)
	if ok, why := d.Direct(); !ok {
		t.Fatalf("not direct: %v", why)
	}
	l := sluice.TokenBucket(5, time.Hour, 1)
	allowed := 0
	for i := range 8 {
		var dec sluice.Decision
		var err error
		if i%2 == 0 {
			dec, err = d.Acquire(ctx, l, "one", 1)
		} else {
			dec, err = s.Acquire(ctx, l, "one", 1)
		}
		if err != nil {
			t.Fatal(err)
		}
		if dec.Allowed {
			allowed++
		}
	}
	if allowed != 5 {
		t.Errorf("%d allowed through both paths, want 5", allowed)
	}
	viaSocket, err := s.Peek(ctx, l, "one")
	if err != nil {
		t.Fatal(err)
	}
	viaFile, err := d.Peek(ctx, l, "one")
	if err != nil {
		t.Fatal(err)
	}
	viaSocket.ResetAfter, viaFile.ResetAfter = 0, 0 // the two peeks are a moment apart
	viaSocket.RetryAfter, viaFile.RetryAfter = 0, 0
	if !reflect.DeepEqual(viaSocket, viaFile) || viaFile.Remaining != 0 {
		t.Errorf("peek through the socket %+v, in the file %+v", viaSocket, viaFile)
	}
	if existed, err := d.Reset(ctx, l, "one"); err != nil || !existed {
		t.Errorf("Reset = %v, %v", existed, err)
	}
	if dec, err := s.Acquire(ctx, l, "one", 1); err != nil || !dec.Allowed || dec.Remaining != 4 {
		t.Errorf("after a direct reset the socket sees %+v, %v", dec, err)
	}
	// Errors are the socket client's.
	if _, err := d.Acquire(ctx, l, "", 1); !errors.Is(err, sluice.ErrInvalidKey) {
		t.Errorf("empty key: %v", err)
	}
	if _, err := d.Acquire(ctx, sluice.TokenBucket(0, time.Hour, 1), "k", 1); !errors.Is(err, sluice.ErrInvalidLimit) {
		t.Errorf("bad limit: %v", err)
	}
	if _, err := d.Acquire(ctx, l, "k", -1); !errors.Is(err, sluice.ErrInvalidCost) {
		t.Errorf("negative cost: %v", err)
	}
	ok, ds, err := d.Multi(ctx, []sluice.Item{{Limit: l, Key: "m1", Cost: 5}, {Limit: l, Key: "m2", Cost: 6}})
	if err != nil || ok || len(ds) != 2 || !ds[0].Allowed || ds[1].Allowed {
		t.Errorf("Multi = %v, %+v, %v", ok, ds, err)
	}
}

// An acquire's options reach the engine: a plain acquire takes a shorter
// path than one with flags, and each answers as the socket does (Shadow:
// a denial answered as allowed and marked; Smyte: a denial drains the
// bucket; Strict: a denial restarts the refill clock).
func TestDirect_acquireOptions(t *testing.T) {
	d, s := directAndSocket(t)
	l := sluice.TokenBucket(2, time.Hour, 1)
	for name, opts := range map[string][]sluice.RequestOption{
		"none":   nil,
		"shadow": {sluice.Shadow()},
		"smyte":  {sluice.Smyte()},
		"strict": {sluice.Strict()},
		"cost 0": nil,
	} {
		cost := int64(2)
		if name == "cost 0" {
			cost = 0
		}
		for i := range 3 {
			viaFile, err := d.Acquire(ctx, l, "file:"+name, cost, opts...)
			if err != nil {
				t.Fatal(err)
			}
			viaSocket, err := s.Acquire(ctx, l, "socket:"+name, cost, opts...)
			if err != nil {
				t.Fatal(err)
			}
			// The two acquires are a moment apart: their times differ.
			for _, dec := range []*sluice.Decision{&viaFile, &viaSocket} {
				dec.RetryAfter, dec.ResetAfter = dec.RetryAfter.Round(time.Minute), dec.ResetAfter.Round(time.Minute)
			}
			if !reflect.DeepEqual(viaFile, viaSocket) {
				t.Errorf("%s, acquire %d: in the file %+v, through the socket %+v", name, i+1, viaFile, viaSocket)
			}
			if want := name == "shadow" && i > 0; viaFile.ShadowDenied != want {
				t.Errorf("%s, acquire %d: ShadowDenied %v, want %v", name, i+1, viaFile.ShadowDenied, want)
			}
		}
	}
}

// sliding_log and window_counters, whose buckets keep a block in the
// file's arena, are one bucket through the socket and in the file; a
// concurrency limit is leased through the socket only, and the direct path
// says so.
func TestDirect_extendedAlgorithms(t *testing.T) {
	d, s := directAndSocket(t)
	for _, l := range []sluice.Limit{sluice.SlidingLog(5, time.Minute), sluice.WindowCounters(5, time.Minute, 6, false)} {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			at := fixedAt
			allowed := 0
			for i := range 8 {
				at = at.Add(time.Second)
				var dec sluice.Decision
				var err error
				if i%2 == 0 {
					dec, err = d.Acquire(ctx, l, "ext", 1, sluice.At(at))
				} else {
					dec, err = s.Acquire(ctx, l, "ext", 1, sluice.At(at))
				}
				if err != nil {
					t.Fatal(err)
				}
				if dec.Allowed {
					allowed++
				}
			}
			if allowed != 5 {
				t.Errorf("%d allowed through both paths, want 5", allowed)
			}
			viaSocket, err := s.Peek(ctx, l, "ext", sluice.At(at))
			if err != nil {
				t.Fatal(err)
			}
			viaFile, err := d.Peek(ctx, l, "ext", sluice.At(at))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(viaSocket, viaFile) || viaFile.Remaining != 0 || viaFile.Allowed {
				t.Errorf("peek through the socket %+v, in the file %+v", viaSocket, viaFile)
			}
			// A refund in the file frees one through the socket.
			if _, err := d.Refund(ctx, l, "ext", 1, sluice.At(at)); err != nil {
				t.Fatal(err)
			}
			if dec, err := s.Acquire(ctx, l, "ext", 1, sluice.At(at)); err != nil || !dec.Allowed {
				t.Errorf("acquire after a direct refund: %+v, %v", dec, err)
			}
		})
	}

	conc := sluice.Concurrency(2, time.Hour)
	ls, err := s.Lease(ctx, conc, "conc")
	if err != nil || !ls.Allowed {
		t.Fatalf("lease through the socket: %+v, %v", ls, err)
	}
	// The file shows the lease.
	if dec, err := d.Peek(ctx, conc, "conc"); err != nil || dec.Remaining != 1 || dec.Limit != 2 {
		t.Errorf("direct peek of a concurrency limit with one lease: %+v, %v", dec, err)
	}
	for what, err := range map[string]error{
		"acquire": second(d.Acquire(ctx, conc, "conc", 1)),
		"refund":  second(d.Refund(ctx, conc, "conc", 1)),
		"multi":   third(d.Multi(ctx, []sluice.Item{{Limit: sluice.TokenBucket(5, time.Hour, 1), Key: "m", Cost: 1}, {Limit: conc, Key: "conc", Cost: 1}})),
	} {
		if !errors.Is(err, sluice.ErrInvalidLimit) || !strings.Contains(err.Error(), "leased through the sidecar's socket") ||
			strings.Count(err.Error(), "invalid limit") != 1 {
			t.Errorf("direct %s of a concurrency limit: %v; want an invalid limit that says to lease through the socket", what, err)
		}
	}
	if dec, err := d.Peek(ctx, conc, "conc"); err != nil || dec.Remaining != 1 {
		t.Errorf("the refusals changed the bucket: %+v, %v", dec, err)
	}
	if released, err := ls.Release(); !released || err != nil {
		t.Errorf("release through the socket: %v, %v", released, err)
	}
}

func second[T any](_ T, err error) error        { return err }
func third[T, U any](_ T, _ U, err error) error { return err }

// Without a sidecar the client says why, and falls back when asked to.
func TestDirect_noSidecar(t *testing.T) {
	sc := startSidecar(t, t.TempDir(), 0)
	sc.stop(t)
	if _, err := direct.Open(sc.state(), direct.Options{}); err == nil || !strings.Contains(err.Error(), "not serving") {
		t.Fatalf("Open without a sidecar = %v, want a refusal that says no sidecar serves the file", err)
	}
	if _, err := direct.Open(filepath.Join(t.TempDir(), "missing"), direct.Options{}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open of a missing file = %v", err)
	}

	other := startSidecar(t, t.TempDir(), 0)
	fb, err := sluice.Dial(other.sock(), strict...)
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	d, err := direct.Open(sc.state(), direct.Options{Fallback: fb})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if ok, why := d.Direct(); ok || why == nil {
		t.Fatalf("Direct() = %v, %v; want false and a reason", ok, why)
	}
	if dec, err := d.Acquire(ctx, sluice.TokenBucket(1, time.Hour, 1), "k", 1); err != nil || !dec.Allowed {
		t.Fatalf("through the fallback: %+v, %v", dec, err)
	}
	if dec, err := fb.Peek(ctx, sluice.TokenBucket(1, time.Hour, 1), "k"); err != nil || dec.Remaining != 0 {
		t.Errorf("the fallback's sidecar did not decide it: %+v, %v", dec, err)
	}
}

// A sidecar killed with SIGKILL and restarted: the direct client carries on
// in the file, stops while the new sidecar recovers it, and decides in it
// again once it serves; nothing is admitted twice.
func TestDirect_sidecarRestart(t *testing.T) {
	dir := t.TempDir()
	sc := startSidecar(t, dir, 0)
	d, err := direct.Open(sc.state(), direct.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	l := sluice.TokenBucket(10, time.Hour, 1)
	take := func() (bool, error) {
		dec, err := d.Acquire(ctx, l, "k", 1, sluice.At(fixedAt))
		return dec.Allowed, err
	}
	allowed := 0
	for range 4 {
		if ok, err := take(); err != nil || !ok {
			t.Fatalf("before the kill: %v, %v", ok, err)
		}
		allowed++
	}
	sc.kill9()
	// The file is sound without its owner: decisions go on.
	if ok, err := take(); err != nil || !ok {
		t.Fatalf("with the sidecar dead: %v, %v", ok, err)
	}
	allowed++
	sc = startSidecar(t, dir, 0)
	deadline := time.Now().Add(5 * time.Second)
	for {
		ok, err := take()
		if err == nil {
			if ok {
				allowed++
			}
			if allowed == 10 {
				break
			}
			continue
		}
		if !errors.Is(err, sluice.ErrUnavailable) {
			t.Fatalf("after the restart: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the client did not attach to the new sidecar: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if ok, err := take(); err != nil || ok {
		t.Errorf("an 11th request: %v, %v; want denied", ok, err)
	}
	if ok, why := d.Direct(); !ok {
		t.Errorf("not direct after the restart: %v", why)
	}
}

// worker is a client process: "MODE DIR ROUNDS KEYS", MODE direct or
// socket. It acquires each exact limit's bucket ROUNDS times and each of
// KEYS keys of a 2-token bucket once, and prints what it was allowed, or
// with ROUNDS < 0 acquires one bucket forever, printing each allowed
// request as it goes (for the kill loop).
func worker(spec string) int {
	f := strings.Fields(spec)
	mode, dir := f[0], f[1]
	if m, ok := strings.CutPrefix(mode, "bench-"); ok {
		return benchWorker(m, dir, f[2], f[3])
	}
	rounds, _ := strconv.Atoi(f[2])
	keys, _ := strconv.Atoi(f[3])
	var acquire func(l sluice.Limit, key string) (bool, error)
	switch mode {
	case "direct":
		d, err := direct.Open(filepath.Join(dir, "state"), direct.Options{})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		acquire = func(l sluice.Limit, key string) (bool, error) {
			dec, err := d.Acquire(ctx, l, key, 1, sluice.At(fixedAt))
			return dec.Allowed, err
		}
	default:
		s, err := sluice.Dial(filepath.Join(dir, "sock"), strict...)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		acquire = func(l sluice.Limit, key string) (bool, error) {
			dec, err := s.Acquire(ctx, l, key, 1, sluice.At(fixedAt))
			return dec.Allowed, err
		}
	}
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	if rounds < 0 {
		for i := 0; ; i = (i + 7) % hammered {
			ok, err := acquire(hammerLimit, "hammered:"+strconv.Itoa(i))
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			if ok {
				fmt.Fprintln(os.Stdout, i) // unbuffered: what is printed was allowed
			}
		}
	}
	counts := map[string]int{}
	for name, l := range exactLimits {
		for range rounds {
			ok, err := acquire(l, "exact:"+name)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			if ok {
				counts[name]++
			}
		}
	}
	two := sluice.TokenBucket(2, time.Hour, 1)
	for i := range keys {
		ok, err := acquire(two, "many:"+strconv.Itoa(i))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if ok {
			counts["many"]++
		}
	}
	for name, n := range counts {
		fmt.Fprintf(out, "%s %d\n", name, n)
	}
	return 0
}

func startWorker(t *testing.T, spec string) (*exec.Cmd, io.ReadCloser) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SLUICE_DIRECT_WORKER="+spec)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, out
}

// Processes deciding in the file and through the socket at once, on one
// bucket of every algorithm and on thousands of buckets: the total admitted
// is exactly what the limits allow.
func TestDirect_exactAcrossProcesses(t *testing.T) {
	sc := startSidecar(t, t.TempDir(), 0)
	const procs, rounds, keys = 16, 30, 10000
	var mu sync.Mutex
	total := map[string]int{}
	var wg sync.WaitGroup
	for i := range procs {
		mode := "direct"
		if i%2 == 1 {
			mode = "socket"
		}
		cmd, out := startWorker(t, fmt.Sprintf("%s %s %d %d", mode, sc.dir, rounds, keys))
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				var name string
				var n int
				fmt.Sscan(sc.Text(), &name, &n)
				mu.Lock()
				total[name] += n
				mu.Unlock()
			}
			if err := cmd.Wait(); err != nil {
				t.Errorf("worker: %v", err)
			}
		}()
	}
	wg.Wait()
	for name := range exactLimits {
		if total[name] != 200 {
			t.Errorf("%s: %d admitted by %d processes, want exactly 200", name, total[name], procs)
		}
	}
	if total["many"] != 2*keys {
		t.Errorf("%d buckets of 2: %d admitted, want exactly %d", keys, total["many"], 2*keys)
	}
}

// The kill loop's buckets.
const hammered = 64

var hammerLimit = sluice.TokenBucket(1_000_000, time.Hour, 1)

// Direct clients killed with SIGKILL at random moments, some while they
// hold a slot lock, while others go on: nobody waits on a dead process's
// lock for long, nothing is admitted twice, and the file verifies.
func TestDirect_kill9(t *testing.T) {
	sc := startSidecar(t, t.TempDir(), 0)
	type proc struct {
		cmd  *exec.Cmd
		done chan [hammered]int // the allowed requests it printed, by bucket
	}
	start := func() *proc {
		cmd, out := startWorker(t, "direct "+sc.dir+" -1 0")
		p := &proc{cmd, make(chan [hammered]int, 1)}
		go func() {
			var n [hammered]int
			r := bufio.NewScanner(out)
			for r.Scan() {
				if i, err := strconv.Atoi(r.Text()); err == nil && i >= 0 && i < hammered {
					n[i]++
				}
			}
			p.done <- n
		}()
		return p
	}
	var reported [hammered]int
	kills := 0
	stop := func(p *proc) {
		p.cmd.Process.Kill()
		n := <-p.done // every line it printed: Wait closes the pipe, unread lines and all
		p.cmd.Wait()
		for i := range n {
			reported[i] += n[i]
		}
		kills++
	}
	procs := []*proc{start(), start(), start()}
	rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	for range *killRounds {
		time.Sleep(time.Duration(5+rng.IntN(20)) * time.Millisecond)
		i := rng.IntN(len(procs))
		stop(procs[i])
		procs[i] = start()
	}
	time.Sleep(50 * time.Millisecond)
	for _, p := range procs {
		stop(p)
	}
	s, err := sluice.Dial(sc.sock(), strict...)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// A lock a dead client left does not hold anyone up for long.
	peekCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	drained, total := 0, 0
	for i := range hammered {
		dec, err := s.Peek(peekCtx, hammerLimit, "hammered:"+strconv.Itoa(i), sluice.At(fixedAt))
		if err != nil {
			t.Fatal(err)
		}
		consumed := int(1_000_000 - dec.Remaining)
		total += reported[i]
		switch {
		case consumed < reported[i]:
			t.Errorf("bucket %d consumed %d but clients printed %d allowed: admissions lost", i, consumed, reported[i])
		case dec.Remaining == 0:
			drained++ // caught mid-update by a kill: repaired to grant nothing
		case consumed > reported[i]+kills:
			// Each kill may have taken one admission it did not live to print.
			t.Errorf("bucket %d consumed %d, clients printed %d with %d kills", i, consumed, reported[i], kills)
		}
	}
	if total == 0 || drained == hammered {
		t.Errorf("%d admissions printed, %d of %d buckets drained: the loop decided nothing", total, drained, hammered)
	}
	t.Logf("%d kills, %d admissions printed, %d of %d buckets repaired to drained", kills, total, drained, hammered)
	sc.stop(t)
	tb, err := shm.Open(sc.state())
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	if err := tb.Verify(); err != nil {
		t.Error(err)
	}
}

// benchWorker is a process of BenchmarkDirectProcesses: it attaches (or
// connects), says so, waits for its stdin to close, then makes n acquires
// on keys of its own.
func benchWorker(mode, dir, count, id string) int {
	n, _ := strconv.Atoi(count)
	l := sluice.GCRA(1000, 1_000_000, time.Second)
	var acquire func(key string) error
	if mode == "direct" {
		d, err := direct.Open(filepath.Join(dir, "state"), direct.Options{})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		acquire = func(key string) error { _, err := d.Acquire(ctx, l, key, 1); return err }
	} else {
		s, err := sluice.Dial(filepath.Join(dir, "sock"), strict...)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		acquire = func(key string) error { _, err := s.Acquire(ctx, l, key, 1); return err }
	}
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "p" + id + ":" + strconv.Itoa(i)
	}
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	for i := range n {
		if err := acquire(keys[i%len(keys)]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}

// The decision the direct path writes in place is the client's decision of
// the same wire decision, every field of which is set here (a field added
// to the wire's decision fails the test until both carry it).
func TestDirect_setDecision(t *testing.T) {
	w := proto.Decision{Allowed: true, Remaining: 3, Limit: 7, RetryAfter: 11, ResetAfter: 5e9, Delay: 2e6}
	v := reflect.ValueOf(w)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Fatalf("field %s of the wire's decision is not set by the test", v.Type().Field(i).Name)
		}
	}
	want := clientwire.Decision.(func(*proto.Decision) sluice.Decision)(&w)
	got := sluice.Decision{Degraded: true, Outage: "local"}
	direct.SetDecision(&got, &w)
	want.Degraded, want.Outage = true, "local" // the client's own fields are left
	if !reflect.DeepEqual(got, want) {
		t.Errorf("in place %+v, the client's %+v", got, want)
	}
}

// An acquire in the file allocates nothing: the limit, the request and the
// decision stay on the stack.
func TestDirect_acquireAllocs(t *testing.T) {
	d, _ := directAndSocket(t)
	l := sluice.GCRA(1000, 1_000_000, time.Second)
	if _, err := d.Acquire(ctx, l, "allocs", 1); err != nil { // validates and caches the limit
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { d.Acquire(ctx, l, "allocs", 1) }); n != 0 {
		t.Errorf("an acquire allocates %v times", n)
	}
}

// TestSameLimit: the limit cache's comparison tells apart two limits that
// differ in any one field, including fields added to the limit later (a
// field it did not compare would let one limit's cached validation serve
// another's decisions).
func TestSameLimit(t *testing.T) {
	base := sluice.Limit{Algorithm: proto.GCRA, P: [3]int64{1, 2, 3}, Name: "n", TZ: "UTC"}
	if !direct.SameLimit(&base, &base) {
		t.Fatal("a limit differs from itself")
	}
	typ := reflect.TypeFor[sluice.Limit]()
	for i := range typ.NumField() {
		other := base
		f := reflect.ValueOf(&other).Elem().Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(f.String() + "x")
		case reflect.Bool:
			f.SetBool(!f.Bool())
		case reflect.Array:
			for j := range f.Len() {
				other2 := base
				reflect.ValueOf(&other2).Elem().Field(i).Index(j).SetInt(99)
				if direct.SameLimit(&base, &other2) {
					t.Errorf("limits differing in %s[%d] compare equal", typ.Field(i).Name, j)
				}
			}
			continue
		case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			f.SetUint(f.Uint() + 1)
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			f.SetInt(f.Int() + 1)
		default:
			t.Fatalf("field %s of kind %s: teach this test to change it", typ.Field(i).Name, f.Kind())
		}
		if direct.SameLimit(&base, &other) {
			t.Errorf("limits differing in %s compare equal", typ.Field(i).Name)
		}
	}
}
