package global

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/bucket"
)

// Concurrency limits: a lease is an entry of the bucket in Redis, held
// until it is released or its expiry passes (lua/concurrency.lua). The
// caller draws the lease's id at random, as for a local lease; Redis
// replaces an id of 0, or one the bucket holds already, by the next that
// is neither.

// The lease ops of a concurrency limit (Request.Op, through Hold and
// Release only).
const (
	hold    Op = iota + lease_ + 1 // take a lease of id Request.Lease
	release                        // give back the lease Request.Lease
)

// The ops, boxed once.
var opHold, opRelease any = "c", "x"

// leaseArgs returns r's key and the script's ARGV for op: the op (with
// r.At), the lease id in 8 bytes, the parameters.
func (r *Request) leaseArgs(prefix string, p *prepared, op any) (string, []any) {
	key := ownedString(AppendKey(make([]byte, 0, len(prefix)+len(r.Key)+64), prefix, &r.Limit, r.Key))
	if r.At != 0 {
		op = fmt.Sprint(op, r.At)
	}
	var id [8]byte
	binary.BigEndian.PutUint64(id[:], uint64(r.Lease))
	return key, append(append(make([]any, 0, 2+len(p.params)), op, string(id[:])), p.params...)
}

// Hold takes a lease of r.Limit, a concurrency limit, for r.Key, with the
// id r.Lease if no entry of the bucket has it: it returns the Decision and
// the lease's id (0 if denied).
func (s *Store) Hold(ctx context.Context, r Request) (bucket.Decision, int64, error) {
	r.Op = hold
	return s.leaseOp(ctx, r)
}

// Release gives back the lease r.Lease of r.Limit, a concurrency limit,
// for r.Key, and reports whether it was held. The Decision describes the
// bucket afterwards.
func (s *Store) Release(ctx context.Context, r Request) (bucket.Decision, bool, error) {
	r.Op = release
	d, n, err := s.leaseOp(ctx, r)
	return d, n != 0, err
}

// leaseOp runs r's hold or release: the Decision, and the lease's id
// (hold) or 1 if it was released (release).
func (s *Store) leaseOp(ctx context.Context, r Request) (bucket.Decision, int64, error) {
	var d bucket.Decision
	if r.Limit.Algorithm != bucket.Concurrency {
		return d, 0, fmt.Errorf("%w: leases are taken of a concurrency limit, not %v", ErrUnsupported, r.Limit.Algorithm)
	}
	p := s.prepare(r.Limit, 0)
	if p.err != nil {
		return d, 0, p.err
	}
	if err := r.check(); err != nil {
		return d, 0, err
	}
	op := opHold
	if r.Op == release {
		op = opRelease
	}
	key, args := r.leaseArgs(s.prefix, p, op)
	v, err := s.do(ctx, &call{alg: p.g, key: [1]string{key}, args: args, base: len(args), params: p.params})
	if err != nil {
		return d, 0, err
	}
	return parseLeaseReply(v, &r.Limit, &d)
}

// parseLeaseReply reads the reply of a hold or a release: a Decision's
// five words and the lease's id (8 bytes; "" if denied) or 1 if released.
func parseLeaseReply(v any, l *bucket.Limit, d *bucket.Decision) (bucket.Decision, int64, error) {
	a, ok := v.([]any)
	if !ok || len(a) != 6 {
		return *d, 0, fmt.Errorf("%w: unexpected reply %v", ErrScript, v)
	}
	if err := parseReply(a[:5], l, d); err != nil {
		return *d, 0, err
	}
	switch x := a[5].(type) {
	case int64:
		return *d, x, nil
	case string:
		if len(x) == 8 {
			return *d, int64(binary.BigEndian.Uint64([]byte(x))), nil
		}
		if x == "" && !d.Allowed {
			return *d, 0, nil
		}
	}
	return *d, 0, fmt.Errorf("%w: unexpected reply %v", ErrScript, v)
}

// Hold takes a lease as Store.Hold does, or by p if Redis does not answer
// in time (open: a lease held nowhere; closed: denied; local: a lease of
// this host's share of the limit, in memory).
func (f *Fallback) Hold(ctx context.Context, r Request, p Policy) (bucket.Decision, int64, Source, error) {
	d, id, err := f.store.Hold(ctx, r)
	if err == nil || !errors.Is(err, ErrUnavailable) {
		return d, id, FromRedis, err
	}
	if !errors.Is(err, errShed) {
		f.unanswered.Add(1)
	}
	r.Op = hold
	d, err = f.byPolicy(ctx, &r, p)
	return d, r.Lease, FromPolicy, err
}

// Release gives back a lease as Store.Release does, and also from this
// host's share under the local policy: a lease taken while Redis was
// unavailable is there.
func (f *Fallback) Release(ctx context.Context, r Request, p Policy) (bucket.Decision, bool, Source, error) {
	d, released, err := f.store.Release(ctx, r)
	if err != nil && !errors.Is(err, ErrUnavailable) {
		return d, false, FromRedis, err
	}
	if p.OnUnavailable == Local {
		f.mu.Lock()
		_, local := f.local[string(AppendKey(nil, "", &r.Limit, r.Key))]
		f.mu.Unlock()
		if local || err != nil {
			lr := r
			lr.Op = release
			ld, lerr := f.byPolicy(ctx, &lr, p)
			if err != nil {
				return ld, lr.Lease != 0, FromPolicy, lerr
			}
			released = released || lr.Lease != 0
		}
	}
	if err != nil {
		return d, false, FromPolicy, nil
	}
	return d, released, FromRedis, nil
}
