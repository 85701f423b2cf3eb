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

	mu     sync.Mutex // serialises creating Leases (each runs a sweeper)
	leases sync.Map   // leaseOptions -> *global.Leases, read without a lock per decision
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
	return &globalLimits{store: st, fallback: global.NewFallback(st, log, 0), timeout: timeout}, nil
}

// leasesFor returns the Leases of a leased limit's settings.
func (g *globalLimits) leasesFor(l *config.Limit) *global.Leases {
	k := leaseOptions{size: l.Lease, ttl: l.LeaseTTL}
	if ls, ok := g.leases.Load(k); ok {
		return ls.(*global.Leases)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if ls, ok := g.leases.Load(k); ok {
		return ls.(*global.Leases)
	}
	ls := global.NewLeases(g.store, global.LeaseOptions{Size: k.size, TTL: k.ttl})
	g.leases.Store(k, ls)
	return ls
}

// acquire decides a request of cost on key's global bucket under l.
// Requests with STRICT or SMYTE go to Redis even for a leased limit (a
// lease spends tokens, it has no refill clock to restart).
func (g *globalLimits) acquire(l *config.Limit, key string, cost int64, f bucket.Flags) (bucket.Decision, error) {
	// The Store bounds every call to Redis by its timeout: no context
	// deadline is needed (and a lease's decision, mostly local, pays for
	// none).
	r := global.Request{Limit: l.Bucket, Key: key, Cost: cost, Flags: f, Op: global.Acquire}
	if l.Leased() && f == 0 {
		d, err := g.leasesFor(l).Decide(context.Background(), l.Bucket, key, cost)
		if !errors.Is(err, global.ErrUnavailable) {
			return d, err
		}
		// Redis did not answer the lease: the outage policy decides.
	}
	d, _, err := g.fallback.Decide(context.Background(), r, l.Policy())
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
	g.leases.Range(func(_, ls any) bool {
		ls.(*global.Leases).Close(ctx)
		return true
	})
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
	g.leases.Range(func(_, ls any) bool {
		l := ls.(*global.Leases).Stats()
		out.LeaseGrants += l.Grants
		out.LeaseGranted += l.Granted
		out.LeaseReturns += l.Returns
		out.LeaseReturned += l.Returned
		out.LeaseLocal += l.Local
		return true
	})
	return out
}

// globalResult is what a global operation decided.
type globalResult struct {
	d       bucket.Decision
	existed bool // RESET
	err     error
	done    bool
}

// globalArgs is a global operation, copied out of its frame.
type globalArgs struct {
	code  proto.Opcode
	flags proto.Flags
	n     int64
	key   string
	nl    *namedLimit
}

// frameGlobals holds the results of a frame's global operations, by the
// operation's index in the frame.
type frameGlobals struct {
	res     [proto.MaxBatch]globalResult
	buckets map[string][]int // operations by bucket, in frame order
}

// decideGlobals decides the global operations of the frame in body before
// it is answered: those on one bucket one after the other, in the frame's
// order, and those on different buckets at once, so that they travel to
// Redis in shared pipelines instead of a round trip each. An operation
// that does not decode ends the scan (the answer reports it).
func (c *conn) decideGlobals(body []byte, h proto.Header) {
	var op proto.Op
	var args []globalArgs
	fg := c.globals
	for i := 0; i < int(h.Count); i++ {
		rest, err := proto.DecodeOpVersion(body, h.Version, &op)
		if err != nil {
			break
		}
		body = rest
		if op.Name == nil || op.Code < proto.OpAcquire || op.Code > proto.OpReset {
			continue
		}
		nl, err := c.s.lookup(op.Name)
		if err != nil || nl.cfg.Scope != config.Global {
			continue
		}
		if op.Code == proto.OpAcquire && nl.cfg.Leased() && op.Flags&(proto.FlagStrict|proto.FlagSmyte) == 0 {
			continue // decided from its lease, in place: Redis only now and then
		}
		if args == nil {
			if fg == nil {
				fg = &frameGlobals{buckets: make(map[string][]int)}
				c.globals = fg
			}
			clear(fg.buckets)
			args = make([]globalArgs, h.Count)
		}
		args[i] = globalArgs{code: op.Code, flags: op.Flags, n: op.N, key: string(op.Key), nl: nl}
		fg.res[i] = globalResult{}
		k := string(op.Name) + "\x00" + args[i].key
		fg.buckets[k] = append(fg.buckets[k], i)
	}
	if args == nil {
		if fg != nil {
			clear(fg.buckets) // none in this frame
		}
		return
	}
	var wg sync.WaitGroup
	for _, idx := range fg.buckets {
		wg.Go(func() {
			for _, i := range idx {
				fg.res[i] = c.s.global.decide(&args[i])
				fg.res[i].done = true
			}
		})
	}
	wg.Wait()
}

// decide decides one global operation.
func (g *globalLimits) decide(a *globalArgs) globalResult {
	l := a.nl.cfg
	switch {
	case a.flags&proto.FlagAt != 0:
		return globalResult{err: errGlobalAt}
	case len(a.key) == 0:
		return globalResult{err: engine.ErrEmptyKey}
	case len(a.key) > engine.MaxKeyLen:
		return globalResult{err: engine.ErrKeyTooLong}
	case a.n < 0:
		return globalResult{err: fmt.Errorf("%w: %d", engine.ErrNegativeCost, a.n)}
	}
	var r globalResult
	switch a.code {
	case proto.OpAcquire:
		r.d, r.err = g.acquire(l, a.key, a.n, engine.FlagsFromProto(a.flags))
	case proto.OpPeek:
		r.d, r.err = g.peek(l, a.key)
	case proto.OpRefund:
		r.d, r.err = g.refund(l, a.key, a.n)
	case proto.OpReset:
		r.existed, r.err = g.reset(l, a.key)
	}
	return r
}

// globalOp answers an ACQUIRE, PEEK, REFUND or RESET on a global limit,
// decided by decideGlobals for this frame, or now.
func (s *server) globalOp(b []byte, op *proto.Op, nl *namedLimit, c *conn) []byte {
	if s.global == nil {
		return c.fail(b, op.Code, errNoGlobal)
	}
	var r globalResult
	if fg := c.globals; fg != nil && fg.res[c.opIndex].done {
		r = fg.res[c.opIndex]
		fg.res[c.opIndex].done = false
	} else {
		r = s.global.decide(&globalArgs{code: op.Code, flags: op.Flags, n: op.N, key: string(op.Key), nl: nl})
	}
	if r.err != nil {
		s.recordError(nl, &nl.cfg.Engine, r.err)
		return c.fail(b, op.Code, r.err)
	}
	if op.Code == proto.OpReset {
		return proto.AppendReset(b, r.existed)
	}
	return c.answer(b, op, nl, nl.cfg.Bucket.Algorithm, &r.d, time.Time{})
}
