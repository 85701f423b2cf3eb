// Package lua holds the Redis scripts the comparison runs: the token
// bucket and GCRA a Redis user would write, with the same parameters as
// Sluice's limits. The Go load generator embeds them; the Python side
// (bench/python) reads the same files, and so do the global limits'
// benchmarks (make bench-global, internal/global's BenchmarkGlobal): the
// token bucket is what their applications calling Redis + Lua run.
package lua

import _ "embed"

var (
	// TokenBucket is token_bucket.lua: smyte/ratelimit's discrete refill.
	//go:embed token_bucket.lua
	TokenBucket string
	// GCRA is gcra.lua: redis-cell's parameters.
	//go:embed gcra.lua
	GCRA string
)
