package global

import (
	"math/bits"
	"sync/atomic"
)

// Stats are a Store's counters since New. Every field only grows.
type Stats struct {
	// Requests is the decisions asked for (each Decide call that reached
	// a shard's queue).
	Requests uint64
	// RoundTrips is the pipelines sent; Commands the script calls in them
	// (EVALSHA, and EVAL after a NOSCRIPT). Commands/Requests is the Redis
	// commands per decision; Requests/RoundTrips the mean batch size.
	RoundTrips, Commands uint64
	// Batches counts pipelines by size: Batches[i] those of 2^i to
	// 2^(i+1)-1 calls (the last also counts every larger one).
	Batches [10]uint64
	// Errors is the requests that returned an error; Timeouts those of
	// them that gave up waiting for Redis.
	Errors, Timeouts uint64
	// ScriptLoads is the pipelines that had to load the script (NOSCRIPT:
	// a restarted Redis, a promoted replica).
	ScriptLoads uint64
	// Unreplicated is the pipelines whose decisions fewer replicas than
	// WaitReplicas acknowledged in time (their requests failed).
	Unreplicated uint64
}

type counters struct {
	requests, roundTrips, commands atomic.Uint64
	batches                        [10]atomic.Uint64
	errors, timeouts, scriptLoads  atomic.Uint64
	unreplicated                   atomic.Uint64
}

// batch counts a pipeline of n >= 1 calls.
func (c *counters) batch(n int) {
	c.batches[min(bits.Len(uint(n))-1, len(c.batches)-1)].Add(1)
}

// Stats returns the Store's counters. Each is read atomically; together
// they are not one snapshot.
func (s *Store) Stats() Stats {
	c := &s.stats
	st := Stats{
		Requests:     c.requests.Load(),
		RoundTrips:   c.roundTrips.Load(),
		Commands:     c.commands.Load(),
		Errors:       c.errors.Load(),
		Timeouts:     c.timeouts.Load(),
		ScriptLoads:  c.scriptLoads.Load(),
		Unreplicated: c.unreplicated.Load(),
	}
	for i := range c.batches {
		st.Batches[i] = c.batches[i].Load()
	}
	return st
}
