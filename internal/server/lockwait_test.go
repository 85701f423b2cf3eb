package server

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/locktest"
	"github.com/sluicehq/sluice/proto"
)

// within runs f and fails the test if it takes longer than d: a generous
// bound for an answer that must not wait on a lock.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	start := time.Now()
	f()
	if took := time.Since(start); took > d {
		t.Errorf("%s took %v, want under %v", what, took, d)
	}
}

// Ensure an event loop never waits for a lock another process keeps: with
// a direct client stopped holding a bucket and a request for it waiting,
// another connection of the same (only) loop is answered at once on both
// protocols, and the waiting connection's answers come, in order, once
// the holder goes on.
func TestLockWait_loopServesOthers(t *testing.T) {
	sc := start(t, Config{Transport: TransportEpoll, Loops: 1, LockWait: time.Minute})
	a := dial(t, sc)
	if r := a.acquire("held", tb10, 1, 0); r.Status != proto.StatusOK {
		t.Fatalf("acquire: %+v", r)
	}
	_, goOn := locktest.Stopped(t, sc.cfg.StatePath, "held", tb10)
	acquire := func(key string) func(b []byte) []byte {
		return func(b []byte) []byte { return proto.AppendItem(b, proto.OpAcquire, 0, tb10, 1, 0, []byte(key)) }
	}
	first := a.send(1, acquire("held"))
	second := a.send(1, acquire("after"))

	b := dial(t, sc)
	within(t, time.Second, "an acquire on another connection", func() {
		if r := b.acquire("other", tb10, 1, 0); r.Status != proto.StatusOK || r.Decision.Remaining != 9 {
			t.Errorf("acquire of another key: %+v", r)
		}
	})
	rc := dialRaw(t, sc.cfg.RESPSocket)
	within(t, time.Second, "a RESP PING", func() {
		if got := rc.do("PING"); got != "+PONG\r\n" {
			t.Errorf("PING: %q", got)
		}
	})
	if n := stat(t, b, "loop_handoffs"); n != 1 {
		t.Errorf("loop_handoffs = %d, want 1", n)
	}
	// Nothing for the waiting connection while the holder is stopped.
	a.c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if n, err := a.c.Read(make([]byte, 1)); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read from the waiting connection: %d bytes, %v", n, err)
	}
	goOn()
	for _, want := range []struct {
		id        uint32
		remaining int64
	}{{first, 8}, {second, 9}} {
		h, rs := a.recv()
		if h.ID != want.id || len(rs) != 1 || rs[0].Status != proto.StatusOK || rs[0].Decision.Remaining != want.remaining {
			t.Errorf("answer %d: %+v, want id %d, remaining %d", h.ID, rs, want.id, want.remaining)
		}
	}
	// The connection is back on the loop.
	if r := a.acquire("held", tb10, 1, 0); r.Status != proto.StatusOK || r.Decision.Remaining != 7 {
		t.Errorf("acquire after: %+v", r)
	}
}

// Ensure requests waiting for a lock a stopped process keeps cost no CPU
// after their first spin: 64 of them use a small part of one CPU, on
// either transport.
func TestLockWait_waitersSleep(t *testing.T) {
	for _, tr := range []string{TransportAuto, TransportGoroutines, TransportEpoll} {
		t.Run(tr, func(t *testing.T) {
			sc := start(t, Config{Transport: tr, LockWait: time.Minute})
			c := dial(t, sc)
			if r := c.acquire("held", tb10, 0, 0); r.Status != proto.StatusOK {
				t.Fatalf("acquire: %+v", r)
			}
			_, goOn := locktest.Stopped(t, sc.cfg.StatePath, "held", tb10)
			const waiters = 64
			var cs []*client
			for range waiters {
				w := dial(t, sc)
				w.send(1, func(b []byte) []byte { return proto.AppendItem(b, proto.OpAcquire, 0, tb10, 0, 0, []byte("held")) })
				cs = append(cs, w)
			}
			if share, cpu, wall := locktest.CPUShare(t, time.Second); share > locktest.MaxCPUShare {
				t.Errorf("%d waiting requests used %v of CPU in %v (%.0f%%), want a small part", waiters, cpu, wall, 100*share)
			} else {
				t.Logf("%d waiting requests used %v of CPU in %v (%.1f%%)", waiters, cpu, wall, 100*share)
			}
			goOn()
			for i, w := range cs {
				if _, rs := w.recv(); len(rs) != 1 || rs[0].Status != proto.StatusOK {
					t.Errorf("waiter %d: %+v", i, rs)
				}
			}
		})
	}
}

// Ensure a request that outlives Config.LockWait waiting for a lock a
// stopped process keeps is answered with an error naming that process, on
// both protocols, and changes nothing: a MULTI or a transaction with
// another bucket leaves that bucket untouched too.
func TestLockWait_deadline(t *testing.T) {
	const wait = 200 * time.Millisecond
	sc := start(t, Config{LockWait: wait})
	c := dial(t, sc)
	if r := c.acquire("held", tb10, 1, 0); r.Status != proto.StatusOK {
		t.Fatalf("acquire: %+v", r)
	}
	pid, goOn := locktest.Stopped(t, sc.cfg.StatePath, "held", tb10)
	named := "the bucket is locked by process " + strconv.Itoa(pid) + ", which has held it for at least"

	var r proto.Result
	begun := time.Now()
	r = c.acquire("held", tb10, 1, 0)
	if took := time.Since(begun); took < wait {
		t.Errorf("answered after %v, before the lock wait (%v)", took, wait)
	}
	if r.Status != proto.StatusContended || !strings.Contains(string(r.Message), named) {
		t.Errorf("acquire of a bucket a stopped process holds: %v %q, want Contended saying %q", r.Status, r.Message, named)
	}
	r = c.do(func(b []byte) []byte {
		return proto.AppendMulti(b, 0, 0, []proto.MultiItem{
			{Limit: tb10, Cost: 1, Key: []byte("untouched")}, {Limit: tb10, Cost: 1, Key: []byte("held")},
		})
	})
	if r.Status != proto.StatusContended || !strings.Contains(string(r.Message), named) {
		t.Errorf("multi: %v %q", r.Status, r.Message)
	}
	rc := dialRaw(t, sc.cfg.RESPSocket)
	// tb10's bucket in smyte/ratelimit's words: max 10, refilled 1 an hour.
	if got := rc.do("RL.REDUCE", "held", "10", "3600", "REFILL", "1"); !strings.HasPrefix(got, "-ERR "+named) {
		t.Errorf("RL.REDUCE: %q", got)
	}
	rc.do("MULTI")
	rc.do("CL.THROTTLE", "untouched-tx", "9", "10", "3600")
	rc.do("RL.REDUCE", "held", "10", "3600", "REFILL", "1")
	rc.do("PING")
	got := rc.do("EXEC")
	if strings.Count(got, named) != 2 || !strings.HasSuffix(got, "+PONG\r\n") {
		t.Errorf("EXEC: %q, want both rate limits answered with the wait's error, and PONG", got)
	}
	goOn()
	// Nothing changed: the buckets of the multi and the transaction are new.
	if r := c.do(func(b []byte) []byte { return proto.AppendItem(b, proto.OpPeek, 0, tb10, 0, 0, []byte("untouched")) }); r.Status != proto.StatusOK || r.Decision.Remaining != 10 {
		t.Errorf("the multi's other bucket: %+v", r)
	}
	if got := rc.do("CL.THROTTLE", "untouched-tx", "9", "10", "3600", "0"); got != "*5\r\n:0\r\n:10\r\n:10\r\n:-1\r\n:0\r\n" {
		t.Errorf("the transaction's other bucket: %q", got)
	}
	if r := c.acquire("held", tb10, 1, 0); r.Status != proto.StatusOK || r.Decision.Remaining != 8 {
		t.Errorf("acquire after the holder went on: %+v", r)
	}
}

// Ensure a server stopping while a request waits for a lock answers it
// (with the wait's error, once Config.LockWait has passed) and stops, on
// either transport, once the holder has gone on: the owner's final sync
// waits for a decision in progress in another process (package shm).
func TestLockWait_stopWhileWaiting(t *testing.T) {
	for _, tr := range []string{TransportAuto, TransportGoroutines, TransportEpoll} {
		t.Run(tr, func(t *testing.T) {
			sc := start(t, Config{Transport: tr, LockWait: 300 * time.Millisecond})
			c := dial(t, sc)
			if r := c.acquire("held", tb10, 1, 0); r.Status != proto.StatusOK {
				t.Fatalf("acquire: %+v", r)
			}
			_, goOn := locktest.Stopped(t, sc.cfg.StatePath, "held", tb10)
			c.send(1, func(b []byte) []byte { return proto.AppendItem(b, proto.OpAcquire, 0, tb10, 1, 0, []byte("held")) })
			other := dial(t, sc)
			for deadline := time.Now().Add(10 * time.Second); stat(t, other, "lock_waits") == 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the request did not begin to wait")
				}
			}
			sc.srv.Cancel() // stop, with the request waiting
			if _, rs := c.recv(); len(rs) != 1 || rs[0].Status != proto.StatusContended {
				t.Errorf("the waiting request: %+v, want Contended", rs)
			}
			goOn()
			if err := sc.srv.Wait(); err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
}

// Ensure a request that carries its client's deadline waits for a lock no
// longer than that, when it comes before Config.LockWait.
func TestLockWait_clientDeadline(t *testing.T) {
	sc := start(t, Config{LockWait: time.Minute})
	c := dial(t, sc)
	if r := c.acquire("held", tb10, 1, 0); r.Status != proto.StatusOK {
		t.Fatalf("acquire: %+v", r)
	}
	pid, goOn := locktest.Stopped(t, sc.cfg.StatePath, "held", tb10)
	defer goOn()
	const wait = 300 * time.Millisecond
	begun := time.Now()
	r := c.do(func(b []byte) []byte {
		return proto.AppendItem(b, proto.OpAcquire, proto.FlagDeadline, tb10, 1, begun.Add(wait).UnixNano(), []byte("held"))
	})
	took := time.Since(begun)
	if named := "the bucket is locked by process " + strconv.Itoa(pid); r.Status != proto.StatusContended || !strings.Contains(string(r.Message), named) {
		t.Errorf("acquire with a deadline: %v %q, want Contended saying %q", r.Status, r.Message, named)
	}
	if took < wait-20*time.Millisecond || took > wait+4*time.Second {
		t.Errorf("answered after %v, want about the client's deadline (%v)", took, wait)
	}
}

// Ensure an event loop does not wait for a lock another process keeps to
// give back the leases of a connection that closed: with a direct client
// stopped holding a concurrency bucket, a connection holding a lease of it
// closes, and another connection of the same (only) loop is answered at
// once throughout the next two seconds; the lease is given back, not lost,
// once the holder goes on.
func TestLockWait_loopReleasesOffTheLoop(t *testing.T) {
	sc := start(t, Config{Transport: TransportEpoll, Loops: 1, LockWait: time.Minute})
	conc := proto.ConcurrencyLimit(2, time.Hour)
	a := dial(t, sc)
	if r := a.do(func(b []byte) []byte { return proto.AppendLease(b, 0, conc, []byte("held")) }); r.Status != proto.StatusOK || r.Lease == 0 {
		t.Fatalf("lease: %+v", r)
	}
	_, goOn := locktest.Stopped(t, sc.cfg.StatePath, "held", conc)
	b := dial(t, sc)
	if r := b.acquire("other", tb10, 0, 0); r.Status != proto.StatusOK {
		t.Fatalf("acquire: %+v", r)
	}
	a.c.Close() // the loop gives its lease back
	var slowest time.Duration
	n := 0
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); n++ {
		begun := time.Now()
		if r := b.acquire("other", tb10, 0, 0); r.Status != proto.StatusOK {
			t.Fatalf("acquire of another key: %+v", r)
		}
		slowest = max(slowest, time.Since(begun))
		time.Sleep(time.Millisecond) // pacing: a few hundred probes, not a busy loop
	}
	t.Logf("%d acquires on the loop while the closed connection's lease waited for the lock: slowest %v", n, slowest)
	if slowest > 500*time.Millisecond {
		t.Errorf("an acquire on another connection took %v while a closed connection's lease waited for a lock, want under 500ms", slowest)
	}
	goOn()
	peek := func(b []byte) []byte { return proto.AppendItem(b, proto.OpPeek, 0, conc, 0, 0, []byte("held")) }
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		r := b.do(peek)
		if r.Status == proto.StatusOK && r.Decision.Remaining == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the closed connection's lease is still held 10s after the holder went on: %+v", r)
		}
	}
}
