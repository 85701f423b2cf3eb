package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/proto"
)

// The one request path. Every front end (the native protocol, its MULTI,
// the Redis protocol, global limits, the direct client) decodes what it
// was sent into a Request, lets Do decide it, and encodes the Result or
// the error (Status) in its own words; what a request means is decided
// here, once.

// Request is one decision on one bucket, decoded from whatever protocol
// carried it.
type Request struct {
	Op    proto.Opcode // ACQUIRE, PEEK, REFUND, RESET, LEASE or RELEASE
	Key   []byte
	Limit *Limit
	// N is ACQUIRE's cost and REFUND's amount; the other operations do
	// not read it.
	N int64
	// Lease is, for LEASE, the id to give the lease (drawn at random by
	// the caller: Engine.Lease), and for RELEASE the lease to give back.
	Lease int64
	// Flags are the algorithms' (Strict, Smyte for ACQUIRE; Cell for
	// REFUND).
	Flags bucket.Flags
	// Shadow answers an ACQUIRE that is denied as allowed (Result.Shadowed):
	// the request asked for it, or its named limit is a shadow limit.
	Shadow bool
	// Time is when the request is decided: the server's clock, the
	// request's own time if it sent one (Wire), and its lock waits.
	Time Time
	// OwnTime says the request brought its own time (the wire's AT): a
	// Remote decides at its own clock, and refuses it (ErrRemoteTime).
	OwnTime bool
	// Remote, if not nil, decides the request instead of the table: a
	// global limit, decided in Redis. Do checks the request and applies
	// the shadow rewrite as for the table; the Remote only decides.
	Remote Remote
}

// Remote decides requests elsewhere than in the table: the server's global
// limits, in Redis. Do hands Decide a copy of a request it has checked
// (key, cost, time, the operation against the algorithm) and turns a
// denial Decide returns into a shadow limit's answer; Decide returns the
// decision (or Existed, Lease, Released) and Outage, or why it could not
// decide. (The request and its result travel by value, so that neither
// leaves the stack of a front end that decides on the table.)
type Remote interface {
	Decide(r Request) (Result, error)
}

// Wire sets r's operation, key, cost and flags from a request as the native
// protocol carries them: STRICT and SMYTE become the algorithms' flags,
// SHADOW sets Shadow, and AT sets Time.At to at (Time.Now must be set
// before). Every front end that speaks in the wire's terms (the native
// server, the direct client) decodes its requests with it.
func (r *Request) Wire(code proto.Opcode, key []byte, n int64, f proto.Flags, at int64) {
	r.Op, r.Key, r.N = code, key, n
	r.Flags = FlagsFromProto(f)
	r.Shadow = f&proto.FlagShadow != 0
	r.OwnTime = f&proto.FlagAt != 0
	r.Time.Wire(f, at)
}

// Wire sets t.At as a request with the wire's flags f says: at with AT,
// else t.Now (which must be set before).
func (t *Time) Wire(f proto.Flags, at int64) {
	t.At = t.Now
	if f&proto.FlagAt != 0 {
		t.At = at
	}
}

// Result is what Do decided.
type Result struct {
	Decision bucket.Decision // of every operation but RESET
	Shadowed bool            // ACQUIRE: a denial answered as allowed (Request.Shadow)
	Existed  bool            // RESET: the bucket existed
	Lease    int64           // LEASE: the lease's id, 0 if denied
	Released bool            // RELEASE: the lease was held
	// Outage is, for a request a Remote decided, the outage policy that
	// decided it when the Remote could not (proto.OutageNone: the Remote
	// did).
	Outage proto.Outage
}

// Do decides r and writes the outcome to *res, or returns why it cannot:
// an error of this package's vocabulary (Status says its wire status).
func (e *Engine) Do(r *Request, res *Result) (err error) {
	res.Shadowed, res.Outage = false, proto.OutageNone
	if r.Remote != nil {
		return remote(r, res)
	}
	switch r.Op {
	case proto.OpAcquire:
		if err = e.Acquire(&res.Decision, r.Key, r.Limit, r.N, r.Time, r.Flags); err == nil && r.Shadow {
			res.Shadowed = Shadow(&res.Decision)
		}
		return err
	case proto.OpPeek:
		return e.Peek(&res.Decision, r.Key, r.Limit, r.Time)
	case proto.OpRefund:
		return e.Refund(&res.Decision, r.Key, r.Limit, r.N, r.Time, r.Flags)
	case proto.OpReset:
		res.Existed, err = e.Reset(r.Key, r.Limit, r.Time)
		return err
	case proto.OpLease:
		res.Lease, err = e.Lease(&res.Decision, r.Key, r.Limit, r.Time, r.Lease)
		return err
	case proto.OpRelease:
		res.Released, err = e.Release(&res.Decision, r.Key, r.Limit, r.Lease, r.Time)
		return err
	}
	return fmt.Errorf("%w: %d", proto.ErrUnknownOpcode, r.Op)
}

// remote decides r by its Remote: the checks a request on the table gets,
// in the order a global limit has always made them, then the Remote's
// decision, then the shadow rewrite.
func remote(r *Request, res *Result) error {
	alg := r.Limit.b.Algorithm
	switch r.Op {
	case proto.OpAcquire, proto.OpPeek, proto.OpRefund, proto.OpReset:
		if r.OwnTime {
			return ErrRemoteTime
		}
		if err := CheckKeyCost(r.Key, r.N); err != nil {
			return err
		}
		if alg == bucket.Concurrency && (r.Op == proto.OpAcquire || r.Op == proto.OpRefund) {
			return ErrLeaseOnly
		}
	case proto.OpLease, proto.OpRelease:
		if alg != bucket.Concurrency {
			return ErrNotConcurrency
		}
	default:
		return fmt.Errorf("%w: %d", proto.ErrUnknownOpcode, r.Op)
	}
	out, err := r.Remote.Decide(*r)
	if err != nil {
		return err
	}
	*res = out
	if r.Op == proto.OpAcquire && r.Shadow {
		res.Shadowed = Shadow(&res.Decision)
	}
	return nil
}

// CheckKeyCost validates a request's key and cost as every operation does,
// on the table or by a Remote (ErrEmptyKey, ErrKeyTooLong, ErrNegativeCost);
// a front end that decides several requests together outside Do (a MULTI
// of global limits) checks each with it.
func CheckKeyCost(key []byte, cost int64) error {
	if len(key) == 0 || len(key) > MaxKeyLen || cost < 0 {
		return keyCostError(len(key), cost)
	}
	return nil
}

// keyCostError is CheckKeyCost's error for a key of n bytes and cost, one
// of which is refused.
func keyCostError(n int, cost int64) error {
	switch {
	case n == 0:
		return ErrEmptyKey
	case n > MaxKeyLen:
		return ErrKeyTooLong
	}
	return fmt.Errorf("%w: %d", ErrNegativeCost, cost)
}

// Shadow turns a denial into the answer a shadow limit gives: allowed, no
// retry, no delay; what the denial consumed, if anything, stays consumed.
// It reports whether d was a denial. Do applies it to an ACQUIRE with
// Request.Shadow; a named list applies it to its limits' combination.
func Shadow(d *bucket.Decision) bool {
	if d.Allowed {
		return false
	}
	d.Allowed, d.RetryAfter, d.Delay = true, -1, 0
	return true
}

// Status is the wire status of an error of the engine's operations (the
// native protocol's, the direct client's, the Redis protocol's error
// classes); an error that wraps a proto status sentinel has that status,
// any other StatusInternal.
func Status(err error) proto.Status {
	switch {
	case errors.Is(err, ErrTableFull):
		return proto.StatusTableFull
	case errors.Is(err, ErrEmptyKey), errors.Is(err, ErrKeyTooLong):
		return proto.StatusInvalidKey
	case errors.Is(err, ErrNegativeCost), errors.Is(err, ErrTTL):
		return proto.StatusInvalidCost
	case errors.Is(err, ErrTooManyItems):
		return proto.StatusTooManyItems
	case errors.Is(err, ErrContended), errors.Is(err, ErrLocked):
		return proto.StatusContended
	case errors.Is(err, ErrTime):
		return proto.StatusMalformed
	case errors.Is(err, ErrInvalidLimit):
		return proto.StatusInvalidLimit
	}
	if st := proto.StatusOf(err); st != proto.StatusOK {
		return st
	}
	return proto.StatusInternal
}

// Clock returns the sidecar's clock, as any process deciding in its state
// file must read it: it starts at the later of the wall clock and floor
// (the highest time the state file has recorded, Opened's HighTime) and
// advances with the monotonic clock. A step of the wall clock, back or
// forward, does not move it while the process runs, and a restart after the
// wall clock went back continues from the recorded time instead of going
// back with it: time travel neither mints tokens nor wedges buckets.
func Clock(floor int64) func() int64 {
	start := time.Now()
	base := max(start.UnixNano(), floor)
	return func() int64 { return base + int64(time.Since(start)) }
}
