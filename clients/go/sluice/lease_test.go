package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clients/go/sluice"
)

// leases returns the slots of key's bucket under l that are held, as c's
// Peek sees them.
func leases(t *testing.T, c *sluice.Client, l sluice.Limit, key string) int64 {
	t.Helper()
	d, err := c.Peek(ctx(t), l, key)
	if err != nil {
		t.Fatal(err)
	}
	return d.Limit - d.Remaining
}

func TestClient_lease(t *testing.T) {
	sc := startSidecar(t)
	c := dial(t, sc.cfg.SocketPath, sluice.WithFailurePolicy(sluice.FailError))
	other := dial(t, sc.cfg.SocketPath, sluice.WithFailurePolicy(sluice.FailError))
	cx := ctx(t)
	l := sluice.Concurrency(2, time.Minute)

	a, err := c.Lease(cx, l, "jobs")
	if err != nil || !a.Allowed || a.ID == 0 || a.Remaining != 1 || a.Limit != 2 || a.ResetAfter != time.Minute || a.Degraded {
		t.Fatalf("first lease: %+v, %v", a, err)
	}
	b, err := c.Lease(cx, l, "jobs")
	if err != nil || !b.Allowed || b.ID == 0 || b.ID == a.ID || b.Remaining != 0 {
		t.Fatalf("second lease: %+v, %v", b, err)
	}
	// Every slot is held: denied until the earliest lease expires.
	d, err := other.Lease(cx, l, "jobs")
	if err != nil || d.Allowed || d.ID != 0 || d.Remaining != 0 || d.RetryAfter != time.Minute {
		t.Fatalf("third lease: %+v, %v", d, err)
	}
	if released, err := d.Release(); released || err != nil {
		t.Errorf("release of a denied lease: %v, %v", released, err)
	}
	if n := leases(t, other, l, "jobs"); n != 2 {
		t.Errorf("%d leases held, want 2", n)
	}
	if released, err := a.Release(); !released || err != nil {
		t.Errorf("release: %v, %v", released, err)
	}
	if released, err := a.Release(); released || err != nil {
		t.Errorf("second release of one lease: %v, %v", released, err)
	}
	// Any client may release a lease, by its id; under another key it is
	// not held.
	if released, err := other.Release(cx, l, "other", b.ID); released || err != nil {
		t.Errorf("release under another key: %v, %v", released, err)
	}
	if released, err := other.Release(cx, l, "jobs", b.ID); !released || err != nil {
		t.Errorf("release by another client: %v, %v", released, err)
	}
	if released, err := other.Release(cx, l, "jobs", 0); released || err != nil {
		t.Errorf("release of lease 0: %v, %v", released, err)
	}
	if n := leases(t, other, l, "jobs"); n != 0 {
		t.Errorf("%d leases held after releasing both, want 0", n)
	}

	// A lease expires at its lease time.
	e, err := c.Lease(cx, l, "jobs")
	if err != nil || !e.Allowed {
		t.Fatalf("lease: %+v, %v", e, err)
	}
	sc.clock.Add(int64(time.Minute))
	if n := leases(t, other, l, "jobs"); n != 0 {
		t.Errorf("%d leases held a lease time later, want 0", n)
	}
	if released, err := e.Release(); released || err != nil {
		t.Errorf("release of an expired lease: %v, %v", released, err)
	}

	// Closing the client gives its leases back.
	for range 2 {
		if ls, err := c.Lease(cx, l, "closed"); err != nil || !ls.Allowed {
			t.Fatalf("lease: %+v, %v", ls, err)
		}
	}
	c.Close()
	eventually(t, func() error {
		if n := leases(t, other, l, "closed"); n != 0 {
			return fmt.Errorf("%d leases held after their client closed", n)
		}
		return nil
	})
}

// Leases take concurrency limits, and concurrency limits take leases.
func TestClient_leaseErrors(t *testing.T) {
	sc := startSidecar(t)
	c := dial(t, sc.cfg.SocketPath, sluice.WithFailurePolicy(sluice.FailError))
	cx := ctx(t)
	conc := sluice.Concurrency(2, time.Minute)
	for _, tc := range []struct {
		what string
		err  error
		want error
	}{
		{"Lease of a token bucket", second(c.Lease(cx, tb10, "k")), sluice.ErrInvalidLimit},
		{"Release of a token bucket", second(c.Release(cx, tb10, "k", 1)), sluice.ErrInvalidLimit},
		{"Lease of an invalid concurrency limit", second(c.Lease(cx, sluice.Concurrency(0, time.Minute), "k")), sluice.ErrInvalidLimit},
		{"Acquire of a concurrency limit", second(c.Acquire(cx, conc, "k", 1)), sluice.ErrInvalidLimit},
		{"Refund of a concurrency limit", second(c.Refund(cx, conc, "k", 1)), sluice.ErrInvalidLimit},
		{"Multi of a concurrency limit", third(c.Multi(cx, []sluice.Item{{Limit: conc, Key: "k", Cost: 1}})), sluice.ErrInvalidLimit},
		{"Lease of an empty key", second(c.Lease(cx, conc, "")), sluice.ErrInvalidKey},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.what, tc.err, tc.want)
		}
	}
	// The connection carried on.
	if ls, err := c.Lease(cx, conc, "k"); err != nil || !ls.Allowed {
		t.Errorf("lease after the errors: %+v, %v", ls, err)
	}
}

// Without a sidecar the failure policy decides a lease; there is no slot
// to release.
func TestClient_leaseUnavailable(t *testing.T) {
	path := fakeSidecar(t, func(*fakeConn) {}) // accepts, then closes
	l := sluice.Concurrency(2, time.Minute)
	for _, tc := range []struct {
		policy  sluice.FailurePolicy
		allowed bool
	}{{sluice.FailOpen, true}, {sluice.FailClosed, false}, {sluice.FailError, false}} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			c := dial(t, path, sluice.WithFailurePolicy(tc.policy))
			ls, err := c.Lease(ctx(t), l, "jobs")
			if tc.policy == sluice.FailError {
				if !errors.Is(err, sluice.ErrUnavailable) || ls.Allowed {
					t.Errorf("Lease: %+v, %v; want ErrUnavailable", ls, err)
				}
				return
			}
			if err != nil || ls.Allowed != tc.allowed || !ls.Degraded || ls.ID != 0 {
				t.Fatalf("Lease: %+v, %v", ls, err)
			}
			if released, err := ls.Release(); released || err != nil {
				t.Errorf("release of a degraded lease: %v, %v", released, err)
			}
			if c.Degraded() != 1 {
				t.Errorf("Degraded() = %d, want 1", c.Degraded())
			}
			// The policy does not apply to Release.
			if _, err := c.Release(ctx(t), l, "jobs", 7); !errors.Is(err, sluice.ErrUnavailable) {
				t.Errorf("Release of a lease id: %v, want ErrUnavailable", err)
			}
		})
	}
}

// holdProxy forwards connections to the socket at target; while hold is
// set it keeps the sidecar's answers back. It returns its own socket.
func holdProxy(t *testing.T, target string, hold *atomic.Bool) string {
	t.Helper()
	path := serveUnix(t, "proxy", func(nc net.Conn, wg *sync.WaitGroup, track func(...net.Conn)) {
		sc, err := net.Dial("unix", target)
		if err != nil {
			nc.Close()
			return
		}
		track(nc, sc)
		wg.Go(func() { io.Copy(sc, nc); sc.Close() })
		wg.Go(func() {
			defer nc.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := sc.Read(buf)
				for hold.Load() {
					time.Sleep(time.Millisecond)
				}
				if n > 0 {
					if _, err := nc.Write(buf[:n]); err != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		})
	})
	t.Cleanup(func() { hold.Store(false) }) // runs first: nothing held back while the proxy closes
	return path
}

// A LEASE whose caller gave up before its answer came (its context ended,
// or the client's timeout passed) would hold a slot nobody can release
// until it expires: the client gives it back when the answer comes.
func TestClient_leaseAbandoned(t *testing.T) {
	sc := startSidecar(t)
	other := dial(t, sc.cfg.SocketPath, sluice.WithFailurePolicy(sluice.FailError))
	l := sluice.Concurrency(1, time.Hour)
	var hold atomic.Bool
	proxy := holdProxy(t, sc.cfg.SocketPath, &hold)
	for _, tc := range []struct {
		what    string
		timeout time.Duration // the client's
		ctx     time.Duration // the call's
		policy  sluice.FailurePolicy
	}{
		{"context", 10 * time.Second, 50 * time.Millisecond, sluice.FailError},
		{"client timeout", 50 * time.Millisecond, 10 * time.Second, sluice.FailOpen},
	} {
		t.Run(tc.what, func(t *testing.T) {
			c := dial(t, proxy, sluice.WithTimeout(tc.timeout), sluice.WithFailurePolicy(tc.policy))
			if err := c.Ping(ctx(t)); err != nil {
				t.Fatal(err)
			}
			key := "abandoned:" + tc.what
			hold.Store(true)
			cx, cancel := context.WithTimeout(context.Background(), tc.ctx)
			ls, err := c.Lease(cx, l, key)
			cancel()
			switch {
			case tc.policy == sluice.FailError && !errors.Is(err, context.DeadlineExceeded):
				t.Fatalf("Lease with a held answer: %+v, %v; want the context's deadline", ls, err)
			case tc.policy == sluice.FailOpen && (err != nil || !ls.Allowed || !ls.Degraded || ls.ID != 0):
				t.Fatalf("Lease with a held answer: %+v, %v; want the failure policy's", ls, err)
			}
			// The sidecar granted it: the slot is held, by nobody.
			if n := leases(t, other, l, key); n != 1 {
				t.Fatalf("%d leases held, want the abandoned one", n)
			}
			hold.Store(false)
			eventually(t, func() error {
				if n := leases(t, other, l, key); n != 0 {
					return fmt.Errorf("the abandoned lease is still held")
				}
				return nil
			})
			// The client carries on.
			ls, err = c.Lease(ctx(t), l, key)
			if err != nil || !ls.Allowed || ls.ID == 0 {
				t.Fatalf("lease after: %+v, %v", ls, err)
			}
			if released, err := ls.Release(); !released || err != nil {
				t.Errorf("release after: %v, %v", released, err)
			}
		})
	}
}

func TestPipeline_lease(t *testing.T) {
	sc := startSidecar(t)
	c := dial(t, sc.cfg.SocketPath, sluice.WithFailurePolicy(sluice.FailError))
	l := sluice.Concurrency(2, time.Minute)
	p := c.Pipeline()
	for range 3 {
		p.Lease(l, "p")
	}
	p.Release(l, "p", 0)
	res, err := p.Exec(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for i, allowed := range []bool{true, true, false} {
		r := res[i]
		if r.Err != nil || r.Decision.Allowed != allowed || r.Lease.Allowed != allowed || (r.Lease.ID != 0) != allowed {
			t.Errorf("lease %d: %+v", i, r)
		}
	}
	if r := res[3]; r.Err != nil || r.Released {
		t.Errorf("release of lease 0: %+v", r)
	}
	first := res[0].Lease
	if released, err := res[1].Lease.Release(); !released || err != nil {
		t.Errorf("Result.Lease.Release: %v, %v", released, err)
	}
	p.Release(l, "p", first.ID)
	p.Release(l, "p", first.ID)
	p.Lease(l, "p")
	res, err = p.Exec(ctx(t))
	if err != nil || !res[0].Released || res[1].Released || !res[2].Lease.Allowed {
		t.Errorf("release, release again, lease: %+v, %v", res, err)
	}
	if n := leases(t, c, l, "p"); n != 1 {
		t.Errorf("%d leases held, want 1", n)
	}
	// The failure policy applies to leases, not to releases.
	fo := dialGone(t)
	p = fo.Pipeline()
	p.Lease(l, "p")
	p.Release(l, "p", 9)
	res, err = p.Exec(ctx(t))
	if r := res[0]; r.Err != nil || !r.Decision.Allowed || !r.Decision.Degraded || !r.Lease.Degraded || r.Lease.ID != 0 {
		t.Errorf("lease without a sidecar: %+v", r)
	}
	if r := res[1]; !errors.Is(r.Err, sluice.ErrUnavailable) || !errors.Is(err, sluice.ErrUnavailable) {
		t.Errorf("release without a sidecar: %+v; Exec: %v", r, err)
	}
}
