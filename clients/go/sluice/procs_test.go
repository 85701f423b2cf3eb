package sluice_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clients/go/sluice"
)

// The processes of TestLease_processes are this test binary again, run
// with SLUICE_LEASE_WORKER set (TestMain hands them to leaseWorker).

const (
	procCount  = 32 // looping processes
	procLimit  = 5  // slots of the shared limit
	procHold   = 3 * time.Millisecond
	procLoop   = 1500 * time.Millisecond // how long the processes loop
	stopLease  = time.Second             // the lease time of the stopped holder's limit
	workerEnv  = "SLUICE_LEASE_WORKER"
	witnessLen = 3 * 8 // the witness file: held now, most held at once, times above the limit
)

var (
	loopLimit = sluice.Concurrency(procLimit, time.Minute)
	killLimit = sluice.Concurrency(procLimit, time.Minute)
	stopLimit = sluice.Concurrency(1, stopLease)
)

// witness counts the leases held at once across processes, in a file
// updated under flock: a process counts itself in after the sidecar
// granted its lease and out before it asks to release it, so the count
// never exceeds what the sidecar holds. It reads nothing from the sidecar:
// a sidecar that granted a sixth slot while five were held would show
// here as six holders at once.
type witness struct{ f *os.File }

// add adds delta to the holders and records the most seen at once, and
// whether that passed the limit.
func (w witness) add(delta int64) error {
	fd := int(w.f.Fd())
	if err := syscall.Flock(fd, syscall.LOCK_EX); err != nil {
		return err
	}
	defer syscall.Flock(fd, syscall.LOCK_UN)
	var b [witnessLen]byte
	if _, err := w.f.ReadAt(b[:], 0); err != nil {
		return err
	}
	held := int64(binary.LittleEndian.Uint64(b[0:])) + delta
	binary.LittleEndian.PutUint64(b[0:], uint64(held))
	if most := int64(binary.LittleEndian.Uint64(b[8:])); held > most {
		binary.LittleEndian.PutUint64(b[8:], uint64(held))
	}
	if held > procLimit {
		binary.LittleEndian.PutUint64(b[16:], binary.LittleEndian.Uint64(b[16:])+1)
	}
	_, err := w.f.WriteAt(b[:], 0)
	return err
}

// leaseWorker is one process: "loop SOCKET WITNESS" loops lease, count in,
// hold, count out, release from the line "go" on stdin for procLoop, then
// prints "grants N"; "hold SOCKET SPEC KEY" leases one slot, prints "held
// ID" (or "denied"), waits for stdin to close, releases, and prints
// "released true" or "released false".
func leaseWorker(spec string) int {
	f := strings.Fields(spec)
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "worker:", err); return 1 }
	// Patient: 32 processes start at once on a CI machine's few cores
	// (the start check too: Dial's own second was not always enough).
	start, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := sluice.DialContext(start, f[1], sluice.WithFailurePolicy(sluice.FailError), sluice.WithTimeout(10*time.Second),
		sluice.WithDialTimeout(10*time.Second), sluice.WithLogger(quiet))
	if err != nil {
		return fail(err)
	}
	defer c.Close()
	cx := context.Background()
	if err := c.Ping(cx); err != nil {
		return fail(err)
	}
	in := bufio.NewScanner(os.Stdin)
	switch f[0] {
	case "loop":
		wf, err := os.OpenFile(f[2], os.O_RDWR, 0)
		if err != nil {
			return fail(err)
		}
		w := witness{wf}
		fmt.Println("ready")
		if !in.Scan() || in.Text() != "go" {
			return fail(fmt.Errorf("no go"))
		}
		grants := 0
		for end := time.Now().Add(procLoop); time.Now().Before(end); {
			ls, err := c.Lease(cx, loopLimit, "loop")
			if err != nil {
				return fail(err)
			}
			if !ls.Allowed {
				// A slot frees within procHold: ask again soon, not in a spin
				// that would starve the holders (and the tests of packages
				// run beside this one).
				time.Sleep(procHold/2 + time.Duration(rand.Int64N(int64(procHold))))
				continue
			}
			grants++
			if err := w.add(1); err != nil {
				return fail(err)
			}
			time.Sleep(procHold)
			if err := w.add(-1); err != nil {
				return fail(err)
			}
			if released, err := ls.Release(); err != nil || !released {
				return fail(fmt.Errorf("release of lease %d: %v, %v", ls.ID, released, err))
			}
		}
		fmt.Println("grants", grants)
	case "hold":
		l, err := sluice.ParseLimit(f[2])
		if err != nil {
			return fail(err)
		}
		ls, err := c.Lease(cx, l, f[3])
		if err != nil {
			return fail(err)
		}
		if !ls.Allowed {
			fmt.Println("denied")
			return 0
		}
		fmt.Println("held", ls.ID)
		io.Copy(io.Discard, os.Stdin)
		released, err := ls.Release()
		if err != nil {
			return fail(err)
		}
		fmt.Println("released", released)
	}
	return 0
}

// proc is a worker process.
type proc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string // its stdout, line by line; closed at its end
}

func startWorker(t *testing.T, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	// Under the race detector a process sleeps 1s as it exits, unless told
	// not to.
	cmd.Env = append(os.Environ(), workerEnv+"="+strings.Join(args, " "), "GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, stdin: stdin, lines: make(chan string, 16)}
	go func() {
		defer close(p.lines)
		r := bufio.NewScanner(stdout)
		for r.Scan() {
			p.lines <- r.Text()
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		cmd.Wait()
	})
	return p
}

// line returns the process's next line of output.
func (p *proc) line(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			t.Fatalf("worker %d ended without a line", p.cmd.Process.Pid)
		}
		return l
	case <-time.After(30 * time.Second):
		t.Fatalf("worker %d said nothing for 30s", p.cmd.Process.Pid)
	}
	return ""
}

// end waits for the process to exit, and checks it succeeded.
func (p *proc) end(t *testing.T) {
	t.Helper()
	if err := p.cmd.Wait(); err != nil {
		t.Errorf("worker %d: %v", p.cmd.Process.Pid, err)
	}
}

// 32 processes share a concurrency limit of 5 through sluiced: a witness
// of their own never sees more than 5 holders at once; holders killed with
// SIGKILL get their slots back at once (their connections close); a
// holder stopped with SIGSTOP, its connection open, loses its slot when
// the lease time passes.
func TestLease_processes(t *testing.T) {
	_, sock := startSluiced(t)
	c := dial(t, sock, sluice.WithFailurePolicy(sluice.FailError), sluice.WithTimeout(10*time.Second))
	cx := ctx(t)

	// 1. 32 processes loop lease, hold, release on 5 slots.
	wpath := t.TempDir() + "/witness"
	if err := os.WriteFile(wpath, make([]byte, witnessLen), 0o600); err != nil {
		t.Fatal(err)
	}
	procs := make([]*proc, procCount)
	var wg sync.WaitGroup
	for i := range procs {
		wg.Go(func() { procs[i] = startWorker(t, "loop", sock, wpath) })
	}
	wg.Wait()
	for _, p := range procs {
		if l := p.line(t); l != "ready" {
			t.Fatalf("worker: %q, want ready", l)
		}
	}
	for _, p := range procs { // all at once
		io.WriteString(p.stdin, "go\n")
	}
	grants := 0
	for _, p := range procs {
		l := p.line(t)
		n, err := strconv.Atoi(strings.TrimPrefix(l, "grants "))
		if err != nil {
			t.Fatalf("worker: %q, want its grants", l)
		}
		grants += n
		p.end(t)
	}
	b, err := os.ReadFile(wpath)
	if err != nil {
		t.Fatal(err)
	}
	heldNow, most, over := binary.LittleEndian.Uint64(b[0:]), binary.LittleEndian.Uint64(b[8:]), binary.LittleEndian.Uint64(b[16:])
	t.Logf("%d processes, %d leases granted in %v; the witness saw at most %d held at once", procCount, grants, procLoop, most)
	switch {
	case over > 0 || most > procLimit:
		t.Errorf("the witness saw %d holders at once (%d times above the limit of %d)", most, over, procLimit)
	case heldNow != 0:
		t.Errorf("the witness counts %d holders after every process ended", heldNow)
	case most < 2 || grants < procCount:
		t.Errorf("%d leases granted, at most %d held at once: the processes hardly contended", grants, most)
	}
	if d, err := c.Peek(cx, loopLimit, "loop"); err != nil || d.Remaining != procLimit {
		t.Errorf("after the loops: %+v, %v; want every slot free", d, err)
	}

	// 2. Holders killed with SIGKILL while they hold: their slots come
	// back when their connections close, long before the lease time.
	holders := make([]*proc, procLimit)
	for i := range holders {
		holders[i] = startWorker(t, "hold", sock, killLimit.String(), "kill")
	}
	for _, p := range holders {
		if l := p.line(t); !strings.HasPrefix(l, "held ") {
			t.Fatalf("holder: %q", l)
		}
	}
	if ls, err := c.Lease(cx, killLimit, "kill"); err != nil || ls.Allowed {
		t.Fatalf("a sixth lease: %+v, %v; want denied", ls, err)
	}
	const killed = 3
	killedAt := time.Now()
	for _, p := range holders[:killed] {
		p.cmd.Process.Kill()
	}
	var mine []sluice.Lease
	for len(mine) < killed {
		ls, err := c.Lease(cx, killLimit, "kill")
		if err != nil {
			t.Fatal(err)
		}
		if ls.Allowed {
			mine = append(mine, ls)
			continue
		}
		if time.Since(killedAt) > 5*time.Second {
			t.Fatalf("%d of the %d killed holders' slots came back in 5s (the lease time is %v)", len(mine), killed, killLimit.P[1])
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("the %d killed holders' slots came back within %v", killed, time.Since(killedAt).Round(time.Millisecond))
	if ls, err := c.Lease(cx, killLimit, "kill"); err != nil || ls.Allowed {
		t.Errorf("a lease with the survivors holding: %+v, %v; want denied", ls, err)
	}
	for _, p := range holders[killed:] {
		p.stdin.Close()
		if l := p.line(t); l != "released true" {
			t.Errorf("survivor: %q", l)
		}
		p.end(t)
	}
	for _, ls := range mine {
		if released, err := ls.Release(); !released || err != nil {
			t.Errorf("release: %v, %v", released, err)
		}
	}

	// 3. A holder stopped with SIGSTOP keeps its connection open and never
	// releases: its lease expires at the lease time.
	began := time.Now()
	sleeper := startWorker(t, "hold", sock, stopLimit.String(), "stop")
	if l := sleeper.line(t); !strings.HasPrefix(l, "held ") {
		t.Fatalf("holder: %q", l)
	}
	heldAt := time.Now()
	pid := sleeper.cmd.Process.Pid
	sleeper.cmd.Process.Signal(syscall.SIGSTOP)
	eventually(t, func() error { return stopped(pid) })
	ls, err := c.Lease(cx, stopLimit, "stop")
	if err != nil || ls.Allowed || ls.RetryAfter <= 0 || ls.RetryAfter > stopLease {
		t.Fatalf("lease beside the stopped holder: %+v, %v; want denied until its lease expires", ls, err)
	}
	for !ls.Allowed {
		if time.Since(heldAt) > stopLease+5*time.Second {
			t.Fatalf("the stopped holder's lease of %v still held after %v", stopLease, time.Since(heldAt))
		}
		time.Sleep(5 * time.Millisecond)
		if ls, err = c.Lease(cx, stopLimit, "stop"); err != nil {
			t.Fatal(err)
		}
	}
	if took := time.Since(began); took < stopLease {
		t.Errorf("the stopped holder's lease of %v expired within %v of its start", stopLease, took)
	}
	t.Logf("the stopped holder's lease expired %v after it printed it", time.Since(heldAt).Round(time.Millisecond))
	// Its connection was open all along: the lease expired, it was not
	// given back on a close. (The only connections left are this test's
	// client and the stopped holder's.)
	if err := stopped(pid); err != nil {
		t.Error(err)
	}
	eventually(t, func() error {
		st, err := c.Stats(cx)
		if err != nil {
			return err
		}
		if st["connections"] != 2 {
			return fmt.Errorf("%d connections open, want 2: this client's and the stopped holder's", st["connections"])
		}
		return nil
	})
	// Woken up, it finds its lease gone; its release frees nothing of the
	// lease that took its slot (checked while that lease is surely held,
	// before its own lease time passes).
	ls.Release()
	if ls, err = c.Lease(cx, stopLimit, "stop"); err != nil || !ls.Allowed {
		t.Fatalf("lease: %+v, %v", ls, err)
	}
	grantedAt := time.Now()
	sleeper.cmd.Process.Signal(syscall.SIGCONT)
	sleeper.stdin.Close()
	if l := sleeper.line(t); l != "released false" {
		t.Errorf("the stopped holder, woken: %q, want released false", l)
	}
	sleeper.end(t)
	released, err := ls.Release()
	if err != nil || !released && time.Since(grantedAt) < stopLease {
		t.Errorf("release of the lease that took the slot: %v, %v; the woken holder's release freed it", released, err)
	}
}
