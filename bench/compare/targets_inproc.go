package compare

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/shm"
	xrate "golang.org/x/time/rate"
)

// engineTarget calls Sluice's engine in-process on a state file like the
// sidecar's: the floor of the socket path, what a decision costs once it
// has arrived.
type engineTarget struct {
	dir    string
	slots  uint64
	limits Limits
	mu     sync.Mutex
	tb     *shm.Table
	e      *engine.Engine
}

func (t *engineTarget) Name() string            { return "sluice engine" }
func (t *engineTarget) Family() string          { return "in-process" }
func (t *engineTarget) Supports(LimitKind) bool { return true }
func (t *engineTarget) Multiplexed() bool       { return true }
func (t *engineTarget) inProcess()              {}

func (t *engineTarget) Reset(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.closeLocked(); err != nil {
		return err
	}
	path := filepath.Join(t.dir, "engine.state")
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return err
	}
	tb, err := shm.Create(path, shm.Options{SlotCount: t.slots}, 0)
	if err != nil {
		return err
	}
	t.tb, t.e = tb, engine.New(tb)
	return nil
}

func (t *engineTarget) closeLocked() error {
	if t.tb == nil {
		return nil
	}
	err := t.tb.Close()
	t.tb, t.e = nil, nil
	return err
}

func (t *engineTarget) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closeLocked()
}

func (t *engineTarget) limit(k LimitKind) (engine.Limit, error) {
	l := t.limits
	switch k {
	case TokenBucket:
		return engine.NewLimit(bucket.Limit{Algorithm: bucket.TokenBucket, Max: l.TBMax, RefillTime: int64(l.TBRefill), RefillAmount: l.TBAmount})
	case GCRA:
		return engine.NewLimit(bucket.Limit{Algorithm: bucket.GCRA, Burst: l.GCRABurst, Count: l.GCRACount, Period: int64(l.GCRAPeriod)})
	case FixedWindow:
		return engine.NewLimit(bucket.Limit{Algorithm: bucket.FixedWindow, Max: l.FWLimit, Window: int64(l.FWWindow)})
	}
	return engine.Limit{}, fmt.Errorf("engine: no limit %q", k)
}

func (t *engineTarget) Dial(ctx context.Context, k LimitKind) (Conn, error) {
	l, err := t.limit(k)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.e == nil {
		return nil, fmt.Errorf("engine: Dial before Reset")
	}
	return &engineConn{e: t.e, l: l}, nil
}

type engineConn struct {
	e *engine.Engine
	l engine.Limit
	d bucket.Decision
}

func (c *engineConn) Do(ctx context.Context, keys []string) (int, error) {
	n := 0
	for _, k := range keys {
		// The engine only reads the key: view the string's bytes.
		key := unsafe.Slice(unsafe.StringData(k), len(k))
		if err := c.e.Acquire(&c.d, key, &c.l, 1, engine.At(time.Now().UnixNano()), 0); err != nil {
			return n, err
		}
		n += b2i(c.d.Allowed)
	}
	return n, nil
}

func (c *engineConn) Close() error { return nil }

// xrateTarget is what a Go service would write without a sidecar: one
// golang.org/x/time/rate limiter per key in a map behind a mutex. Its
// continuous refill is the same limit as the token bucket's and the
// GCRA's on average (rate = amount per refill period; burst = capacity).
type xrateTarget struct {
	limits Limits
	mu     sync.Mutex
	m      map[string]*xrate.Limiter
}

func (t *xrateTarget) Name() string   { return "x/time/rate map" }
func (t *xrateTarget) Family() string { return "in-process" }
func (t *xrateTarget) Supports(k LimitKind) bool {
	return k == TokenBucket || k == GCRA
}
func (t *xrateTarget) Multiplexed() bool { return true }
func (t *xrateTarget) inProcess()        {}
func (t *xrateTarget) Close() error      { return nil }

func (t *xrateTarget) Reset(ctx context.Context) error {
	t.mu.Lock()
	t.m = make(map[string]*xrate.Limiter)
	t.mu.Unlock()
	return nil
}

func (t *xrateTarget) Dial(ctx context.Context, k LimitKind) (Conn, error) {
	l := t.limits
	var r xrate.Limit
	var burst int
	switch k {
	case TokenBucket:
		r, burst = xrate.Every(l.TBRefill/time.Duration(l.TBAmount)), int(l.TBMax)
	case GCRA:
		r, burst = xrate.Every(l.GCRAPeriod/time.Duration(l.GCRACount)), int(l.GCRABurst+1)
	default:
		return nil, fmt.Errorf("x/time/rate: no limit %q", k)
	}
	return &xrateConn{t: t, r: r, burst: burst}, nil
}

type xrateConn struct {
	t     *xrateTarget
	r     xrate.Limit
	burst int
}

func (c *xrateConn) Do(ctx context.Context, keys []string) (int, error) {
	n := 0
	for _, k := range keys {
		now := time.Now()
		c.t.mu.Lock()
		lim := c.t.m[k]
		if lim == nil {
			lim = xrate.NewLimiter(c.r, c.burst)
			c.t.m[k] = lim
		}
		ok := lim.AllowN(now, 1)
		c.t.mu.Unlock()
		n += b2i(ok)
	}
	return n, nil
}

func (c *xrateConn) Close() error { return nil }
