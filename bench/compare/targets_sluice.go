package compare

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/clients/go/sluice"
)

// sluiceNative is Sluice over its native protocol with the Go client: one
// Client (one connection) per benchmark client; a batch is a Pipeline,
// one write and one wait, as a Redis pipeline is. Its sidecar runs the
// default configuration, or the transport srv.transport names.
type sluiceNative struct {
	srv    *sluiced
	limits Limits
}

func (t *sluiceNative) Name() string {
	if t.srv.transport != "" {
		return "sluice native (" + t.srv.transport + ")"
	}
	return "sluice native"
}
func (t *sluiceNative) Family() string                  { return "sluice" }
func (t *sluiceNative) Supports(LimitKind) bool         { return true }
func (t *sluiceNative) Multiplexed() bool               { return false }
func (t *sluiceNative) Reset(ctx context.Context) error { return t.srv.restart(ctx) }
func (t *sluiceNative) Close() error                    { return nil } // the sidecar is shared

func (t *sluiceNative) limit(k LimitKind) (sluice.Limit, error) {
	l := t.limits
	switch k {
	case TokenBucket:
		return sluice.TokenBucket(l.TBMax, l.TBRefill, l.TBAmount), nil
	case GCRA:
		return sluice.GCRA(l.GCRABurst, l.GCRACount, l.GCRAPeriod), nil
	case FixedWindow:
		return sluice.FixedWindow(l.FWLimit, l.FWWindow), nil
	}
	return sluice.Limit{}, fmt.Errorf("sluice native: no limit %q", k)
}

func (t *sluiceNative) Dial(ctx context.Context, k LimitKind) (Conn, error) {
	l, err := t.limit(k)
	if err != nil {
		return nil, err
	}
	c, err := sluice.Dial(t.srv.socketPath(), sluice.WithFailurePolicy(sluice.FailError), sluice.WithTimeout(10*time.Second))
	if err != nil {
		return nil, err
	}
	return &nativeConn{c: c, l: l}, nil
}

type nativeConn struct {
	c *sluice.Client
	l sluice.Limit
	p *sluice.Pipeline
}

func (c *nativeConn) Do(ctx context.Context, keys []string) (int, error) {
	if len(keys) == 1 {
		d, err := c.c.Acquire(ctx, c.l, keys[0], 1)
		return b2i(d.Allowed), err
	}
	if c.p == nil {
		c.p = c.c.Pipeline()
	}
	for _, k := range keys {
		c.p.Acquire(c.l, k, 1)
	}
	res, err := c.p.Exec(ctx)
	if err != nil {
		return 0, err
	}
	allowed := 0
	for _, r := range res {
		allowed += b2i(r.Decision.Allowed)
	}
	return allowed, nil
}

func (c *nativeConn) Close() error { return c.c.Close() }

// sluiceRESP is Sluice's Redis-protocol listener with go-redis: RL.PREDUCE
// (smyte/ratelimit's command, milliseconds) for the token bucket and
// CL.THROTTLE (redis-cell's) for GCRA, exactly what a user moving from
// those servers sends.
type sluiceRESP struct {
	srv    *sluiced
	limits Limits
}

func (t *sluiceRESP) Name() string   { return "sluice RESP" }
func (t *sluiceRESP) Family() string { return "sluice" }
func (t *sluiceRESP) Supports(k LimitKind) bool {
	return k == TokenBucket || k == GCRA // RESP has no fixed-window command
}
func (t *sluiceRESP) Multiplexed() bool               { return false }
func (t *sluiceRESP) Reset(ctx context.Context) error { return t.srv.restart(ctx) }
func (t *sluiceRESP) Close() error                    { return nil }

func (t *sluiceRESP) Dial(ctx context.Context, k LimitKind) (Conn, error) {
	l := t.limits
	var args func(key string) []any
	switch k {
	case TokenBucket:
		max, refill, amount := strconv.FormatInt(l.TBMax, 10), strconv.FormatInt(l.TBRefill.Milliseconds(), 10), strconv.FormatInt(l.TBAmount, 10)
		args = func(key string) []any { return []any{"RL.PREDUCE", key, max, refill, "REFILL", amount} }
	case GCRA:
		burst, count, period := strconv.FormatInt(l.GCRABurst, 10), strconv.FormatInt(l.GCRACount, 10), strconv.FormatInt(int64(l.GCRAPeriod.Seconds()), 10)
		args = func(key string) []any { return []any{"CL.THROTTLE", key, burst, count, period, "1"} }
	default:
		return nil, fmt.Errorf("sluice RESP: no command for limit %q", k)
	}
	rc := redis.NewClient(&redis.Options{Network: "unix", Addr: t.srv.respPath(), PoolSize: 1, Protocol: 2, DisableIdentity: true})
	if err := rc.Ping(ctx).Err(); err != nil {
		rc.Close()
		return nil, err
	}
	return &respConn{rc: rc, args: args, allowed: respAllowed(k)}, nil
}

// respAllowed reads one reply: RL.PREDUCE answers the tokens the bucket
// held before the deduction (smyte's reply), so a cost-1 request was
// allowed when it is at least 1; CL.THROTTLE answers an array whose first
// element is 0 when allowed.
func respAllowed(k LimitKind) func(v any) (bool, error) {
	if k == GCRA {
		return func(v any) (bool, error) {
			limited, err := firstOf(v, 5, "CL.THROTTLE")
			return err == nil && limited == 0, err
		}
	}
	return func(v any) (bool, error) {
		n, ok := v.(int64)
		if !ok {
			return false, fmt.Errorf("RL.PREDUCE: unexpected reply %v", v)
		}
		return n > 0, nil
	}
}

// respConn sends one command or a pipeline of them on one go-redis
// connection.
type respConn struct {
	rc      *redis.Client
	args    func(key string) []any
	allowed func(any) (bool, error)
	cmds    []*redis.Cmd
}

func (c *respConn) Do(ctx context.Context, keys []string) (int, error) {
	if len(keys) == 1 {
		v, err := c.rc.Do(ctx, c.args(keys[0])...).Result()
		if err != nil {
			return 0, err
		}
		ok, err := c.allowed(v)
		return b2i(ok), err
	}
	pipe := c.rc.Pipeline()
	c.cmds = c.cmds[:0]
	for _, k := range keys {
		c.cmds = append(c.cmds, pipe.Do(ctx, c.args(k)...))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	return countAllowed(c.cmds, c.allowed)
}

func (c *respConn) Close() error { return c.rc.Close() }

func countAllowed(cmds []*redis.Cmd, allowed func(any) (bool, error)) (int, error) {
	n := 0
	for _, cmd := range cmds {
		v, err := cmd.Result()
		if err != nil {
			return n, err
		}
		ok, err := allowed(v)
		if err != nil {
			return n, err
		}
		n += b2i(ok)
	}
	return n, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
