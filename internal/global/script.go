package global

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/bucket"
)

// decideSource is the script that makes every global decision (its header
// documents its arguments and reply).
//
//go:embed decide.lua
var decideSource string

// decideScript runs decideSource by SHA (EVALSHA), falling back to EVAL,
// which loads it, when Redis answers NOSCRIPT (after a restart or a
// failover to a replica that never saw it).
var decideScript = redis.NewScript(decideSource)

// Op is what a request does to its bucket.
type Op uint8

const (
	// Acquire decides a request of Cost and, if allowed, consumes it
	// (package bucket's Apply).
	Acquire Op = iota
	// Refund gives Cost tokens back and replies with the bucket as a
	// cost-0 Acquire would (package bucket's Refund).
	Refund
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
	// At is an explicit time, Unix ns in [1, bucket.MaxTime], for tests
	// and replays; 0 decides at Redis's clock (TIME), which is the only
	// clock of a global limit. A bucket written at an explicit time gets
	// no expiry.
	At int64
}

// args returns the script's KEYS and ARGV for r.
func (r *Request) args(prefix string) ([]string, []any) {
	key := string(AppendKey(make([]byte, 0, len(prefix)+len(r.Key)+48), prefix, &r.Limit, r.Key))
	p := scriptParams(&r.Limit)
	op := "a"
	switch r.Op {
	case Refund:
		op = "r"
	case lease_:
		op = "l"
	}
	at := ""
	if r.At != 0 {
		at = strconv.FormatInt(r.At, 10)
	}
	flags := int64(r.Flags & (bucket.Strict | bucket.Smyte))
	return []string{key}, []any{op, int64(r.Limit.Algorithm), p[0], p[1], p[2], clampCost(r.Cost), flags, at}
}

// check validates what Check does not: the time and the flags.
func (r *Request) check() error {
	if r.At != 0 && !bucket.ValidTime(r.At) {
		return fmt.Errorf("%w: the explicit time %d ns is outside 1970 to 2190", ErrUnsupported, r.At)
	}
	if r.Flags&bucket.Cell != 0 {
		return fmt.Errorf("%w: redis-cell refunds have no global form", ErrUnsupported)
	}
	if len(r.Key) == 0 || len(r.Key) > 1024 {
		return fmt.Errorf("%w: a key is 1 to 1024 bytes, got %d", ErrUnsupported, len(r.Key))
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

// Eval decides r with one script call on c (a client or a pipeline's
// Scripter), with no batching: what an application calling Redis + Lua
// itself does. Keys are under prefix. It is the reference path of the
// tests and benchmarks; a Store batches.
func Eval(ctx context.Context, c redis.Scripter, prefix string, r Request) (bucket.Decision, error) {
	var d bucket.Decision
	if err := Check(r.Limit); err != nil {
		return d, err
	}
	if err := r.check(); err != nil {
		return d, err
	}
	keys, args := r.args(prefix)
	v, err := decideScript.Run(ctx, c, keys, args...).Result()
	if err != nil {
		return d, classify(err)
	}
	err = parseReply(v, &r.Limit, &d)
	return d, err
}
