package compare

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/bench/lua"
)

// redisTarget is a real redis-server, persistence off, over its Unix
// socket or TCP loopback, with go-redis: the token bucket and GCRA as Lua
// scripts (EVALSHA), the fixed window as INCR and EXPIRE NX sent together.
type redisTarget struct {
	srv     *redisServer
	network string // "unix" or "tcp"
	limits  Limits
	tb, gc  *redis.Script
}

func newRedisTarget(srv *redisServer, network string, l Limits) *redisTarget {
	return &redisTarget{srv: srv, network: network, limits: l,
		tb: redis.NewScript(lua.TokenBucket), gc: redis.NewScript(lua.GCRA)}
}

func (t *redisTarget) Name() string {
	if t.network == "tcp" {
		return "redis (tcp)"
	}
	return "redis (unix)"
}
func (t *redisTarget) Family() string          { return "redis" }
func (t *redisTarget) Supports(LimitKind) bool { return true }
func (t *redisTarget) Multiplexed() bool       { return false }
func (t *redisTarget) Close() error            { return nil } // the server is shared

func (t *redisTarget) addr() string {
	if t.network == "tcp" {
		return t.srv.tcpAddr()
	}
	return t.srv.socketPath()
}

func (t *redisTarget) client(pool int) *redis.Client {
	return redis.NewClient(&redis.Options{Network: t.network, Addr: t.addr(), PoolSize: pool, Protocol: 2, DisableIdentity: true})
}

// Reset empties the server (FLUSHALL) and loads the scripts.
func (t *redisTarget) Reset(ctx context.Context) error {
	rc := t.client(1)
	defer rc.Close()
	if err := rc.FlushAll(ctx).Err(); err != nil {
		return fmt.Errorf("redis FLUSHALL: %w", err)
	}
	for _, s := range []*redis.Script{t.tb, t.gc} {
		if err := s.Load(ctx, rc).Err(); err != nil {
			return fmt.Errorf("redis SCRIPT LOAD: %w", err)
		}
	}
	return nil
}

func (t *redisTarget) Dial(ctx context.Context, k LimitKind) (Conn, error) {
	rc := t.client(1)
	if err := rc.Ping(ctx).Err(); err != nil {
		rc.Close()
		return nil, err
	}
	return &redisConn{rc: rc, kind: k, t: t, argv: t.argv(k)}, nil
}

// argv is the script's arguments for limit k: the same parameters the
// Sluice targets decide with.
func (t *redisTarget) argv(k LimitKind) []any {
	l := t.limits
	switch k {
	case TokenBucket:
		return []any{l.TBMax, l.TBRefill.Milliseconds(), l.TBAmount, 1}
	case GCRA:
		return []any{l.GCRABurst, l.GCRACount, l.GCRAPeriod.Milliseconds(), 1}
	}
	return nil
}

type redisConn struct {
	rc    *redis.Client
	kind  LimitKind
	t     *redisTarget
	argv  []any
	keys  [1]string
	cmds  []*redis.Cmd
	incrs []*redis.IntCmd
}

func (c *redisConn) script() *redis.Script {
	if c.kind == GCRA {
		return c.t.gc
	}
	return c.t.tb
}

func (c *redisConn) Do(ctx context.Context, keys []string) (int, error) {
	if c.kind == FixedWindow {
		return c.window(ctx, keys)
	}
	s := c.script()
	if len(keys) == 1 {
		c.keys[0] = keys[0]
		v, err := s.EvalSha(ctx, c.rc, c.keys[:], c.argv...).Result()
		if err != nil {
			return 0, err
		}
		ok, err := luaAllowed(v)
		return b2i(ok), err
	}
	pipe := c.rc.Pipeline()
	c.cmds = c.cmds[:0]
	for _, k := range keys {
		c.cmds = append(c.cmds, s.EvalSha(ctx, pipe, []string{k}, c.argv...))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	return countAllowed(c.cmds, luaAllowed)
}

// window is the classic Redis fixed window: INCR the key, EXPIRE it NX
// (only when it has no expiry yet: the window starts at its first
// request), both in one round trip; allowed while the count is within the
// limit.
func (c *redisConn) window(ctx context.Context, keys []string) (int, error) {
	l := c.t.limits
	pipe := c.rc.Pipeline()
	c.incrs = c.incrs[:0]
	for _, k := range keys {
		c.incrs = append(c.incrs, pipe.Incr(ctx, k))
		pipe.ExpireNX(ctx, k, l.FWWindow)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, err
	}
	n := 0
	for _, in := range c.incrs {
		if in.Val() <= l.FWLimit {
			n++
		}
	}
	return n, nil
}

func (c *redisConn) Close() error { return c.rc.Close() }

// luaAllowed reads a script's reply, {allowed, remaining}.
func luaAllowed(v any) (bool, error) {
	n, err := firstOf(v, 2, "lua")
	return n == 1, err
}

// firstOf returns the first element of a reply that must be an array of
// n elements starting with an integer.
func firstOf(v any, n int, what string) (int64, error) {
	if a, ok := v.([]any); ok && len(a) == n {
		if x, ok := a[0].(int64); ok {
			return x, nil
		}
	}
	return 0, fmt.Errorf("%s: unexpected reply %v", what, v)
}

// usedMemory reads INFO memory's used_memory.
func usedMemory(ctx context.Context, rc *redis.Client) (int64, error) {
	info, err := rc.InfoMap(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(info["Memory"]["used_memory"], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("redis INFO memory: used_memory: %w", err)
	}
	return v, nil
}
