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
	// CallrSlidingLog is callr_sliding_log.lua: a rolling window on a
	// sorted set, CALLR's design (beside sliding_log).
	//go:embed callr_sliding_log.lua
	CallrSlidingLog string
	// FigmaCounters is figma_counters.lua: sub-window counters in a hash,
	// Figma's design (beside window_counters).
	//go:embed figma_counters.lua
	FigmaCounters string
)
