package shm

import (
	"errors"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestHelperHolder is not a test: run by holdStopped in another process,
// it attaches to SHM_TEST_HOLD's file, locks the bucket SHM_TEST_HOLD_KEY
// and waits there (to be stopped) until the file's .release appears; then
// it writes 42 into the bucket and commits.
func TestHelperHolder(t *testing.T) {
	path := os.Getenv("SHM_TEST_HOLD")
	if path == "" {
		t.Skip("a helper process of other tests")
	}
	att, err := Attach(path)
	if err != nil {
		t.Fatal(err)
	}
	s, ok := att.lookup(fp(att, os.Getenv("SHM_TEST_HOLD_KEY")))
	if !ok {
		t.Fatal("no bucket")
	}
	os.WriteFile(path+".ready", nil, 0o600)
	for { // stopped here by the parent, holding the lock
		if _, err := os.Stat(path + ".release"); err == nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	s.State()[0] = 42
	s.Commit(math.MaxInt64)
	att.Close()
}

// holdStopped starts a process that attaches to the file at path, locks
// bucket key and is stopped (SIGSTOP) holding its lock. goOn lets it go on:
// it writes 42 into the bucket, commits and exits. The process is killed
// after the test if it is still there.
func holdStopped(t *testing.T, path, key string) (cmd *exec.Cmd, goOn func()) {
	t.Helper()
	cmd = exec.Command(os.Args[0], "-test.run=^TestHelperHolder$")
	cmd.Env = append(os.Environ(), "SHM_TEST_HOLD="+path, "SHM_TEST_HOLD_KEY="+key)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, err := os.Stat(path + ".ready"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the holder did not start")
		}
	}
	cmd.Process.Signal(syscall.SIGSTOP)
	return cmd, func() {
		os.WriteFile(path+".release", nil, 0o600)
		cmd.Process.Signal(syscall.SIGCONT)
		if err := cmd.Wait(); err != nil {
			t.Errorf("holder: %v", err)
		}
	}
}

// Ensure a wait for a lock that a live but stopped process keeps gives up
// once the Wait's budget is spent, with an error naming the holder's pid
// and how long it held the lock, having locked nothing; and that the
// bucket is the holder's to write once it goes on.
func TestWait_budget(t *testing.T) {
	owner, path := newFile(t, Options{SlotCount: 16})
	put(t, owner, "held", 5, math.MaxInt64, 0)
	put(t, owner, "free", 6, math.MaxInt64, 0)
	cmd, goOn := holdStopped(t, path, "held")
	const budget = 200 * time.Millisecond
	w := Wait{Budget: budget}
	start := time.Now()
	_, _, err := owner.Lookup(fp(owner, "held"), &w)
	took := time.Since(start)
	var le *LockedError
	if !errors.As(err, &le) || !errors.Is(err, ErrLockWait) {
		t.Fatalf("Lookup of a bucket a stopped process holds = %v, want a *LockedError", err)
	}
	if le.Pid != cmd.Process.Pid || le.Held < budget-20*time.Millisecond {
		t.Errorf("error %+v: want pid %d, held about %v", le, cmd.Process.Pid, budget)
	}
	if took < budget || took > budget+5*time.Second {
		t.Errorf("gave up after %v, want about %v", took, budget)
	}
	want := "held by process " + strconv.Itoa(cmd.Process.Pid) + ", which has held it for at least"
	if msg := err.Error(); !strings.Contains(msg, want) {
		t.Errorf("error %q does not say %q", msg, want)
	}
	// The budget is spent: the next wait of the same operation gives up
	// after its spin, and a free lock is still taken.
	if _, _, err := owner.Lookup(fp(owner, "held"), &w); !errors.Is(err, ErrLockWait) {
		t.Errorf("a second wait on a spent budget: %v", err)
	}
	s, ok, err := owner.Lookup(fp(owner, "free"), &w)
	if err != nil || !ok {
		t.Fatalf("a free lock on a spent budget: %v, %v", ok, err)
	}
	s.Release()
	goOn()
	if v, ok := get(owner, "held"); !ok || v != 42 {
		t.Errorf("bucket after the holder went on: %d, %v; want its write, 42", v, ok)
	}
}

// Ensure waiting on a lock that a stopped process keeps costs no processor
// after the first spin: 64 goroutines waiting use a small part of one CPU,
// where spinning waiters use all there is.
func TestWait_sleeps(t *testing.T) {
	owner, path := newFile(t, Options{SlotCount: 16})
	put(t, owner, "held", 5, math.MaxInt64, 0)
	_, goOn := holdStopped(t, path, "held")
	const waiters = 64
	var wg sync.WaitGroup
	var got atomic.Int64
	for range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, ok := owner.lookup(fp(owner, "held"))
			if ok {
				got.Add(1)
				s.Release()
			}
		}()
	}
	cpu0, wall0 := processCPU(t), time.Now()
	time.Sleep(time.Second)
	cpu, wall := processCPU(t)-cpu0, time.Since(wall0)
	if share := float64(cpu) / float64(wall); share > 0.25 {
		t.Errorf("%d waiters used %v of CPU in %v (%.0f%%), want a small part", waiters, cpu, wall, 100*share)
	} else {
		t.Logf("%d waiters used %v of CPU in %v (%.1f%%)", waiters, cpu, wall, 100*share)
	}
	goOn()
	wg.Wait()
	if got.Load() != waiters {
		t.Errorf("%d of %d waiters got the bucket", got.Load(), waiters)
	}
}

// Ensure a Wait's Blocking is called once, when a lock is still held after
// the first spin, and not for a lock that is free.
func TestWait_blocking(t *testing.T) {
	owner, path := newFile(t, Options{SlotCount: 16})
	put(t, owner, "held", 5, math.MaxInt64, 0)
	put(t, owner, "free", 6, math.MaxInt64, 0)
	_, goOn := holdStopped(t, path, "held")
	var calls atomic.Int32
	w := Wait{Budget: 50 * time.Millisecond, Blocking: func() { calls.Add(1) }}
	s, _, err := owner.Lookup(fp(owner, "free"), &w)
	if err != nil {
		t.Fatal(err)
	}
	s.Release()
	if n := calls.Load(); n != 0 {
		t.Fatalf("Blocking called %d times for a free lock", n)
	}
	for range 2 {
		if _, _, err := owner.Lookup(fp(owner, "held"), &w); !errors.Is(err, ErrLockWait) {
			t.Fatalf("Lookup = %v", err)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("Blocking called %d times for two waits of one Wait, want 1", n)
	}
	goOn()
}

// processCPU returns the CPU time this process has used (user and system).
func processCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
