package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/global"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/proto"
)

// Global limits: a named limit of scope global is decided in Redis (exact
// mode) or from leases of its tokens (leased mode), and by its outage
// policy while Redis is unavailable. Package global does the work; this
// file routes a request to it.

var (
	// errNoGlobal answers a request on a global limit when the sidecar
	// has no Redis to decide it in.
	errNoGlobal = errors.New("this sidecar decides no global limits: start it with --global-redis")
	// errGlobalAt answers a request on a global limit that brings its own
	// time: Redis's clock is the only clock of a global limit.
	errGlobalAt = errors.New("a global limit is decided at Redis's clock: a request time (AT) is refused")
	// errGlobalMulti answers a MULTI naming a global limit.
	errGlobalMulti = errors.New("a MULTI cannot include a global limit")
)

// globalLimits decides the requests of global limits.
type globalLimits struct {
	store    *global.Store
	fallback *global.Fallback
	timeout  time.Duration

	mu     sync.Mutex
	leases map[leaseOptions]*global.Leases
}

// leaseOptions are the lease settings of a limit: limits with the same
// ones share a global.Leases.
type leaseOptions struct {
	size int64 // 0: auto
	ttl  time.Duration
}

// newGlobalLimits connects to Redis as o says.
func newGlobalLimits(o global.Options, log *slog.Logger) (*globalLimits, error) {
	st, err := global.New(o)
	if err != nil {
		return nil, err
	}
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = global.DefaultTimeout
	}
	return &globalLimits{store: st, fallback: global.NewFallback(st, log, 0), timeout: timeout,
		leases: make(map[leaseOptions]*global.Leases)}, nil
}

// leasesFor returns the Leases of a leased limit's settings.
func (g *globalLimits) leasesFor(l *config.Limit) *global.Leases {
	k := leaseOptions{size: l.Lease, ttl: l.LeaseTTL}
	g.mu.Lock()
	defer g.mu.Unlock()
	ls := g.leases[k]
	if ls == nil {
		ls = global.NewLeases(g.store, global.LeaseOptions{Size: k.size, TTL: k.ttl})
		g.leases[k] = ls
	}
	return ls
}

// acquire decides a request of cost on key's global bucket under l.
// Requests with STRICT or SMYTE go to Redis even for a leased limit (a
// lease spends tokens, it has no refill clock to restart).
func (g *globalLimits) acquire(l *config.Limit, key string, cost int64, f bucket.Flags) (bucket.Decision, error) {
	r := global.Request{Limit: l.Bucket, Key: key, Cost: cost, Flags: f, Op: global.Acquire}
	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	if l.Leased() && f == 0 {
		d, err := g.leasesFor(l).Decide(ctx, l.Bucket, key, cost)
		if !errors.Is(err, global.ErrUnavailable) {
			return d, err
		}
		// The outage policy decides, within what is left of the time.
	}
	d, _, err := g.fallback.Decide(ctx, r, l.Policy())
	return d, err
}

// refund gives amount tokens back to key's global bucket, in Redis.
func (g *globalLimits) refund(l *config.Limit, key string, amount int64) (bucket.Decision, error) {
	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	d, _, err := g.fallback.Decide(ctx, global.Request{Limit: l.Bucket, Key: key, Cost: amount, Op: global.Refund}, l.Policy())
	return d, err
}

// peek reports key's global bucket as it stands: a request of cost 0,
// which changes nothing. Allowed says whether a cost of 1 would be; a
// peek does not compute how long a denied request of 1 must wait
// (RetryAfter is -1).
func (g *globalLimits) peek(l *config.Limit, key string) (bucket.Decision, error) {
	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	d, _, err := g.fallback.Decide(ctx, global.Request{Limit: l.Bucket, Key: key, Op: global.Acquire}, l.Policy())
	d.Allowed, d.RetryAfter = d.Remaining >= 1, -1
	return d, err
}

// reset deletes key's global bucket in Redis and reports whether it
// existed.
func (g *globalLimits) reset(l *config.Limit, key string) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	n, err := g.store.Client().Del(ctx, string(global.AppendKey(nil, g.store.Prefix(), &l.Bucket, key))).Result()
	if err != nil {
		return false, fmt.Errorf("%w: %w", global.ErrUnavailable, err)
	}
	return n > 0, nil
}

// close returns every lease's unused tokens and disconnects.
func (g *globalLimits) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	g.mu.Lock()
	for _, ls := range g.leases {
		ls.Close(ctx)
	}
	g.mu.Unlock()
	g.store.Close()
}

// stats returns the counters of global limits, for STATS and the metrics.
func (g *globalLimits) stats() metrics.GlobalStats {
	st, fb := g.store.Stats(), g.fallback.Stats()
	out := metrics.GlobalStats{
		Requests: st.Requests, RoundTrips: st.RoundTrips, Commands: st.Commands,
		Errors: st.Errors, Timeouts: st.Timeouts, Batches: st.Batches,
		ToFallback: fb.ToFallback, ToGlobal: fb.ToGlobal, Open: fb.Open, Closed: fb.Closed, Local: fb.Local,
		ShardsDown: fb.Down,
	}
	g.mu.Lock()
	for _, ls := range g.leases {
		l := ls.Stats()
		out.LeaseGrants += l.Grants
		out.LeaseGranted += l.Granted
		out.LeaseReturns += l.Returns
		out.LeaseReturned += l.Returned
		out.LeaseLocal += l.Local
	}
	g.mu.Unlock()
	return out
}

// globalOp answers an ACQUIRE, PEEK, REFUND or RESET on a global limit.
func (s *server) globalOp(b []byte, op *proto.Op, nl *namedLimit, c *conn) []byte {
	g := s.global
	switch {
	case g == nil:
		return c.fail(b, op.Code, errNoGlobal)
	case op.Flags&proto.FlagAt != 0:
		return c.fail(b, op.Code, errGlobalAt)
	case len(op.Key) == 0:
		return c.fail(b, op.Code, engine.ErrEmptyKey)
	case len(op.Key) > engine.MaxKeyLen:
		return c.fail(b, op.Code, engine.ErrKeyTooLong)
	case op.N < 0:
		return c.fail(b, op.Code, fmt.Errorf("%w: %d", engine.ErrNegativeCost, op.N))
	}
	l, key := nl.cfg, string(op.Key)
	var d bucket.Decision
	var err error
	switch op.Code {
	case proto.OpAcquire:
		d, err = g.acquire(l, key, op.N, bucketFlags(op.Flags))
	case proto.OpPeek:
		d, err = g.peek(l, key)
	case proto.OpRefund:
		d, err = g.refund(l, key, op.N)
	case proto.OpReset:
		existed, err := g.reset(l, key)
		if err != nil {
			return c.fail(b, op.Code, err)
		}
		return proto.AppendReset(b, existed)
	}
	if err != nil {
		s.recordError(nl, &l.Engine, err)
		return c.fail(b, op.Code, err)
	}
	shadowed := op.Code == proto.OpAcquire && shadow(nl, &d)
	switch {
	case shadowed:
		c.n.shadowDenied++
	case d.Allowed:
		c.n.allowed++
	default:
		c.n.denied++
	}
	s.record(nl, l.Bucket.Algorithm, d.Allowed, shadowed, time.Time{})
	w := proto.Decision(d)
	return proto.AppendDecision(b, op.Code, &w)
}
