package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clients/go/sluice"
)

// A pipeline's requests are decided one by one, in order, and travel in
// one write.
func TestPipeline_oneWriteInOrder(t *testing.T) {
	sc := startSidecar(t)
	var writes, dials atomic.Int64
	c := dial(t, sc.cfg.SocketPath, sluice.WithDial(countingDial(&writes, &dials)))
	cx := ctx(t)
	if err := c.Ping(cx); err != nil { // connect first: only the batch is counted below
		t.Fatal(err)
	}
	before := writes.Load()
	p := c.Pipeline()
	for range 15 {
		p.Acquire(tb10, "batch", 1)
	}
	p.Peek(tb10, "batch")
	if p.Len() != 16 {
		t.Fatalf("Len = %d, want 16", p.Len())
	}
	res, err := p.Exec(cx)
	if err != nil {
		t.Fatal(err)
	}
	if got := writes.Load() - before; got != 1 {
		t.Errorf("16 requests took %d writes, want 1", got)
	}
	for i, r := range res[:15] {
		if r.Err != nil || r.Decision.Allowed != (i < 10) {
			t.Errorf("acquire %d: allowed %v, err %v; want allowed only for the first 10", i, r.Decision.Allowed, r.Err)
		}
	}
	if peek := res[15]; peek.Err != nil || peek.Decision.Allowed || peek.Decision.Remaining != 0 {
		t.Errorf("peek after the batch: %+v", peek)
	}
	if p.Len() != 0 {
		t.Fatalf("Exec left %d requests queued", p.Len())
	}
	// Reuse: a refund and an acquire on a fresh key.
	p.Refund(tb10, "batch", 2)
	p.Acquire(tb10, "other", 3)
	res, err = p.Exec(cx)
	if err != nil || len(res) != 2 || res[0].Decision.Remaining != 2 || res[1].Decision.Remaining != 7 {
		t.Fatalf("reused pipeline: %+v, %v", res, err)
	}
}

// A request the client refuses does not keep the others from being sent.
func TestPipeline_refusedItem(t *testing.T) {
	sc := startSidecar(t)
	c := dial(t, sc.cfg.SocketPath)
	p := c.Pipeline()
	p.Acquire(tb10, "a", 1)
	p.Acquire(tb10, "", 1)
	p.Acquire(sluice.Limit{}, "b", 1)
	p.Acquire(tb10, "a", 1)
	res, err := p.Exec(ctx(t))
	if !errors.Is(err, sluice.ErrInvalidKey) {
		t.Fatalf("Exec error %v, want the first failure, ErrInvalidKey", err)
	}
	if res[0].Err != nil || res[0].Decision.Remaining != 9 || res[3].Err != nil || res[3].Decision.Remaining != 8 {
		t.Errorf("the valid requests: %+v, %+v", res[0], res[3])
	}
	if !errors.Is(res[1].Err, sluice.ErrInvalidKey) || !errors.Is(res[2].Err, sluice.ErrInvalidLimit) {
		t.Errorf("the refused requests: %v, %v", res[1].Err, res[2].Err)
	}
	// The server's own refusals come back per request too.
	p.Acquire(tb10, "a", -1)
	p.Acquire(tb10, "a", 1)
	res, _ = p.Exec(ctx(t))
	var se *sluice.StatusError
	if !errors.As(res[0].Err, &se) || res[1].Err != nil {
		t.Errorf("negative cost then a valid acquire: %v, %v", res[0].Err, res[1].Err)
	}
}

// A sidecar that hangs up: every request gets the failure policy's answer.
func TestPipeline_unavailable(t *testing.T) {
	path := fakeSidecar(t, func(*fakeConn) {}) // accepts, then closes
	for _, tc := range []struct {
		policy  sluice.FailurePolicy
		allowed bool
		err     bool
	}{{sluice.FailError, false, true}, {sluice.FailOpen, true, false}, {sluice.FailClosed, false, false}} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			c := dial(t, path, sluice.WithFailurePolicy(tc.policy))
			p := c.Pipeline()
			p.Acquire(tb10, "a", 1)
			p.Acquire(tb10, "b", 1)
			res, err := p.Exec(ctx(t))
			if (err != nil) != tc.err {
				t.Fatalf("Exec error %v", err)
			}
			for i, r := range res {
				if (r.Err != nil) != tc.err || r.Decision.Allowed != tc.allowed || (!tc.err && !r.Decision.Degraded) {
					t.Errorf("request %d: %+v", i, r)
				}
				if tc.err && !errors.Is(r.Err, sluice.ErrUnavailable) {
					t.Errorf("request %d: %v, want ErrUnavailable", i, r.Err)
				}
			}
		})
	}
}

// A sidecar that never answers: the batch ends at the client's timeout
// and every request says so.
func TestPipeline_timeout(t *testing.T) {
	path := fakeSidecar(t, func(fc *fakeConn) {
		fc.wait() // reads everything, answers nothing
	})
	c := dial(t, path, sluice.WithTimeout(50*time.Millisecond), sluice.WithFailurePolicy(sluice.FailError))
	p := c.Pipeline()
	for i := range 5 {
		p.Acquire(tb10, fmt.Sprint("k", i), 1)
	}
	began := time.Now()
	res, err := p.Exec(context.Background())
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("Exec took %v with a 50ms timeout", took)
	}
	if !errors.Is(err, sluice.ErrUnavailable) {
		t.Fatalf("Exec error %v, want ErrUnavailable", err)
	}
	for i, r := range res {
		if !errors.Is(r.Err, context.DeadlineExceeded) {
			t.Errorf("request %d: %v, want a timeout", i, r.Err)
		}
	}
}

func BenchmarkPipeline(b *testing.B) {
	sc := startSidecar(b)
	c := dial(b, sc.cfg.SocketPath, sluice.WithFailurePolicy(sluice.FailError)) // an outage must fail the benchmark, not allow
	cx := context.Background()
	p := c.Pipeline()
	const depth = 16
	b.ReportAllocs()
	for b.Loop() {
		for range depth {
			p.Acquire(benchLimit, "bench:pipeline", 1)
		}
		if _, err := p.Exec(cx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*depth), "ns/decision")
}

// Pipelines from many goroutines share one connection: every batch is
// decided in one piece (its allowed requests are a prefix of it), and
// together they admit exactly the limit.
func TestPipeline_concurrent(t *testing.T) {
	sc := startSidecar(t)
	c := dial(t, sc.cfg.SocketPath)
	cx := ctx(t)
	l := sluice.TokenBucket(500, time.Hour, 1)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			p := c.Pipeline()
			for range 10 {
				for range 16 {
					p.Acquire(l, "shared", 1)
				}
				res, err := p.Exec(cx)
				if err != nil {
					t.Error(err)
					return
				}
				denied := false
				for i, r := range res {
					if r.Decision.Allowed {
						if denied {
							t.Errorf("request %d of a batch allowed after a denial", i)
						}
						admitted.Add(1)
					} else {
						denied = true
					}
				}
			}
		})
	}
	wg.Wait()
	if admitted.Load() != 500 {
		t.Errorf("%d of 1280 admitted, want 500", admitted.Load())
	}
}
