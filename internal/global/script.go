package global

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/bucket"

	"github.com/sluicehq/sluice/vocab"
)

// Op is what a request does to its bucket.
type Op uint8

const (
	// Acquire decides a request of Cost and, if allowed, consumes it
	// (package bucket's Apply).
	Acquire Op = iota
	// Refund gives Cost tokens back and replies with the bucket as a
	// cost-0 Acquire would (package bucket's Refund).
	Refund
	// Peek reports the bucket as package bucket's PeekExt does, changing
	// nothing: Allowed and RetryAfter for a cost of 1, Remaining and
	// ResetAfter for a cost of 0. For sliding_log, window_counters and
	// concurrency only (Peeks); the others peek with an Acquire of 0.
	Peek
	// lease_ takes tokens for a lease (Leases; not for Requests).
	lease_
)

// Request is one decision on one global bucket.
type Request struct {
	// Limit must have passed Check.
	Limit bucket.Limit
	// Key is the caller's key (1 to 1024 bytes).
	Key string
	// Cost is the tokens to acquire or refund; negative is 0, and costs
	// above 2^53-1 are decided as 2^53-1 (denied alike).
	Cost int64
	// Flags: bucket.Strict and bucket.Smyte, read by token_bucket only.
	Flags bucket.Flags
	// Op is Acquire or Refund.
	Op Op
	// Lease is a concurrency lease's id (Hold, Release): the caller's
	// random draw for Hold.
	Lease int64
	// At is an explicit time, Unix ns in [1, bucket.MaxTime], for tests
	// and replays; 0 decides at Redis's clock (TIME), which is the only
	// clock of a global limit. A bucket written at an explicit time gets
	// no expiry.
	At int64
}

// prepared is what the script of a limit needs besides a request: its
// algorithm and its parameters (boxed once, for the many requests of a
// limit), or why the limit cannot be global.
type prepared struct {
	g      *algorithm
	params []any
	err    error
}

// prepare checks l and boxes its parameters for requests with flags f.
func prepare(l *bucket.Limit, f bucket.Flags) *prepared {
	if err := Check(*l); err != nil {
		return &prepared{err: err}
	}
	g := lookup(l.Algorithm)
	return &prepared{g: g, params: g.params(nil, l, f)}
}

// The ops, boxed once.
var opAcquire, opRefund, opLease, opPeek any = "a", "r", "l", "p"

// Peeks reports whether a limit of algorithm a takes Peek.
func Peeks(a bucket.Algorithm) bool {
	return a == bucket.SlidingLog || a == bucket.WindowCounters || a == bucket.Concurrency
}

// args returns r's key and its script's ARGV with p's parameters: the op
// (with r.At, if any), the cost and the parameters (lua/state.lua). extra
// is room for a lease's four more.
func (r *Request) args(prefix string, p *prepared, extra int) (string, []any) {
	key := ownedString(AppendKey(make([]byte, 0, len(prefix)+len(r.Key)+64), prefix, &r.Limit, r.Key))
	op := opAcquire
	switch r.Op {
	case Refund:
		op = opRefund
	case lease_:
		op = opLease
	case Peek:
		op = opPeek
	}
	if r.At != 0 {
		op = op.(string) + strconv.FormatInt(r.At, 10)
	}
	args := make([]any, 0, 2+len(p.params)+4+extra)
	args = append(append(args, op, clampCost(r.Cost)), p.params...)
	if p.g.periods {
		args = appendPeriods(args, &r.Limit, r.At)
	}
	return key, args
}

// check validates what Check does not: the time and the flags.
func (r *Request) check() error {
	if r.At != 0 && !bucket.ValidTime(r.At) {
		return fmt.Errorf("%w: the explicit time %d ns is outside 1970 to 2190", ErrUnsupported, r.At)
	}
	if r.Op == Peek && !Peeks(r.Limit.Algorithm) {
		return fmt.Errorf("%w: a %v peeks with an acquire of 0", ErrUnsupported, r.Limit.Algorithm)
	}
	if r.Flags&bucket.Cell != 0 {
		return fmt.Errorf("%w: redis-cell refunds have no global form", ErrUnsupported)
	}
	if len(r.Key) == 0 || len(r.Key) > vocab.MaxKeyLen {
		return fmt.Errorf("%w: a key is 1 to %d bytes, got %d", ErrUnsupported, vocab.MaxKeyLen, len(r.Key))
	}
	return nil
}

// parseReply turns the script's reply into a Decision for limit l.
func parseReply(v any, l *bucket.Limit, d *bucket.Decision) error {
	a, ok := v.([]any)
	if !ok || len(a) != 5 {
		return fmt.Errorf("%w: unexpected reply %v", ErrScript, v)
	}
	var n [5]int64
	for i, x := range a {
		if n[i], ok = x.(int64); !ok {
			return fmt.Errorf("%w: unexpected reply %v", ErrScript, v)
		}
	}
	*d = bucket.Decision{
		Allowed:    n[0] == 1,
		Remaining:  n[1],
		Limit:      decisionLimit(l),
		RetryAfter: n[2],
		ResetAfter: n[3],
		Delay:      n[4],
	}
	return nil
}

// Eval decides r with one call of its algorithm's script on c (a client or
// a pipeline's Scripter: EVALSHA, and EVAL after a NOSCRIPT), with no
// batching. Keys are under prefix. A Store batches, and calls the
// library's functions; Eval is the script form, for tests and tools.
func Eval(ctx context.Context, c redis.Scripter, prefix string, r Request) (bucket.Decision, error) {
	var d bucket.Decision
	p := prepare(&r.Limit, r.Flags)
	if p.err != nil {
		return d, p.err
	}
	if err := r.check(); err != nil {
		return d, err
	}
	key, args := r.args(prefix, p, 0)
	v, err := p.g.script.Run(ctx, c, []string{key}, args...).Result()
	if err != nil {
		return d, classify(err)
	}
	err = parseReply(v, &r.Limit, &d)
	return d, err
}
