package global

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/bucket"
)

// Leased mode: a host takes tokens from a global bucket in leases, one
// script call each, and decides from its lease locally. A lease is at most
// Size tokens (or, with Size 0, twice what the host used during its last
// lease, between 1 and MaxSize), valid for at most TTL (a window
// algorithm's lease also ends with its window); its unused tokens go back
// to the global bucket when it expires, when the next lease is taken
// (in the same script call), or on Close.
//
// The global bucket counts a leased token as spent when it is leased, so
// the fleet never admits more than the limit. It can admit less: tokens
// idle in other hosts' leases. While the global bucket is empty, at most
// (hosts-1) * lease size tokens are idle elsewhere; they come back within
// TTL (docs/global.md). A host whose lease request was denied denies
// requests as large for the global bucket's retry_after, at most TTL,
// without asking Redis: tokens returned meanwhile wait for it.

// LeaseOptions configure Leases.
type LeaseOptions struct {
	// Size is the tokens a lease asks for; 0 sizes leases from demand.
	Size int64
	// MaxSize bounds an automatic lease (default: a tenth of the limit's
	// capacity, at least 1).
	MaxSize int64
	// TTL is a lease's longest life (default 1 s). Tokens unused by then
	// go back.
	TTL time.Duration
	// Journal, if not nil, keeps the leases where the next process finds
	// them if this one dies holding them (OpenJournal, Recover).
	Journal *Journal
}

// LeaseStats are the counters of Leases since NewLeases.
type LeaseStats struct {
	// Grants is the lease requests that got tokens; Granted the tokens.
	Grants, Granted uint64
	// Denied is the lease requests that got none (the global bucket could
	// not cover the request that asked).
	Denied uint64
	// Returns is the leases whose unused tokens went back; Returned the
	// tokens.
	Returns, Returned uint64
	// Local is the decisions made from a lease, without Redis.
	Local uint64
	// Held is the requests denied without Redis after a denied lease:
	// those of at least the denied request's cost, until the global
	// bucket's retry_after (at most TTL).
	Held uint64
}

// Leases decides requests on global limits from leases of their tokens.
//
// # Concurrency
//
// Leases are safe for simultaneous use. Requests on one bucket are
// decided one at a time; the one that needs a new lease holds the others
// until Redis answers.
type Leases struct {
	store *Store
	opt   LeaseOptions

	mu     sync.Mutex
	leases map[leaseKey]*lease
	closed bool

	stop  chan struct{}
	swept sync.WaitGroup

	grants, granted, denied, returns, returned, local, held atomic.Uint64
}

// leaseKey names a lease: a limit's parameters (all of them: a lease is
// taken under one set; a quota's calendar is its identity's words) and the
// caller's key. A map lookup by it allocates nothing.
type leaseKey struct {
	alg                                                                   bucket.Algorithm
	max, refillTime, refillAmount, burst, count, period, window, maxDelay int64
	calendar                                                              [3]int64
	key                                                                   string
}

// keyOf returns the name of the lease of limit and key.
func keyOf(limit *bucket.Limit, key string) leaseKey {
	k := leaseKey{limit.Algorithm, limit.Max, limit.RefillTime, limit.RefillAmount, limit.Burst,
		limit.Count, limit.Period, limit.Window, limit.MaxDelay, [3]int64{}, key}
	if limit.Algorithm == bucket.Quota {
		k.calendar = limit.Identity()
	}
	return k
}

// lease is one bucket's tokens on this host.
type lease struct {
	mu      sync.Mutex
	limit   bucket.Limit
	key     string
	dlimit  int64     // decisionLimit(&limit), for every decision from the lease
	tokens  int64     // unused tokens
	expires time.Time // on this host's monotonic clock: the lease is void from then
	until   string    // the same moment on Redis's clock, Unix ns, for the return
	used    int64     // tokens used since the lease was granted
	reset   int64     // the global bucket's reset_after at the grant, ns
	granted time.Time // when the lease was asked for

	// After a denied lease, requests of at least heldNeed tokens are denied
	// here until heldUntil (the global bucket's retry_after, at most TTL),
	// without asking Redis again.
	heldNeed  int64
	heldUntil time.Time
	retryAt   time.Time // when the denied request could pass; zero: never

	dead bool // removed from Leases.leases: look the bucket up again
	rec  int  // its journal record, -1 for none
}

// NewLeases returns Leases taking tokens through store. A goroutine returns
// the tokens of expired leases until Close.
func NewLeases(store *Store, o LeaseOptions) *Leases {
	if o.TTL <= 0 {
		o.TTL = time.Second
	}
	ls := &Leases{store: store, opt: o, leases: make(map[leaseKey]*lease), stop: make(chan struct{})}
	ls.swept.Add(1)
	go ls.sweep()
	return ls
}

// Decide decides a request of cost on limit and key from this host's
// lease, taking a new lease from Redis when the lease is spent or expired.
// The Decision's Remaining is the tokens left in this host's lease;
// RetryAfter and ResetAfter are the global bucket's as of the last lease.
// A pacer cannot be leased (its replies carry a delay): ErrUnsupported.
func (ls *Leases) Decide(ctx context.Context, limit bucket.Limit, key string, cost int64) (bucket.Decision, error) {
	if p := ls.store.prepare(limit, 0); p.err != nil {
		return bucket.Decision{}, p.err
	}
	if !lookup(limit.Algorithm).leased {
		return bucket.Decision{}, fmt.Errorf("%w: a %v cannot be leased", ErrUnsupported, limit.Algorithm)
	}
	cost = clampCost(cost)
	var l *lease
	for {
		var err error
		if l, err = ls.get(limit, key); err != nil {
			return bucket.Decision{}, err
		}
		l.mu.Lock()
		if !l.dead {
			break
		}
		l.mu.Unlock() // swept away meanwhile
	}
	defer l.mu.Unlock()
	now := time.Now()
	if d, ok := ls.fromLease(l, cost, now); ok {
		return d, nil
	}
	if cost == 0 { // a peek with no valid lease: the global bucket's view
		return ls.store.Decide(ctx, Request{Limit: limit, Key: key})
	}
	d, err := ls.renew(ctx, l, cost, now)
	if err != nil || !d.Allowed {
		return d, err
	}
	ls.take(l, cost)
	return l.decision(true, -1, now), nil
}

// take spends cost tokens of l, in the journal first: a token is admitted
// only once the journal no longer holds it. l.mu is held.
func (ls *Leases) take(l *lease, cost int64) {
	l.tokens -= cost
	l.used += cost
	ls.opt.Journal.tokens(l.rec, l.tokens)
}

// void forgets l's unused tokens on this host, in the journal first,
// before a call that returns them: if its reply is lost, they count as
// returned (under-admission), never as held. l.mu is held.
func (ls *Leases) void(l *lease) {
	ls.opt.Journal.release(l.rec)
	l.rec, l.tokens = -1, 0
}

// Local decides a request as Decide does if it can without Redis: from
// this host's lease, or as held after a denied lease. ok is false if the
// request needs Redis (Decide then asks it), or if the lease is busy with
// Redis (being renewed or given back): Local never waits for it, so that
// an event loop can call it. It allocates nothing.
func (ls *Leases) Local(limit bucket.Limit, key string, cost int64) (d bucket.Decision, ok bool) {
	return local(ls, nil, &limit, key, cost, time.Now())
}

// LeaseCache remembers the lease a caller decided from last, so that its
// next request on the same bucket finds the lease without the Leases' map
// and its lock: a connection's clients ask on one key again and again. The
// zero LeaseCache is empty. It is not safe for simultaneous use.
type LeaseCache struct {
	ls *Leases
	l  *lease
}

// LocalAt is Local for a request on key decided as of now, through cache.
// now is when the request was read (the clock read once for a batch of
// requests, after the read that brought them) or later: a request is
// admitted from a lease still valid then, as one decided at once would
// be. It allocates nothing when cache holds the bucket's lease.
func (ls *Leases) LocalAt(cache *LeaseCache, limit *bucket.Limit, key []byte, cost int64, now time.Time) (bucket.Decision, bool) {
	return local(ls, cache, limit, key, cost, now)
}

// local is Local and LocalAt. cache may be nil.
func local[K string | []byte](ls *Leases, cache *LeaseCache, limit *bucket.Limit, key K, cost int64, now time.Time) (d bucket.Decision, ok bool) {
	cost = clampCost(cost)
	if cache != nil && cache.ls == ls && cache.l != nil && cache.l.key == string(key) && cache.l.limit == *limit {
		// Still this bucket's lease (so its algorithm is leased), unless
		// forgotten since (dead): then the map may hold a new one.
		if d, ok, dead := ls.fromLeaseTry(cache.l, cost, now); !dead {
			return d, ok
		}
	}
	if g := lookup(limit.Algorithm); g == nil || !g.leased {
		return d, false
	}
	k := keyOf(limit, string(key))
	ls.mu.Lock()
	l := ls.leases[k]
	ls.mu.Unlock()
	if l == nil {
		return d, false
	}
	if cache != nil {
		cache.ls, cache.l = ls, l
	}
	d, ok, _ = ls.fromLeaseTry(l, cost, now)
	return d, ok
}

// fromLeaseTry is fromLease if l is free (else ok is false) and not
// forgotten (else dead is true).
func (ls *Leases) fromLeaseTry(l *lease, cost int64, now time.Time) (d bucket.Decision, ok, dead bool) {
	if !l.mu.TryLock() {
		return d, false, false
	}
	defer l.mu.Unlock()
	if l.dead {
		return d, false, true
	}
	d, ok = ls.fromLease(l, cost, now)
	return d, ok, false
}

// fromLease decides a request of cost from l alone, if it can: from the
// lease's tokens, or denied while a denied lease holds. l.mu is held.
func (ls *Leases) fromLease(l *lease, cost int64, now time.Time) (bucket.Decision, bool) {
	if now.Before(l.expires) && l.tokens >= cost {
		ls.take(l, cost)
		ls.local.Add(1)
		return l.decision(true, -1, now), true
	}
	if cost > 0 && cost >= l.heldNeed && now.Before(l.heldUntil) {
		ls.held.Add(1)
		retry := int64(-1)
		if !l.retryAt.IsZero() {
			retry = max(int64(l.retryAt.Sub(now)), 1)
		}
		return l.decision(false, retry, now), true
	}
	return bucket.Decision{}, false
}

// decision is a Decision from the lease's state.
func (l *lease) decision(allowed bool, retry int64, now time.Time) bucket.Decision {
	return bucket.Decision{
		Allowed:    allowed,
		Remaining:  l.tokens,
		Limit:      l.dlimit,
		RetryAfter: retry,
		ResetAfter: max(l.reset-int64(now.Sub(l.granted)), 0),
	}
}

// get returns the lease of a bucket, creating an empty one.
func (ls *Leases) get(limit bucket.Limit, key string) (*lease, error) {
	k := keyOf(&limit, key)
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.closed {
		return nil, ErrClosed
	}
	l := ls.leases[k]
	if l == nil {
		l = &lease{limit: limit, key: key, rec: -1}
		l.dlimit = decisionLimit(&l.limit) // of the heap's copy: &limit would escape
		ls.leases[k] = l
	}
	return l, nil
}

// size returns the tokens the next lease of l asks for, at least need.
func (ls *Leases) size(l *lease, need int64) int64 {
	n := ls.opt.Size
	if n <= 0 {
		maxSize := ls.opt.MaxSize
		if maxSize <= 0 {
			maxSize = max(l.dlimit/10, 1)
		}
		n = min(max(2*l.used, 1), maxSize)
	}
	return max(n, need)
}

// renew returns l's unused tokens and takes a new lease that covers need,
// in one script call. l.mu is held. The Decision is the request's: denied
// with the global bucket's RetryAfter when the lease could not cover it.
func (ls *Leases) renew(ctx context.Context, l *lease, need int64, now time.Time) (bucket.Decision, error) {
	want := ls.size(l, need)
	ret, until := int64(0), ""
	if l.tokens > 0 && l.until != "" {
		ret, until = l.tokens, l.until
	}
	ls.void(l)
	r := Request{Limit: l.limit, Key: l.key, Cost: want, Op: lease_}
	reply, err := ls.store.lease(ctx, r, need, ret, until, ls.opt.TTL)
	if err != nil {
		return bucket.Decision{}, err
	}
	if ret > 0 {
		ls.returns.Add(1)
		ls.returned.Add(uint64(ret))
	}
	l.tokens, l.used, l.granted = reply.granted, 0, now
	l.expires, l.until, l.reset = now.Add(time.Duration(reply.validFor)), reply.until, reply.resetAfter
	if reply.granted > 0 {
		l.rec = ls.opt.Journal.put(&l.limit, l.key, reply.granted, reply.until, time.Now().Add(time.Duration(reply.validFor)))
	}
	if reply.granted == 0 {
		ls.denied.Add(1)
		hold := ls.opt.TTL
		l.retryAt = time.Time{}
		if reply.retryAfter > 0 {
			hold = min(hold, time.Duration(reply.retryAfter))
			l.retryAt = now.Add(time.Duration(reply.retryAfter))
		}
		l.heldNeed, l.heldUntil = need, now.Add(hold)
		return l.decision(false, reply.retryAfter, now), nil
	}
	l.heldUntil = time.Time{}
	ls.grants.Add(1)
	ls.granted.Add(uint64(reply.granted))
	return bucket.Decision{Allowed: true}, nil
}

// giveBack returns l's unused tokens (a refund valid until the lease's
// end on Redis's clock); they are void on this host from then, returned
// or not. l.mu is held.
func (ls *Leases) giveBack(ctx context.Context, l *lease) error {
	if l.tokens <= 0 || l.until == "" {
		return nil
	}
	tokens, until := l.tokens, l.until
	ls.void(l)
	l.until = ""
	_, err := ls.store.lease(ctx, Request{Limit: l.limit, Key: l.key, Cost: 0, Op: lease_}, 1<<62, tokens, until, 0)
	if err != nil {
		return err
	}
	ls.returns.Add(1)
	ls.returned.Add(uint64(tokens))
	return nil
}

// sweep returns the tokens of leases that expire before its next round,
// every half TTL (at most every 10 ms): a lease of a window algorithm
// must be back before its window ends. It forgets the leases that are
// empty, expired and hold no denial, so a host's memory follows its live
// buckets, not every key it ever saw.
func (ls *Leases) sweep() {
	defer ls.swept.Done()
	every := max(ls.opt.TTL/2, 10*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ls.stop:
			return
		case now := <-t.C:
			for _, l := range ls.snapshot() {
				l.mu.Lock()
				if l.expires.Sub(now) <= every && l.tokens > 0 {
					// Void on this host from now, returned or not.
					ls.giveBack(context.Background(), l)
					l.tokens, l.expires = 0, now
				} else if l.tokens == 0 && !now.Before(l.expires) && !now.Before(l.heldUntil) {
					ls.forget(l)
				}
				l.mu.Unlock()
			}
		}
	}
}

// forget removes l from the map. l.mu is held (the lock order is l.mu,
// then ls.mu).
func (ls *Leases) forget(l *lease) {
	l.dead = true
	k := keyOf(&l.limit, l.key)
	ls.mu.Lock()
	if ls.leases[k] == l {
		delete(ls.leases, k)
	}
	ls.mu.Unlock()
}

// snapshot returns the current leases.
func (ls *Leases) snapshot() []*lease {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	out := make([]*lease, 0, len(ls.leases))
	for _, l := range ls.leases {
		out = append(out, l)
	}
	return out
}

// Close returns every lease's unused tokens and stops. It returns the
// first error of the returns (a lease whose return failed expires in Redis
// with its tokens spent).
func (ls *Leases) Close(ctx context.Context) error {
	ls.mu.Lock()
	if ls.closed {
		ls.mu.Unlock()
		return nil
	}
	ls.closed = true
	ls.mu.Unlock()
	close(ls.stop)
	ls.swept.Wait()
	var first error
	for _, l := range ls.snapshot() {
		l.mu.Lock()
		if err := ls.giveBack(ctx, l); err != nil && first == nil {
			first = err
		}
		l.mu.Unlock()
	}
	return first
}

// Stats returns the counters.
func (ls *Leases) Stats() LeaseStats {
	return LeaseStats{
		Grants: ls.grants.Load(), Granted: ls.granted.Load(), Denied: ls.denied.Load(),
		Returns: ls.returns.Load(), Returned: ls.returned.Load(), Local: ls.local.Load(), Held: ls.held.Load(),
	}
}

// leaseReply is the script's reply to a lease.
type leaseReply struct {
	granted, remaining, retryAfter, resetAfter, validFor int64
	until                                                string
}

// lease runs the script's lease op through the Store's batching: take up
// to r.Cost tokens if at least need are available, after returning ret
// tokens of the lease that ends at until.
func (s *Store) lease(ctx context.Context, r Request, need, ret int64, until string, ttl time.Duration) (leaseReply, error) {
	var out leaseReply
	p := s.prepare(r.Limit, r.Flags)
	if p.err != nil {
		return out, p.err
	}
	key, args := r.args(s.prefix, p, 4)
	base := len(args)
	args = append(args, clampCost(need), clampCost(ret), until, int64(ttl))
	v, err := s.do(ctx, &call{alg: p.g, key: [1]string{key}, args: args, base: base, params: p.params})
	if err != nil {
		return out, err
	}
	a, ok := v.([]any)
	if !ok || len(a) != 6 {
		return out, fmt.Errorf("%w: unexpected reply %v", ErrScript, v)
	}
	var n [5]int64
	for i := range n {
		if n[i], ok = a[i].(int64); !ok {
			return out, fmt.Errorf("%w: unexpected reply %v", ErrScript, v)
		}
	}
	out.until, ok = a[5].(string)
	if !ok {
		return out, fmt.Errorf("%w: unexpected reply %v", ErrScript, v)
	}
	if _, err := strconv.ParseInt(out.until, 10, 64); err != nil {
		return out, fmt.Errorf("%w: unexpected reply %v", ErrScript, v)
	}
	out.granted, out.remaining, out.retryAfter, out.resetAfter, out.validFor = n[0], n[1], n[2], n[3], n[4]
	return out, nil
}
