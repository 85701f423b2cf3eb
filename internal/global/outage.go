package global

import (
	"context"
	"errors"
	"fmt"
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
	// own under Local, in (0, 1]; 0 is the default: 1/N, N the sidecars
	// sharing the Redis as last counted (Members), or 1 before Redis has
	// answered once or without Members. Counts and rates are scaled down
	// (at least 1).
	FallbackShare float64
}

// Source says who decided a request.
type Source uint8

const (
	FromRedis  Source = iota // the global bucket in Redis
	FromPolicy               // the outage policy: Redis did not answer in time
)

// Fallback decides requests in Redis while it answers and by each limit's
// Policy when it does not: a request Redis did not answer before its
// deadline (or within the Store's timeout of being sent) is decided by
// its policy on its own, and while its shard is down (see Options.Misses)
// at once, without waiting. The Store probes a shard that is down and
// brings it back within about ProbeMax of Redis answering again.
//
// The local policy's buckets outlive an outage: each is kept until it is
// back to its fresh state (a period of its limit), so a host admits at most
// its share per period however often Redis flaps. A bucket keeps the share
// it was created with until then.
//
// # Concurrency
//
// A Fallback is safe for simultaneous use.
type Fallback struct {
	store   *Store
	members *Members // nil: this host counts alone

	mu         sync.Mutex
	local      map[string]*localBucket // by the limit's identity and key
	swept      int                     // len(local) after the last sweep
	opened     atomic.Uint64
	closed     atomic.Uint64
	locally    atomic.Uint64
	unanswered atomic.Uint64
}

// localBucket is one bucket of the local policy.
type localBucket struct {
	share   bucket.Limit // the share it was created with
	state   bucket.State
	ext     []int64 // the extension of sliding_log, window_counters, concurrency
	freshAt int64   // Unix ns from which it is fresh again: forgotten
}

// FallbackStats are a Fallback's counters since NewFallback, and its
// Store's transitions.
type FallbackStats struct {
	// Down is the number of shards down now.
	Down int
	// ToFallback and ToGlobal count the shards' transitions to down and
	// back.
	ToFallback, ToGlobal uint64
	// Open, Closed and Local count the decisions made by each policy.
	Open, Closed, Local uint64
	// Unanswered is the requests the policy decided because Redis failed
	// them (no reply in time, or a refusal) while their shard was up; the
	// others were decided at once, their shard being down.
	Unanswered uint64
	// Probes counts the probes of shards that were down.
	Probes uint64
	// LocalBuckets is the local policy's buckets held now.
	LocalBuckets int
}

// NewFallback returns a Fallback over store. m, if not nil, counts the
// hosts for the default share.
func NewFallback(store *Store, m *Members) *Fallback {
	f := &Fallback{store: store, members: m, local: make(map[string]*localBucket)}
	store.onTransition = f.sweep
	return f
}

// Decide decides r in Redis, or by p if Redis does not answer in time. It
// returns an error only for a request Redis refused (ErrUnsupported,
// ErrScript): unavailability is what the policy is for. Local decisions
// use this host's clock; r.At is ignored then.
func (f *Fallback) Decide(ctx context.Context, r Request, p Policy) (bucket.Decision, Source, error) {
	d, err := f.store.Decide(ctx, r)
	if err == nil {
		return d, FromRedis, nil
	}
	if !errors.Is(err, ErrUnavailable) {
		return d, FromRedis, err
	}
	d, err = f.Failed(ctx, r, p, err)
	return d, FromPolicy, err
}

// Failed decides by p a request that Redis failed with err, an
// ErrUnavailable (a leased limit's whose lease could not be renewed, say),
// counting it. A closed denial's RetryAfter is the time to the next probe
// of r's shard.
func (f *Fallback) Failed(ctx context.Context, r Request, p Policy, err error) (bucket.Decision, error) {
	if !errors.Is(err, errShed) {
		f.unanswered.Add(1)
	}
	return f.byPolicy(ctx, &r, p)
}

// byPolicy decides r by p at once, without Redis.
// A lease (hold) taken by a policy has r.Lease as its id (open: held
// nowhere; local: in this host's bucket); a release by a policy sets
// r.Lease to 0 unless it released a lease of this host's bucket.
func (f *Fallback) byPolicy(ctx context.Context, r *Request, p Policy) (bucket.Decision, error) {
	l := r.Limit
	if err := l.Validate(); err != nil {
		return bucket.Decision{}, err
	}
	if r.Op == release && p.OnUnavailable != Local || r.Op == hold && p.OnUnavailable == Closed {
		r.Lease = 0 // nothing released; no lease
	} else if r.Op == hold && p.OnUnavailable == Open && r.Lease == 0 {
		r.Lease = 1
	}
	switch p.OnUnavailable {
	case Open:
		f.opened.Add(1)
		return bucket.Decision{Allowed: true, Remaining: decisionLimit(&l), Limit: decisionLimit(&l), RetryAfter: -1}, nil
	case Closed:
		f.closed.Add(1)
		return bucket.Decision{Limit: decisionLimit(&l), RetryAfter: int64(f.store.retryAfter(ctx, r))}, nil
	}
	f.locally.Add(1)
	share := Share(l, f.share(p))
	if err := share.Validate(); err != nil {
		// No local form: deny.
		return bucket.Decision{Limit: decisionLimit(&l), RetryAfter: int64(f.store.retryAfter(ctx, r))}, nil
	}
	now := time.Now().UnixNano()
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.bucketLocked(&l, share, r.Key, now)
	var d bucket.Decision
	f2 := r.Flags & (bucket.Strict | bucket.Smyte)
	switch {
	case r.Op == hold:
		lease, _ := b.share.AcquireLease(now, &b.state, b.ext, r.Lease, &d)
		r.Lease = lease
	case r.Op == release:
		if released, _ := b.share.ReleaseLease(now, &b.state, b.ext, r.Lease, &d); !released {
			r.Lease = 0
		}
	case r.Op == Peek:
		b.share.Peek(now, &b.state, b.ext, &d)
	case r.Op == Refund:
		b.share.DecideRefund(now, &b.state, b.ext, r.Cost, f2, &d)
	default:
		b.share.Decide(now, &b.state, b.ext, clampCost(r.Cost), f2, &d)
	}
	b.freshAt = now + max(d.ResetAfter, 0)
	d.Limit = decisionLimit(&b.share)
	return d, nil
}

// bucketLocked returns the local policy's bucket of limit l and key at
// now, new (with share, its limit) if there is none or it is fresh again.
// f.mu is held.
func (f *Fallback) bucketLocked(l *bucket.Limit, share bucket.Limit, key string, now int64) *localBucket {
	k := string(AppendKey(nil, "", l, key))
	b := f.local[k]
	if b == nil || now >= b.freshAt {
		if b == nil {
			b = new(localBucket)
			f.local[k] = b
			if len(f.local) > 2*f.swept+1024 {
				f.sweepLocked(now)
			}
		}
		b.share = share
		b.ext = nil
		if share.Algorithm.Extended() {
			b.ext = make([]int64, share.ExtWords())
		}
		b.share.Init(now, &b.state, b.ext)
	}
	return b
}

// share returns the share of p: its FallbackShare, or 1/N.
func (f *Fallback) share(p Policy) float64 {
	if p.FallbackShare > 0 {
		return p.FallbackShare
	}
	if f.members == nil {
		return 1
	}
	return 1 / float64(max(f.members.Count(), 1))
}

// sweep forgets the local buckets that are fresh again.
func (f *Fallback) sweep() {
	f.mu.Lock()
	f.sweepLocked(time.Now().UnixNano())
	f.mu.Unlock()
}

func (f *Fallback) sweepLocked(now int64) {
	for k, b := range f.local {
		if now >= b.freshAt {
			delete(f.local, k)
		}
	}
	f.swept = len(f.local)
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
	if g := lookup(l.Algorithm); g != nil {
		g.share(&l, scaling{share})
	}
	return l
}

// Stats returns the counters.
func (f *Fallback) Stats() FallbackStats {
	st := f.store.Stats()
	f.mu.Lock()
	n := len(f.local)
	f.mu.Unlock()
	return FallbackStats{
		Down:       st.Down,
		ToFallback: st.ToDown, ToGlobal: st.ToUp,
		Open: f.opened.Load(), Closed: f.closed.Load(), Local: f.locally.Load(),
		Unanswered: f.unanswered.Load(), Probes: st.Probes, LocalBuckets: n,
	}
}
