package global

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/bucket"
)

// OnUnavailable is what a global limit does while Redis is unavailable.
type OnUnavailable uint8

const (
	// Local decides on this host alone with a share of the limit
	// (Policy.FallbackShare).
	Local OnUnavailable = iota
	// Open admits every request.
	Open
	// Closed denies every request.
	Closed
)

var onUnavailableNames = [...]string{Local: "local", Open: "open", Closed: "closed"}

// String returns the policy's name in configuration: local, open, closed.
func (o OnUnavailable) String() string {
	if int(o) < len(onUnavailableNames) {
		return onUnavailableNames[o]
	}
	return fmt.Sprintf("on_unavailable(%d)", o)
}

// ParseOnUnavailable parses local, open or closed.
func ParseOnUnavailable(s string) (OnUnavailable, error) {
	for i, n := range onUnavailableNames {
		if n == s {
			return OnUnavailable(i), nil
		}
	}
	return 0, fmt.Errorf("on_unavailable must be local, open or closed, got %q", s)
}

// Policy is a global limit's outage policy.
type Policy struct {
	OnUnavailable OnUnavailable
	// FallbackShare is the share of the limit this host may admit on its
	// own under Local, in (0, 1]: with N hosts, 1/N keeps the fleet near
	// the limit. Counts and rates are scaled down (at least 1).
	FallbackShare float64
}

// Source says who decided a request.
type Source uint8

const (
	FromRedis  Source = iota // the global bucket in Redis
	FromPolicy               // the outage policy: Redis was unavailable
)

// Fallback decides requests in Redis while it is available and by each
// limit's Policy while it is not, without waiting for Redis on every
// request: a state machine per shard (the Redis, or each Cluster master)
// with two states. In "global" every request goes to Redis; one that fails
// with ErrUnavailable moves the shard to "fallback", where requests are
// decided by their policy at once and one request per probe interval still
// tries Redis; one that succeeds moves it back to "global", forgetting the
// shard's local buckets. Only a request sent after the last transition
// can cause the next one, so replies still in flight do not flap the
// state. Each transition is logged and counted.
//
// # Concurrency
//
// A Fallback is safe for simultaneous use.
type Fallback struct {
	store *Store
	log   *slog.Logger
	probe time.Duration

	mu     sync.Mutex
	shards map[string]*shardState

	toFallback, toGlobal            atomic.Uint64
	opened, closed, locally, probes atomic.Uint64
}

// shardState is one shard's state in a Fallback.
type shardState struct {
	addr      string
	down      atomic.Bool
	since     atomic.Int64 // Unix ns of the last transition
	lastProbe atomic.Int64 // Unix ns of the last probe in fallback
	lastUsed  atomic.Int64 // Unix ns of the last request for the shard

	mu    sync.Mutex
	local map[string]*bucket.State // local buckets, by key, while in fallback
}

// FallbackStats are a Fallback's counters since NewFallback.
type FallbackStats struct {
	// Down is the number of shards in fallback now that requests used
	// within the last ten probe intervals (a dead master's address, no
	// longer used once its replica serves its slots, is not counted).
	Down int
	// ToFallback and ToGlobal count the transitions.
	ToFallback, ToGlobal uint64
	// Open, Closed and Local count the decisions made by each policy.
	Open, Closed, Local uint64
	// Probes counts the requests sent to Redis while in fallback.
	Probes uint64
}

// NewFallback returns a Fallback over store, logging to log (slog.Default
// if nil), probing Redis every probe (default 1 s) while it is down.
func NewFallback(store *Store, log *slog.Logger, probe time.Duration) *Fallback {
	if log == nil {
		log = slog.Default()
	}
	if probe <= 0 {
		probe = time.Second
	}
	return &Fallback{store: store, log: log, probe: probe, shards: make(map[string]*shardState)}
}

// Decide decides r in Redis, or by p if Redis is unavailable. It returns
// an error only for a request Redis refused (ErrUnsupported, ErrScript):
// unavailability is what the policy is for. Local decisions use this
// host's clock; r.At is ignored then.
func (f *Fallback) Decide(ctx context.Context, r Request, p Policy) (bucket.Decision, Source, error) {
	st := f.state(ctx, &r)
	start := time.Now().UnixNano()
	if st.down.Load() && !f.probeNow(st, start) {
		d, err := f.decideLocally(st, r, p)
		return d, FromPolicy, err
	}
	d, err := f.store.Decide(ctx, r)
	switch {
	case err == nil:
		if st.down.Load() && start > st.since.Load() && st.down.CompareAndSwap(true, false) {
			f.transition(st, false, nil)
		}
		return d, FromRedis, nil
	case errors.Is(err, ErrUnavailable):
		if !st.down.Load() && start > st.since.Load() && st.down.CompareAndSwap(false, true) {
			f.transition(st, true, err)
		}
		d, err := f.decideLocally(st, r, p)
		return d, FromPolicy, err
	}
	return d, FromRedis, err
}

// state returns the state of the shard that holds r's bucket ("" for a
// single Redis, or when the Cluster's slot map cannot tell).
func (f *Fallback) state(ctx context.Context, r *Request) *shardState {
	addr := ""
	if f.store.cluster != nil {
		key := string(AppendKey(nil, f.store.prefix, &r.Limit, r.Key))
		if m, err := f.store.cluster.MasterForKey(ctx, key); err == nil {
			addr = m.Options().Addr
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.shards[addr]
	if st == nil {
		st = &shardState{addr: addr, local: make(map[string]*bucket.State)}
		f.shards[addr] = st
	}
	st.lastUsed.Store(time.Now().UnixNano())
	return st
}

// probeNow reports whether this request should try Redis: one per probe
// interval while down.
func (f *Fallback) probeNow(st *shardState, now int64) bool {
	last := st.lastProbe.Load()
	if now-last < int64(f.probe) || !st.lastProbe.CompareAndSwap(last, now) {
		return false
	}
	f.probes.Add(1)
	return true
}

// transition logs and counts a change of a shard's state.
func (f *Fallback) transition(st *shardState, down bool, cause error) {
	now := time.Now()
	prev := st.since.Swap(now.UnixNano())
	shard := st.addr
	if shard == "" {
		shard = "redis"
	}
	if down {
		f.toFallback.Add(1)
		st.lastProbe.Store(now.UnixNano())
		f.log.Warn("Redis is unavailable: global limits follow their outage policy", "shard", shard, "error", cause.Error())
		return
	}
	f.toGlobal.Add(1)
	st.mu.Lock()
	clear(st.local)
	st.mu.Unlock()
	f.log.Info("Redis is available again: global limits are decided in Redis", "shard", shard,
		"unavailable_for", time.Duration(now.UnixNano()-prev).String())
}

// decideLocally applies p to r, with st's local buckets.
func (f *Fallback) decideLocally(st *shardState, r Request, p Policy) (bucket.Decision, error) {
	l := r.Limit
	if err := l.Validate(); err != nil {
		return bucket.Decision{}, err
	}
	switch p.OnUnavailable {
	case Open:
		f.opened.Add(1)
		return bucket.Decision{Allowed: true, Remaining: decisionLimit(&l), Limit: decisionLimit(&l), RetryAfter: -1}, nil
	case Closed:
		f.closed.Add(1)
		return bucket.Decision{Limit: decisionLimit(&l), RetryAfter: -1}, nil
	}
	f.locally.Add(1)
	share := Share(l, p.FallbackShare)
	if err := share.Validate(); err != nil {
		return bucket.Decision{Limit: decisionLimit(&l), RetryAfter: -1}, nil // no local form: deny
	}
	now := time.Now().UnixNano()
	k := string(AppendKey(nil, "", &share, r.Key))
	st.mu.Lock()
	defer st.mu.Unlock()
	s := st.local[k]
	if s == nil {
		s = new(bucket.State)
		share.Init(now, s)
		st.local[k] = s
	}
	var d bucket.Decision
	if r.Op == Refund {
		d, _ = share.Refund(now, s, r.Cost, r.Flags&(bucket.Strict|bucket.Smyte))
	} else {
		d, _ = share.Apply(now, s, clampCost(r.Cost), r.Flags&(bucket.Strict|bucket.Smyte))
	}
	return d, nil
}

// Share returns l with its capacity and rate scaled by share in (0, 1]:
// the limit one host enforces alone under Local. Capacities (max,
// burst+1) are rounded down but at least 1; a rate is scaled by
// lengthening its period (refill_time, period), rounded up, so it is never
// above its share. The result may fail Validate (a period past
// bucket.MaxDuration); a request is then denied.
func Share(l bucket.Limit, share float64) bucket.Limit {
	if !(share > 0 && share <= 1) {
		share = 1
	}
	scale := func(v int64) int64 { return max(1, int64(math.Floor(float64(v)*share))) }
	stretch := func(d int64, f float64) int64 {
		x := math.Ceil(float64(d) * f)
		if x > float64(bucket.MaxDuration) {
			return bucket.MaxDuration + 1
		}
		return int64(x)
	}
	switch l.Algorithm {
	case bucket.TokenBucket:
		ra := l.RefillAmount
		l.Max = scale(l.Max)
		l.RefillAmount = min(ra, l.Max)
		// rate RefillAmount/RefillTime becomes share * ra/RefillTime.
		l.RefillTime = stretch(l.RefillTime, float64(l.RefillAmount)/(float64(ra)*share))
	case bucket.GCRA:
		l.Burst = scale(l.Burst+1) - 1
		l.Period = stretch(l.Period, 1/share)
	case bucket.FixedWindow, bucket.SlidingWindow:
		l.Max = scale(l.Max)
	case bucket.Pacer:
		l.Period = stretch(l.Period, 1/share)
	}
	return l
}

// Stats returns the counters.
func (f *Fallback) Stats() FallbackStats {
	down := 0
	recent := time.Now().UnixNano() - 10*int64(f.probe)
	f.mu.Lock()
	for _, st := range f.shards {
		if st.down.Load() && st.lastUsed.Load() >= recent {
			down++
		}
	}
	f.mu.Unlock()
	return FallbackStats{
		Down:       down,
		ToFallback: f.toFallback.Load(), ToGlobal: f.toGlobal.Load(),
		Open: f.opened.Load(), Closed: f.closed.Load(), Local: f.locally.Load(),
		Probes: f.probes.Load(),
	}
}
