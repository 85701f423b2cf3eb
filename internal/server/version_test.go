package server

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/proto"
)

// sendVersion writes one request frame of protocol version v holding the
// operations ops appends, and returns the response's header and results.
func (c *client) sendVersion(v uint8, n int, ops func(b []byte) []byte) (proto.Header, []proto.Result) {
	c.t.Helper()
	c.next++
	b, start := proto.BeginFrameVersion(nil, v, proto.KindRequest, c.next)
	if _, err := c.c.Write(proto.EndFrame(ops(b), start, n)); err != nil {
		c.t.Fatal(err)
	}
	return c.recv()
}

// Each frame is answered in its version, every version from MinVersion on.
func TestServer_versions(t *testing.T) {
	sc := start(t, Config{})
	c := dial(t, sc)
	for v := uint8(proto.MinVersion); v <= proto.Version; v++ {
		h, rs := c.sendVersion(v, 2, func(b []byte) []byte {
			return proto.AppendItem(proto.AppendPing(b), proto.OpAcquire, 0, tb10, 1, 0, []byte("k"))
		})
		if h.Version != v || len(rs) != 2 || rs[0].Code != proto.OpPing || rs[1].Status != proto.StatusOK {
			t.Errorf("version %d: answered in version %d: %+v", v, h.Version, rs)
		}
	}
}

// In a frame of version 1 or 2, LEASE and RELEASE are unknown opcodes and
// the algorithms of version 3 unknown algorithms: the codec refuses them,
// and the connection closes.
func TestServer_version3InOlderFrames(t *testing.T) {
	sc := start(t, Config{})
	conc := proto.ConcurrencyLimit(10, 30*time.Second)
	for _, tc := range []struct {
		name string
		op   func(b []byte) []byte
		want proto.Status
	}{
		{"LEASE", func(b []byte) []byte { return proto.AppendLease(b, 0, conc, []byte("k")) }, proto.StatusUnknownOpcode},
		{"RELEASE", func(b []byte) []byte { return proto.AppendRelease(b, 0, conc, 1, []byte("k")) }, proto.StatusUnknownOpcode},
		{"sliding_log", func(b []byte) []byte {
			return proto.AppendItem(b, proto.OpAcquire, 0, proto.SlidingLogLimit(5, time.Second), 1, 0, []byte("k"))
		}, proto.StatusInvalidLimit},
	} {
		for _, v := range []uint8{1, 2} {
			c := dial(t, sc)
			h, rs := c.sendVersion(v, 1, tc.op)
			if h.Version != v || len(rs) != 1 || rs[0].Status != tc.want {
				t.Errorf("%s in version %d: version %d, %+v", tc.name, v, h.Version, rs)
			}
			if !c.closed() {
				t.Errorf("%s in version %d: connection left open", tc.name, v)
			}
		}
	}
}

// LEASE takes a concurrency limit's slots, RELEASE gives one back (from any
// connection), and a connection that closes gives back the leases it
// still holds; the other operations refuse a concurrency limit.
func TestServer_leases(t *testing.T) {
	sc := start(t, Config{})
	conc := proto.ConcurrencyLimit(2, 30*time.Second)
	lease := func(c *client) proto.Result {
		_, rs := c.sendVersion(3, 1, func(b []byte) []byte { return proto.AppendLease(b, 0, conc, []byte("jobs")) })
		return rs[0]
	}
	release := func(c *client, id uint64) proto.Result {
		_, rs := c.sendVersion(3, 1, func(b []byte) []byte { return proto.AppendRelease(b, 0, conc, id, []byte("jobs")) })
		return rs[0]
	}
	holder, other := dial(t, sc), dial(t, sc)
	a := lease(holder)
	if a.Status != proto.StatusOK || !a.Decision.Allowed || a.Lease == 0 || a.Decision.Remaining != 1 {
		t.Fatalf("first lease: %+v", a)
	}
	if b := lease(holder); !b.Decision.Allowed || b.Lease == 0 || b.Lease == a.Lease {
		t.Fatalf("second lease: %+v", b)
	}
	if r := lease(other); r.Status != proto.StatusOK || r.Decision.Allowed || r.Lease != 0 || r.Decision.RetryAfter <= 0 {
		t.Errorf("third lease: %+v, want denied", r)
	}
	if r := release(other, a.Lease); r.Status != proto.StatusOK || !r.Released || r.Decision.Remaining != 1 {
		t.Errorf("release from another connection: %+v", r)
	}
	if r := release(other, a.Lease); r.Status != proto.StatusOK || r.Released {
		t.Errorf("second release of one lease: %+v", r)
	}
	if r := holder.acquire("jobs", conc, 1, 0); r.Status != proto.StatusInvalidLimit ||
		!strings.Contains(string(r.Message), "LEASE") {
		t.Errorf("ACQUIRE of a concurrency limit: %+v", r)
	}
	// The holder's connection closes with one lease held: it comes back.
	holder.c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, rs := other.sendVersion(3, 1, func(b []byte) []byte {
			return proto.AppendItem(b, proto.OpPeek, 0, conc, 0, 0, []byte("jobs"))
		})
		if rs[0].Status != proto.StatusOK {
			t.Fatalf("PEEK of a concurrency limit: %+v", rs[0])
		}
		if rs[0].Decision.Remaining == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the closed connection's lease was not given back")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The algorithms of version 3 are served on every path: ACQUIRE, PEEK,
// REFUND and a MULTI of a sliding_log and a window_counters limit.
func TestServer_version3Algorithms(t *testing.T) {
	sc := start(t, Config{})
	c := dial(t, sc)
	log := proto.SlidingLogLimit(3, time.Minute)
	counters := proto.WindowCountersLimit(10, time.Hour, 60, true)
	for i := range 4 {
		_, rs := c.sendVersion(3, 1, func(b []byte) []byte {
			return proto.AppendMulti(b, 0, 0, []proto.MultiItem{{Limit: log, Cost: 1, Key: []byte("k")}, {Limit: counters, Cost: 1, Key: []byte("k")}})
		})
		if rs[0].Status != proto.StatusOK || rs[0].Allowed != (i < 3) {
			t.Errorf("MULTI %d: %+v", i, rs[0])
		}
	}
	_, rs := c.sendVersion(3, 2, func(b []byte) []byte {
		b = proto.AppendItem(b, proto.OpRefund, 0, log, 1, 0, []byte("k"))
		return proto.AppendItem(b, proto.OpPeek, 0, counters, 0, 0, []byte("k"))
	})
	if rs[0].Status != proto.StatusOK || rs[0].Decision.Remaining != 1 {
		t.Errorf("REFUND of the log: %+v", rs[0])
	}
	if rs[1].Status != proto.StatusOK || rs[1].Decision.Remaining != 7 {
		t.Errorf("PEEK of the counters (3 admitted): %+v", rs[1])
	}
}

// A connection holding a lease does not idle out before the lease expires:
// its client may be working quietly, and closing the connection would give
// the lease back. Holding none, it idles out as any connection does.
func TestServer_leaseOutlivesIdleTimeout(t *testing.T) {
	t.Parallel() // it waits out a lease
	// A lease long beside the idle timeout, so that a close at the idle
	// timeout and one at the lease's expiry stay seconds apart on a busy
	// host.
	const idle, leaseTime = 100 * time.Millisecond, 3 * time.Second
	sc := start(t, Config{IdleTimeout: idle})
	conc := proto.ConcurrencyLimit(1, leaseTime)
	lease := func(c *client, key string) proto.Result {
		_, rs := c.sendVersion(3, 1, func(b []byte) []byte { return proto.AppendLease(b, 0, conc, []byte(key)) })
		return rs[0]
	}
	// closedAfter returns how long c's connection stayed open.
	closedAfter := func(c *client, since time.Time) time.Duration {
		c.c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := c.c.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
			t.Fatalf("read on an idle connection: %d, %v; want it closed", n, err)
		}
		return time.Since(since)
	}

	holder := dial(t, sc)
	a := lease(holder, "quiet")
	if !a.Decision.Allowed {
		t.Fatalf("lease: %+v", a)
	}
	time.Sleep(4 * idle)
	_, rs := holder.sendVersion(3, 1, func(b []byte) []byte { return proto.AppendRelease(b, 0, conc, a.Lease, []byte("quiet")) })
	if rs[0].Status != proto.StatusOK || !rs[0].Released {
		t.Fatalf("release after %v idle: %+v", 4*idle, rs[0])
	}
	released := time.Now()
	if d := closedAfter(holder, released); d > leaseTime/2 {
		t.Errorf("a connection that gave its lease back stayed open %v idle, want about %v", d, idle)
	}

	// A lease never released keeps its connection until it expires.
	keeper := dial(t, sc)
	if r := lease(keeper, "kept"); !r.Decision.Allowed {
		t.Fatalf("lease: %+v", r)
	}
	if d := closedAfter(keeper, time.Now()); d < leaseTime-2*idle {
		t.Errorf("a connection holding a lease of %v idled out after %v", leaseTime, d)
	}
}

// A connection holds at most maxLeasesPerConn leases: one more is refused
// with Busy (nothing taken), until leases expire or are released.
func TestServer_leasesPerConnection(t *testing.T) {
	sc := start(t, Config{})
	c := dial(t, sc)
	const leaseTime = 200 * time.Millisecond
	conc := proto.ConcurrencyLimit(1024, leaseTime)
	for f := range maxLeasesPerConn / 256 {
		_, rs := c.sendVersion(3, 256, func(b []byte) []byte {
			for i := range 256 {
				b = proto.AppendLease(b, 0, conc, fmt.Appendf(nil, "k%d", (f*256+i)%4))
			}
			return b
		})
		for _, r := range rs {
			if r.Status != proto.StatusOK || r.Lease == 0 {
				t.Fatalf("lease %d: %+v", f, r)
			}
		}
	}
	lease := func() proto.Result {
		_, rs := c.sendVersion(3, 1, func(b []byte) []byte { return proto.AppendLease(b, 0, conc, []byte("other")) })
		return rs[0]
	}
	if r := lease(); r.Status != proto.StatusBusy {
		t.Errorf("lease %d on one connection: %+v, want Busy", maxLeasesPerConn+1, r)
	}
	sc.clock.Add(int64(leaseTime)) // the sidecar's clock
	if r := lease(); r.Status != proto.StatusOK || r.Lease == 0 {
		t.Errorf("once the leases expired: %+v", r)
	}
}

// A graceful stop closes every connection, but a connection closed because
// the sidecar stops keeps its leases: its client is still running what it
// leased. The next sidecar on the file sees them held.
func TestServer_leasesSurviveAStop(t *testing.T) {
	sc := start(t, Config{})
	c := dial(t, sc)
	conc := proto.ConcurrencyLimit(3, time.Hour)
	_, rs := c.sendVersion(3, 2, func(b []byte) []byte {
		return proto.AppendLease(proto.AppendLease(b, 0, conc, []byte("jobs")), 0, conc, []byte("jobs"))
	})
	if !rs[0].Decision.Allowed || !rs[1].Decision.Allowed {
		t.Fatalf("leases: %+v", rs)
	}
	sc.stop(t)
	cfg := sc.cfg
	cfg.Now, cfg.Ready = sc.clock.Load, nil
	c2 := dial(t, start(t, cfg))
	_, rs = c2.sendVersion(3, 1, func(b []byte) []byte { return proto.AppendItem(b, proto.OpPeek, 0, conc, 0, 0, []byte("jobs")) })
	if rs[0].Status != proto.StatusOK || rs[0].Decision.Remaining != 1 {
		t.Errorf("after a graceful stop: %+v, want 1 slot free (two leases kept)", rs[0])
	}
}
