//go:build linux

package server

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/sluicehq/sluice/proto"
	"github.com/sluicehq/sluice/proto/resp"
)

// Ensure the auto transport finds a connection that keeps sending several
// requests at once multiplexed (its loop does not poll for it), and
// answers it as before: every answer, in order, requests split across
// reads included; a connection with one request in flight is not.
func TestAuto_multiplexedConnection(t *testing.T) {
	sc := start(t, Config{Transport: TransportAuto, Loops: 1})
	single := dial(t, sc)
	for range 2 * multiplexedAfter {
		if r := single.acquire("single", tb10, 0, 0); r.Status != proto.StatusOK {
			t.Fatalf("acquire: %+v", r)
		}
	}
	if n := stat(t, single, "loop_multiplexed"); n != 0 {
		t.Fatalf("loop_multiplexed = %d after a client with one request in flight, want 0", n)
	}

	// Each write ends half-way through a frame that the next write
	// completes.
	m := dial(t, sc)
	frame := func(id uint32) []byte {
		b, start := proto.BeginFrame(nil, proto.KindRequest, id)
		b = proto.AppendItem(b, proto.OpAcquire, 0, tb10, 0, 0, fmt.Appendf(nil, "m%d", id))
		return proto.EndFrame(b, start, 1)
	}
	const perWrite, writes = 4, 4 * multiplexedAfter
	var pending []byte
	var id, want uint32
	for range writes {
		out := append([]byte(nil), pending...)
		for range perWrite - 1 {
			id++
			out = append(out, frame(id)...)
		}
		id++
		f := frame(id)
		out = append(out, f[:len(f)/2]...)
		pending = f[len(f)/2:]
		if _, err := m.c.Write(out); err != nil {
			t.Fatal(err)
		}
		for want < id-1 {
			want++
			h, rs := m.recv()
			if h.ID != want || len(rs) != 1 || rs[0].Status != proto.StatusOK {
				t.Fatalf("answer %d: id %d with %d results", want, h.ID, len(rs))
			}
		}
	}
	if _, err := m.c.Write(pending); err != nil {
		t.Fatal(err)
	}
	if h, rs := m.recv(); h.ID != id || len(rs) != 1 || rs[0].Status != proto.StatusOK {
		t.Fatalf("last answer: id %d with %d results, want id %d", h.ID, len(rs), id)
	}
	if n := stat(t, single, "loop_multiplexed"); n != 1 {
		t.Errorf("loop_multiplexed = %d after a client sending %d requests a write, want 1", n, perWrite)
	}
	// A multiplexing client answered at once often sends one request: one
	// read in ten carrying two still makes it multiplexed.
	mixed := dial(t, sc)
	for round := range multiplexedAfter {
		for i, n := range []int{2, 1, 1, 1, 1, 1, 1, 1, 1, 1} {
			var out []byte
			for j := range n {
				out = append(out, frame(uint32(1000*round+10*i+j))...)
			}
			if _, err := mixed.c.Write(out); err != nil {
				t.Fatal(err)
			}
			for range n {
				if _, rs := mixed.recv(); len(rs) != 1 || rs[0].Status != proto.StatusOK {
					t.Fatalf("mixed client: %d results", len(rs))
				}
			}
		}
	}
	if n := stat(t, single, "loop_multiplexed"); n != 2 {
		t.Errorf("loop_multiplexed = %d after a client sending two requests on one read in ten, want 2", n)
	}
	// The multiplexed connection is served as any other, and shutdown
	// closes it.
	if r := m.acquire("m-after", tb10, 1, 0); r.Status != proto.StatusOK || r.Decision.Remaining != 9 {
		t.Errorf("acquire on the multiplexed connection: %+v", r)
	}
	if r := single.acquire("single-after", tb10, 1, 0); r.Status != proto.StatusOK {
		t.Errorf("acquire on the loop's connection: %+v", r)
	}
	sc.stop(t)
	m.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if !m.closed() {
		t.Error("the multiplexed connection is open after shutdown")
	}
}

// Ensure an auto loop does not poll for a multiplexed connection: once the
// connection is found multiplexed, a loop that serves it alone sleeps at
// once after each of its batches (loop_polls stays), while a client with
// one request in flight makes it poll.
func TestAuto_multiplexedNotPolled(t *testing.T) {
	single, batch := multiplexedConn(t, Config{Transport: TransportAuto, Loops: 1, LoopSpin: time.Millisecond})
	const batches = 50
	before := stat(t, single, "loop_polls")
	for range batches {
		batch()
	}
	// The STATS request before them came on a connection with one request
	// in flight: the wait after it may poll, once.
	after := stat(t, single, "loop_polls")
	if after-before > 1 {
		t.Errorf("loop_polls rose by %d over %d batches of a multiplexed connection alone, want at most 1", after-before, batches)
	}
	// One request in flight: the loop polls once a request comes within
	// its budget (at most LoopSpin) of the last, which on a loaded host may
	// take a while.
	deadline := time.Now().Add(10 * time.Second)
	for stat(t, single, "loop_polls") == after {
		if time.Now().After(deadline) {
			t.Fatalf("loop_polls stayed at %d for 10 s of requests of a client with one in flight, want polls", after)
		}
		for range 10 {
			if r := single.acquire("single", tb10, 0, 0); r.Status != proto.StatusOK {
				t.Fatalf("acquire: %+v", r)
			}
		}
	}
}

// multiplexedConn starts a server of cfg and returns a connection to it
// with one request in flight (single), and the batch of another that it
// has found multiplexed.
func multiplexedConn(t *testing.T, cfg Config) (single *client, batch func()) {
	t.Helper()
	sc := start(t, cfg)
	single = dial(t, sc)
	batch = twoAWrite(t, dial(t, sc))
	for range multiplexedAfter {
		batch()
	}
	if n := stat(t, single, "loop_multiplexed"); n != 1 {
		t.Fatalf("loop_multiplexed = %d, want 1", n)
	}
	return single, batch
}

// twoAWrite returns a function that sends c two acquires in one write and
// reads their answers: a multiplexing client's batch.
func twoAWrite(t *testing.T, c *client) func() {
	var id uint32
	return func() {
		t.Helper()
		var b []byte
		for range 2 {
			id++
			var start int
			b, start = proto.BeginFrame(b, proto.KindRequest, id)
			b = proto.AppendItem(b, proto.OpAcquire, 0, tb10, 0, 0, fmt.Appendf(nil, "m%d", id))
			b = proto.EndFrame(b, start, 1)
		}
		if _, err := c.c.Write(b); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if _, rs := c.recv(); len(rs) != 1 || rs[0].Status != proto.StatusOK {
				t.Fatalf("answer: %+v", rs)
			}
		}
	}
}

// Ensure an adaptive loop's polling budget follows how long requests take
// to come: towards twice the gap, halving when polling finds nothing, zero
// (sleep at once) under minSpin, and never past the limit.
func TestSpinBudget(t *testing.T) {
	const limit = 50 * time.Microsecond
	us := time.Microsecond
	b := limit
	for range 40 {
		b = spinBudget(b, 5*us, limit, false)
	}
	if b < 9*us || b > 11*us {
		t.Errorf("after requests 5µs apart the budget is %v, want about 10µs", b)
	}
	if got := spinBudget(b, -1, limit, false); got != b/2 {
		t.Errorf("a poll that found nothing took the budget from %v to %v, want half", b, got)
	}
	if got := spinBudget(b, limit, limit, false); got != b/2 {
		t.Errorf("a request %v late took the budget from %v to %v, want half", limit, b, got)
	}
	// On a quiet host, a quarter less.
	if got := spinBudget(b, -1, limit, true); got != b-b/4 {
		t.Errorf("quiet: a poll that found nothing took the budget from %v to %v, want three quarters", b, got)
	}
	if got := spinBudget(b, limit, limit, true); got != b-b/4 {
		t.Errorf("quiet: a request %v late took the budget from %v to %v, want three quarters", limit, b, got)
	}
	if got := spinBudget(b, 5*us, limit, true); got != spinBudget(b, 5*us, limit, false) {
		t.Errorf("quiet: a request 5µs after took the budget to %v, want %v as on a busy host", got, spinBudget(b, 5*us, limit, false))
	}
	q := b
	for range 20 {
		q = spinBudget(q, -1, limit, true)
	}
	if q != 0 {
		t.Errorf("quiet: after twenty empty polls the budget is %v, want 0", q)
	}
	for range 10 {
		b = spinBudget(b, -1, limit, false)
	}
	if b != 0 {
		t.Errorf("after ten empty polls the budget is %v, want 0", b)
	}
	for range 40 {
		b = spinBudget(b, 20*us, limit, false)
	}
	if b < 38*us || b > limit {
		t.Errorf("requests 20µs apart after the loop slept raised the budget to %v, want about 40µs", b)
	}
	for range 40 {
		b = spinBudget(b, limit-us, limit, false)
	}
	if b > limit {
		t.Errorf("budget %v past the limit %v", b, limit)
	}
}

// Ensure a connection closed while its buffers are grown past their first
// size gives all of them back to buffered_bytes, whichever transport
// serves it (a goroutine counted back only the first size), and one the
// auto transport found multiplexed too.
func TestBufferedBytes_givenBackWhenGrown(t *testing.T) {
	for _, tr := range []string{TransportAuto, TransportGoroutines, TransportEpoll} {
		t.Run(tr, func(t *testing.T) {
			sc := start(t, Config{Transport: tr, Loops: 1})
			watch := dial(t, sc)
			idle := stat(t, watch, "buffered_bytes")
			c, err := net.Dial("unix", sc.cfg.RESPSocket)
			if err != nil {
				t.Fatal(err)
			}
			if tr == TransportAuto {
				// Several commands a write: the loop finds it multiplexed.
				for range multiplexedAfter + 1 {
					if _, err := c.Write([]byte("PING\r\nPING\r\n")); err != nil {
						t.Fatal(err)
					}
					if _, err := io.ReadFull(c, make([]byte, 2*len("+PONG\r\n"))); err != nil {
						t.Fatal(err)
					}
				}
			}
			// Part of a command larger than the first buffer, then close.
			arg := fmt.Appendf(nil, "$%d\r\n%s\r\n", resp.MaxBulkLen, bytes.Repeat([]byte("x"), resp.MaxBulkLen))
			part := []byte("*64\r\n$4\r\nECHO\r\n")
			for len(part) < 2*initialBuffer {
				part = append(part, arg...)
			}
			if _, err := c.Write(part); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(10 * time.Second); stat(t, watch, "buffered_bytes") <= idle; {
				if time.Now().After(deadline) {
					t.Fatal("the server's buffers did not grow for a large command")
				}
				runtime.Gosched()
			}
			c.Close()
			for deadline := time.Now().Add(10 * time.Second); stat(t, watch, "connections") > 1; {
				if time.Now().After(deadline) {
					t.Fatal("the closed connection is still served")
				}
				runtime.Gosched()
			}
			if n := stat(t, watch, "buffered_bytes"); n != idle {
				t.Errorf("buffered_bytes = %d after the connection closed, want %d as before it", n, idle)
			}
			if tr == TransportAuto {
				if n := stat(t, watch, "loop_multiplexed"); n != 1 {
					t.Errorf("loop_multiplexed = %d, want 1", n)
				}
			}
		})
	}
}

// Ensure each transport's loops poll for their own default at most, and
// that a negative LoopSpin (sluiced's --loop-spin 0) stays no polling.
func TestLoopSpin_defaults(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want time.Duration
	}{
		{Config{}, DefaultAutoLoopSpin},
		{Config{Transport: TransportAuto}, DefaultAutoLoopSpin},
		{Config{Transport: TransportEpoll}, DefaultLoopSpin},
		{Config{Transport: TransportAuto, LoopSpin: 30 * time.Microsecond}, 30 * time.Microsecond},
		{Config{Transport: TransportAuto, LoopSpin: -1}, -1},
	} {
		if got := c.cfg.withDefaults(); got.LoopSpin != c.want || (c.cfg.Transport == "" && got.Transport != TransportAuto) {
			t.Errorf("%+v: transport %s, loop spin %v, want auto's default transport and %v", c.cfg.Transport, got.Transport, got.LoopSpin, c.want)
		}
	}
}
