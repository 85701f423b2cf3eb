package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
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
)

// globalLimits decides the requests of global limits.
type globalLimits struct {
	store     *global.Store
	members   *global.Members
	fallback  *global.Fallback
	journal   *global.Journal // nil if it cannot be opened
	timeout   time.Duration
	stop      chan struct{} // closed by close: recovery stops
	recovery  sync.WaitGroup
	recovered atomic.Int64 // tokens returned from the journal at start

	mu     sync.Mutex // serialises creating Leases (each runs a sweeper)
	leases sync.Map   // leaseOptions -> *global.Leases, read without a lock per decision
}

// leaseOptions are the lease settings of a limit: limits with the same
// ones share a global.Leases.
type leaseOptions struct {
	size int64 // 0: auto
	ttl  time.Duration
}

// newGlobalLimits connects to Redis as o says, counts this sidecar among
// those sharing it, and returns the leases a sidecar killed on the lease
// journal at journalPath left (in the background, once Redis answers).
func newGlobalLimits(o global.Options, log *slog.Logger, journalPath string) (*globalLimits, error) {
	if o.Logger == nil {
		o.Logger = log
	}
	st, err := global.New(o)
	if err != nil {
		return nil, err
	}
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = global.DefaultTimeout
	}
	m, err := global.StartMembers(st, 0)
	if err != nil {
		log.Warn("Redis did not answer at start: until it does, a global limit's default outage share is its whole limit", "error", err.Error())
	}
	g := &globalLimits{store: st, members: m, fallback: global.NewFallback(st, m), timeout: timeout, stop: make(chan struct{})}
	if g.journal, err = global.OpenJournal(journalPath, 0); err != nil {
		log.Warn("leases are not journaled: a sidecar killed holding leases loses their unused tokens until the buckets refill", "error", err.Error())
	} else if g.journal.Pending() > 0 {
		g.recovery.Go(func() { g.recover(log) })
	}
	return g, nil
}

// recover returns the unused tokens of the leases the journal holds from a
// process that died, once Redis answers (trying every second).
func (g *globalLimits) recover(log *slog.Logger) {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		n, err := g.journal.Recover(ctx, g.store)
		cancel()
		g.recovered.Add(n)
		if g.journal.Pending() == 0 {
			args := []any{"tokens", n}
			if err != nil {
				args = append(args, "error", err.Error())
			}
			log.Info("returned the unused tokens of the leases a stopped sidecar held", args...)
			return
		}
		select {
		case <-g.stop:
			return
		case <-time.After(time.Second):
		}
	}
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
	ls := global.NewLeases(g.store, global.LeaseOptions{Size: k.size, TTL: k.ttl, Journal: g.journal})
	g.leases.Store(k, ls)
	return ls
}

// answerBy returns when the answer to a global operation that arrived at
// arrived is due: a quarter of the time its client gave (1 ms to 20 ms)
// before the client's deadline, if the request carries one (DEADLINE),
// else 4/5 of the Redis timeout after its arrival. The margin is for the
// answer's way back on a loaded host. Redis's answer is awaited until
// then, and the limit's outage policy decides after.
func (g *globalLimits) answerBy(arrived time.Time, flags proto.Flags, deadline int64) time.Time {
	if flags&proto.FlagDeadline == 0 {
		return arrived.Add(g.timeout * 4 / 5)
	}
	d := time.Unix(0, deadline)
	margin := min(max(d.Sub(arrived)/2, time.Millisecond), 25*time.Millisecond)
	return d.Add(-margin)
}

// rlsAnswerBy is when Redis must have answered a global limit's part of a
// rate limit service request: a quarter of the caller's deadline before
// it, if it has one, else 4/5 of the Redis timeout from now.
func (g *globalLimits) rlsAnswerBy(ctx context.Context) time.Time {
	now := time.Now()
	if d, ok := ctx.Deadline(); ok {
		return d.Add(-min(max(d.Sub(now)/4, time.Millisecond), 25*time.Millisecond))
	}
	return now.Add(g.timeout * 4 / 5)
}

// outageOf is the wire's name of a limit's outage policy.
func outageOf(l *config.Limit) proto.Outage { return wireOutage(l.OnUnavailable) }

// wireOutage is the wire's name of outage policy p.
func wireOutage(p global.OnUnavailable) proto.Outage {
	switch p {
	case global.Open:
		return proto.OutageOpen
	case global.Closed:
		return proto.OutageClosed
	}
	return proto.OutageLocal
}

// acquire decides a request of cost on key's global bucket under l, Redis
// answering by the time by returns, and says which outage policy decided
// it, if one did. Requests with STRICT or SMYTE go to Redis even for a
// leased limit (a lease spends tokens, it has no refill clock to restart).
func (g *globalLimits) acquire(l *config.Limit, key string, cost int64, f bucket.Flags, by func() time.Time) (bucket.Decision, proto.Outage, error) {
	return g.acquireBlocking(l, key, cost, f, by, nil)
}

// acquireBlocking is acquire that calls blocking, if not nil, before it
// waits for Redis (an event loop hands itself over then).
func (g *globalLimits) acquireBlocking(l *config.Limit, key string, cost int64, f bucket.Flags, by func() time.Time, blocking func()) (bucket.Decision, proto.Outage, error) {
	if l.Leased() && f == 0 {
		if d, ok := g.leasesFor(l).Local(l.Bucket, key, cost); ok {
			return d, proto.OutageNone, nil // no Redis, no context, no allocation
		}
	}
	return g.acquireRemote(l, key, cost, f, by, blocking)
}

// acquireRemote is acquireBlocking for a request its lease, if its limit
// is leased, could not decide (Leases.Local said so): it asks Redis.
func (g *globalLimits) acquireRemote(l *config.Limit, key string, cost int64, f bucket.Flags, by func() time.Time, blocking func()) (bucket.Decision, proto.Outage, error) {
	r := global.Request{Limit: l.Bucket, Key: key, Cost: cost, Flags: f, Op: global.Acquire}
	if l.Leased() && f == 0 {
		ls := g.leasesFor(l)
		if blocking != nil {
			blocking()
		}
		ctx, cancel := context.WithDeadline(context.Background(), by())
		defer cancel()
		d, err := ls.Decide(ctx, l.Bucket, key, cost)
		if !errors.Is(err, global.ErrUnavailable) {
			return d, proto.OutageNone, err
		}
		// Redis did not answer the lease (or its shard is down, and the
		// lease was not even asked for): the outage policy decides.
		d, err = g.fallback.Failed(ctx, r, l.Policy(), err)
		return d, outageOf(l), err
	}
	if blocking != nil {
		blocking()
	}
	return g.decideBy(r, l, by)
}

// decideBy decides r in Redis, or by l's outage policy if Redis does not
// answer by the time by returns.
func (g *globalLimits) decideBy(r global.Request, l *config.Limit, by func() time.Time) (bucket.Decision, proto.Outage, error) {
	ctx, cancel := context.WithDeadline(context.Background(), by())
	defer cancel()
	d, src, err := g.fallback.Decide(ctx, r, l.Policy())
	if src == global.FromPolicy {
		return d, outageOf(l), err
	}
	return d, proto.OutageNone, err
}

// refund gives amount tokens back to key's global bucket, in Redis.
func (g *globalLimits) refund(l *config.Limit, key string, amount int64, by func() time.Time) (bucket.Decision, proto.Outage, error) {
	return g.refundBlocking(l, key, amount, by, nil)
}

// refundBlocking is refund that calls blocking, if not nil, before it
// waits for Redis.
func (g *globalLimits) refundBlocking(l *config.Limit, key string, amount int64, by func() time.Time, blocking func()) (bucket.Decision, proto.Outage, error) {
	if blocking != nil {
		blocking()
	}
	return g.decideBy(global.Request{Limit: l.Bucket, Key: key, Cost: amount, Op: global.Refund}, l, by)
}

// peek reports key's global bucket as it stands: a request of cost 0,
// which changes nothing. Allowed says whether a cost of 1 would be; a
// peek does not compute how long a denied request of 1 must wait
// (RetryAfter is -1), but for sliding_log, window_counters and
// concurrency, whose scripts peek as package bucket does.
func (g *globalLimits) peek(l *config.Limit, key string, by func() time.Time) (bucket.Decision, proto.Outage, error) {
	if global.Peeks(l.Bucket.Algorithm) { // a peek of their own: the local algorithm's replies
		return g.decideBy(global.Request{Limit: l.Bucket, Key: key, Op: global.Peek}, l, by)
	}
	d, o, err := g.decideBy(global.Request{Limit: l.Bucket, Key: key, Op: global.Acquire}, l, by)
	d.Allowed, d.RetryAfter = d.Remaining >= 1, -1
	return d, o, err
}

// reset deletes key's global bucket in Redis and reports whether it
// existed.
func (g *globalLimits) reset(l *config.Limit, key string, by func() time.Time) (bool, error) {
	ctx, cancel := context.WithDeadline(context.Background(), by())
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
	close(g.stop)
	g.recovery.Wait()
	g.leases.Range(func(_, ls any) bool {
		ls.(*global.Leases).Close(ctx)
		return true
	})
	g.members.Close(ctx)
	g.store.Close()
	g.journal.Close()
}

// stats returns the counters of global limits, for STATS and the metrics.
func (g *globalLimits) stats() metrics.GlobalStats {
	st, fb := g.store.Stats(), g.fallback.Stats()
	out := metrics.GlobalStats{
		Requests: st.Requests, RoundTrips: st.RoundTrips, Commands: st.Commands,
		Errors: st.Errors, Timeouts: st.Timeouts, Batches: st.Batches,
		ToFallback: fb.ToFallback, ToGlobal: fb.ToGlobal, Open: fb.Open, Closed: fb.Closed, Local: fb.Local,
		ShardsDown: fb.Down, Unanswered: fb.Unanswered, Misses: st.Misses, Probes: fb.Probes,
		Hosts: g.members.Count(), LeaseRecovered: uint64(g.recovered.Load()),
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

// globalCall is a request on a global limit as this sidecar hands it to
// Redis: the front ends set it as their engine.Request's Remote, and
// engine.Do checks the request, calls Decide and applies shadow mode.
type globalCall struct {
	g        *globalLimits // nil: this sidecar has no Redis (errNoGlobal)
	l        *config.Limit // the limit: its lease settings and outage policy
	flags    proto.Flags   // the wire's; with DEADLINE, deadline is the client's
	deadline int64
	arrived  time.Time // when its frame was read; zero: read the clock when needed
	blocking func()    // called before waiting for Redis (an event loop hands itself over), if not nil
	// cache, if not nil, is the connection's memory of the leased limit
	// and lease it used last (local); batch, if not nil, the connection
	// whose batch the request is of: its clock decides from the lease.
	cache *leaseCache
	batch *stream
	// ctx, if not nil, is the gRPC call of a rate limit service request:
	// Redis's answer is due by rlsAnswerBy, not answerBy.
	ctx context.Context
}

// by returns when Redis's answer is due (answerBy, or rlsAnswerBy for the
// rate limit service).
func (a *globalCall) by() time.Time {
	if a.ctx != nil {
		return a.g.rlsAnswerBy(a.ctx)
	}
	if a.arrived.IsZero() {
		a.arrived = time.Now()
	}
	return a.g.answerBy(a.arrived, a.flags, a.deadline)
}

// leaseCache is a connection's memory of the leased limit it used last and
// of the lease of its last bucket: a connection's requests are mostly on
// one bucket, and finding its lease through the limit's Leases costs more
// than deciding from it. It is used by one goroutine at a time (the one
// handling the connection's batch).
type leaseCache struct {
	l  *config.Limit
	ls *global.Leases // l's
	lc global.LeaseCache
}

// local decides r, an acquire, from its limit's lease, if it can without
// Redis (Leases.LocalAt), as of its batch's clock (stream.wall: the time
// the batch was read, unless a request of it has waited since, for a lock
// or on Redis, which can take seconds).
func (a *globalCall) local(r *engine.Request) (bucket.Decision, bool) {
	l, c := a.l, a.cache
	if !l.Leased() || r.Flags != 0 {
		return bucket.Decision{}, false
	}
	var ls *global.Leases
	var lc *global.LeaseCache
	if c != nil {
		if c.l != l {
			c.l, c.ls, c.lc = l, a.g.leasesFor(l), global.LeaseCache{}
		}
		ls, lc = c.ls, &c.lc
	} else {
		ls = a.g.leasesFor(l)
	}
	var now time.Time
	switch {
	case a.batch != nil:
		now = a.batch.wall()
	case !a.arrived.IsZero(): // read for this request alone
		now = a.arrived
	default:
		now = time.Now()
	}
	return ls.LocalAt(lc, &l.Bucket, r.Key, r.N, now)
}

// Decide decides r in Redis, or by the limit's outage policy if Redis does
// not answer in time (Result.Outage says so).
func (a *globalCall) Decide(r engine.Request) (res engine.Result, err error) {
	g, l := a.g, a.l
	if g == nil {
		return res, errNoGlobal
	}
	if r.Op == proto.OpAcquire {
		if d, ok := a.local(&r); ok {
			res.Decision = d
			return res, nil // no Redis, no allocation
		}
	}
	if a.batch != nil {
		a.batch.clock = time.Time{} // waits on Redis, likely: the batch's later requests read the clock
	}
	key := string(r.Key)
	if a.blocking != nil && r.Op != proto.OpAcquire && r.Op != proto.OpRefund {
		a.blocking() // these wait on Redis (an acquire only when its lease cannot answer: acquireRemote)
	}
	switch r.Op {
	case proto.OpAcquire:
		res.Decision, res.Outage, err = g.acquireRemote(l, key, r.N, r.Flags, a.by, a.blocking) // a.local could not
	case proto.OpPeek:
		res.Decision, res.Outage, err = g.peek(l, key, a.by)
	case proto.OpRefund:
		res.Decision, res.Outage, err = g.refundBlocking(l, key, r.N, a.by, a.blocking)
	case proto.OpReset:
		res.Existed, err = g.reset(l, key, a.by)
	case proto.OpLease:
		ctx, cancel := context.WithDeadline(context.Background(), a.by())
		defer cancel()
		var src global.Source
		res.Decision, res.Lease, src, err = g.fallback.Hold(ctx, global.Request{Limit: l.Bucket, Key: key, Lease: r.Lease}, l.Policy())
		res.Outage = leaseOutage(src, l)
	case proto.OpRelease:
		ctx, cancel := context.WithDeadline(context.Background(), a.by())
		defer cancel()
		var src global.Source
		res.Decision, res.Released, src, err = g.fallback.Release(ctx, global.Request{Limit: l.Bucket, Key: key, Lease: r.Lease}, l.Policy())
		res.Outage = leaseOutage(src, l)
	}
	return res, err
}

// globalResult is what engine.Do answered for a global operation the scan
// decided.
type globalResult struct {
	res   engine.Result
	err   error
	frame int // its frame, counted from the first that handle answers
	op    int // its index in the frame
}

// frameGlobals holds what handle's scan of the complete frames at the front
// of the input found: every operation, decoded once (frame answers from
// here), and the decisions of the global ones, made before any is answered.
type frameGlobals struct {
	ops    []scannedOp
	items  []proto.MultiItem // the MULTI items of ops
	frames int               // frames whose every operation is in ops
	nextOp int               // the next of ops to answer

	res     []globalResult
	reqs    []engine.Request // of res, as engine.Do takes them
	calls   []globalCall     // their Remotes
	next    int              // the next result to answer
	buckets map[string][]int // operations (indexes of res) by bucket, in order
}

// pending reports whether decisions remain to be answered.
func (fg *frameGlobals) pending() bool { return fg != nil && fg.next < len(fg.res) }

// scanned reports whether frame n's operations were decoded by the scan.
func (fg *frameGlobals) scanned(n int) bool { return fg != nil && n < fg.frames }

// take returns the decision of operation op of frame n, if the scan made
// it, else nil (decide it now).
func (fg *frameGlobals) take(n, op int) *globalResult {
	for fg.pending() && (fg.res[fg.next].frame < n || fg.res[fg.next].frame == n && fg.res[fg.next].op < op) {
		fg.next++ // a limit a config reload made local between the scan and now: decided, not answered
	}
	if !fg.pending() || fg.res[fg.next].frame != n || fg.res[fg.next].op != op {
		return nil
	}
	fg.next++
	return &fg.res[fg.next-1]
}

// decideGlobals decodes the operations of the complete frames at the front
// of in (frame then answers them from there, without decoding them again)
// and decides their global operations before any is answered: those of
// one frame on one bucket one after the other, in the frame's order, and
// all others at once, so that they travel to Redis in shared pipelines
// instead of a round trip each, and a frame waiting for Redis does not
// hold up the frames behind it. (Frames in flight at once on one bucket
// are decided in the order their requests reach Redis, as those of
// different connections are.) An operation that does not decode (or a
// frame that is not a request) ends the scan: frame decodes that frame
// itself, and the connection closes after answering it.
func (c *conn) decideGlobals(in []byte) {
	fg := c.globals
	if fg == nil {
		fg = &frameGlobals{buckets: make(map[string][]int)}
		c.globals = fg
	}
	fg.reset()
	op := &c.op // frame loads each operation back into it
scan:
	for n := 0; ; n++ {
		frame, rest, h, err := proto.SplitFrame(in)
		if err != nil || frame == nil || h.Kind != proto.KindRequest {
			break
		}
		in = rest
		body, first := frame[proto.HeaderLen:], len(fg.ops)
		for i := 0; i < int(h.Count); i++ {
			rest, err := proto.DecodeOpVersion(body, h.Version, op)
			if err != nil {
				fg.ops = fg.ops[:first] // frame decodes this frame, and fails it
				break scan
			}
			body = rest
			if op.Code == proto.OpMulti && c.s.globalItems(op, c.globalMulti.nls[:op.NItems]) {
				// A MULTI of global limits is decided when answered, and
				// the operations after it after it: the scan ends here,
				// and frame decodes this frame itself (answering the
				// operations before it with the scan's decisions).
				fg.ops = fg.ops[:first]
				break scan
			}
			fg.keep(op)
			if op.Name == nil || op.Code < proto.OpAcquire || op.Code > proto.OpReset {
				continue
			}
			nl, err := c.s.lookup(op.Name)
			if err != nil || nl.cfg.Scope != config.Global {
				continue
			}
			nl = nl.forKey(op.Key) // the key's override, if it has one (of the same scope)
			if len(nl.parts) > 1 {
				// A global list is decided when answered (listOp), as a
				// MULTI of global limits is: the scan ends here.
				fg.ops = fg.ops[:first]
				break scan
			}
			if op.Code == proto.OpAcquire && nl.cfg.Leased() && op.Flags&(proto.FlagStrict|proto.FlagSmyte) == 0 {
				continue // decided from its lease, in place: Redis only now and then
			}
			k := strconv.Itoa(n) + "\x00" + string(op.Name) + "\x00" + string(op.Key)
			fg.buckets[k] = append(fg.buckets[k], len(fg.res))
			fg.res = append(fg.res, globalResult{frame: n, op: i})
			fg.reqs = append(fg.reqs, engine.Request{})
			c.request(&fg.reqs[len(fg.reqs)-1], op, &nl.cfg.Engine, nl)
			fg.calls = append(fg.calls, c.globalCall(op, nl))
			fg.calls[len(fg.calls)-1].blocking = nil // decided below, off the loop, on goroutines of their own too
			fg.calls[len(fg.calls)-1].cache = nil    // the connection's, not safe for those goroutines
			fg.calls[len(fg.calls)-1].batch = nil
		}
		if len(body) != 0 {
			fg.ops = fg.ops[:first] // bytes after the last operation: frame fails it
			break
		}
		fg.frames = n + 1
	}
	if len(fg.res) > 0 {
		c.decideScanned()
	}
}

// decideScanned decides the global operations decideGlobals found: one
// goroutine per bucket, the operations of a bucket in order. (A function
// of its own: its goroutines' closures are allocated only for a batch that
// has such operations, not for every batch of leased acquires.)
func (c *conn) decideScanned() {
	fg := c.globals
	decide := func(idx []int) {
		for _, i := range idx {
			r := &fg.reqs[i]
			r.Remote = &fg.calls[i]
			fg.res[i].err = c.s.engine.Do(r, &fg.res[i].res)
		}
	}
	c.leaveLoop() // each of them waits on Redis
	// A goroutine per bucket but the last, which this one decides: it
	// waits for the others anyway, and its stack has grown long ago (a new
	// goroutine's grows, copied, on every request).
	var wg sync.WaitGroup
	var last []int
	for _, idx := range fg.buckets {
		if last != nil {
			other := last
			wg.Go(func() { decide(other) })
		}
		last = idx
	}
	if last != nil {
		decide(last)
	}
	wg.Wait()
	clear(fg.reqs) // drop the keys and limits
	clear(fg.calls)
}

// reset empties fg for a new scan, dropping its references to the last
// one's frames.
func (fg *frameGlobals) reset() {
	clear(fg.ops)
	clear(fg.items)
	clear(fg.res)
	fg.ops, fg.items, fg.frames, fg.nextOp = fg.ops[:0], fg.items[:0], 0, 0
	fg.res, fg.reqs, fg.calls, fg.next = fg.res[:0], fg.reqs[:0], fg.calls[:0], 0
	clear(fg.buckets)
}

// globalCall returns the Remote of op, an operation on nl, a global limit,
// decided on the goroutine that handles the connection's batch: an event
// loop serving the connection is handed over before it waits on Redis.
func (c *conn) globalCall(op *proto.Op, nl *namedLimit) globalCall {
	return globalCall{g: c.s.global, l: nl.cfg, flags: op.Flags, deadline: op.Deadline, arrived: c.arrived, blocking: c.handOff,
		cache: &c.leaseCache, batch: &c.stream}
}

// globalOp answers an operation on a global limit, req, with the decision
// decideGlobals made, or deciding it now.
func (s *server) globalOp(b []byte, op *proto.Op, nl *namedLimit, c *conn, req *engine.Request) []byte {
	c.call = c.globalCall(op, nl)
	req.Remote = &c.call
	switch op.Code {
	case proto.OpLease:
		return s.leaseOp(b, op, c, req, nl, time.Time{})
	case proto.OpRelease:
		return s.releaseOp(b, op, c, req)
	}
	res := &c.res
	var err error
	if r := c.globals.take(c.frameNo, c.opIndex); r != nil {
		*res, err = r.res, r.err
		*r = globalResult{}
	} else {
		err = s.engine.Do(req, res)
	}
	if err != nil {
		s.recordError(nl, &nl.cfg.Engine, err)
		return c.fail(b, op.Code, err)
	}
	if op.Code == proto.OpReset {
		return proto.AppendReset(b, res.Existed)
	}
	b = c.answer(b, op, nl, nl.cfg.Bucket.Algorithm, &res.Decision, res.Shadowed, time.Time{})
	if c.version >= 4 { // older clients cannot read the marks
		b = proto.MarkOutage(b, res.Outage)
		if nl.cfg.OnUnavailable == global.Closed {
			// Whoever decided: the client's own failure policy must then
			// deny what this sidecar does not answer in time.
			b = proto.MarkFailsClosed(b)
		}
	}
	return b
}

// scannedOp is an operation decideGlobals decoded, kept for frame to answer
// without decoding it again: proto.Op's fields but its MULTI items, which
// are frameGlobals.items[items:items+NItems]. Its slices alias the frame.
type scannedOp struct {
	code     proto.Opcode
	flags    proto.Flags
	limit    proto.Limit
	name     []byte
	n, at    int64
	deadline int64
	key      []byte
	lease    uint64
	nItems   int
	items    int
	cursor   uint64
	count    uint16
	prefix   []byte
	old, ttl int64
}

// keep appends op to the scanned operations.
func (fg *frameGlobals) keep(op *proto.Op) {
	fg.ops = append(fg.ops, scannedOp{code: op.Code, flags: op.Flags, limit: op.Limit, name: op.Name, n: op.N, at: op.At,
		deadline: op.Deadline, key: op.Key, lease: op.Lease, nItems: op.NItems, items: len(fg.items),
		cursor: op.Cursor, count: op.Count, prefix: op.Prefix, old: op.Old, ttl: op.TTL})
	fg.items = append(fg.items, op.Items[:op.NItems]...)
}

// load sets *op to the next scanned operation, as DecodeOpVersion would.
func (fg *frameGlobals) load(op *proto.Op) {
	k := &fg.ops[fg.nextOp]
	fg.nextOp++
	old := op.NItems
	op.Code, op.Flags, op.Limit, op.Name, op.N, op.At, op.Deadline = k.code, k.flags, k.limit, k.name, k.n, k.at, k.deadline
	op.Key, op.Lease, op.NItems, op.Cursor, op.Count, op.Prefix = k.key, k.lease, k.nItems, k.cursor, k.count, k.prefix
	op.Old, op.TTL = k.old, k.ttl
	copy(op.Items[:k.nItems], fg.items[k.items:])
	clear(op.Items[min(k.nItems, old):old]) // drop references to an earlier frame's keys
}
