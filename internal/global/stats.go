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
	// RoundTrips is the pipelines sent; Commands the commands in them
	// (FCALL; FUNCTION LOAD and FCALL again when Redis lacked the library;
	// EVALSHA, and EVAL after a NOSCRIPT, when it refuses functions).
	// Commands/Requests is the Redis commands per decision;
	// Requests/RoundTrips the mean batch size.
	RoundTrips, Commands uint64
	// Batches counts pipelines by size: Batches[i] those of 2^i to
	// 2^(i+1)-1 calls (the last also counts every larger one).
	Batches [10]uint64
	// Errors is the requests that returned an error; Timeouts those of
	// them whose deadline passed before Redis answered; Shed those
	// refused at once because their shard was down.
	Errors, Timeouts, Shed uint64
	// Misses is the pipelines that got no reply within the timeout.
	Misses uint64
	// ToDown and ToUp count the shards' transitions between up and down;
	// Down is the shards down now; Probes the probes sent to them.
	ToDown, ToUp, Probes uint64
	Down                 int
	// ScriptLoads is the pipelines that sent calls again after Redis
	// lacked the library (a restarted or new Redis), refused functions, or
	// lacked a script (NOSCRIPT).
	ScriptLoads uint64
	// Redirects is the calls answered MOVED or ASK (a slot that moved)
	// and sent again through the Cluster client.
	Redirects uint64
	// Unreplicated is the pipelines whose decisions fewer replicas than
	// WaitReplicas acknowledged in time (their requests failed).
	Unreplicated uint64
}

type counters struct {
	requests, roundTrips, commands atomic.Uint64
	batches                        [10]atomic.Uint64
	errors, timeouts, scriptLoads  atomic.Uint64
	unreplicated, redirects        atomic.Uint64
	shed, misses                   atomic.Uint64
	toDown, toUp, probes           atomic.Uint64
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
		Redirects:    c.redirects.Load(),
		Shed:         c.shed.Load(),
		Misses:       c.misses.Load(),
		ToDown:       c.toDown.Load(),
		ToUp:         c.toUp.Load(),
		Probes:       c.probes.Load(),
	}
	s.mu.Lock()
	for _, sh := range s.shards {
		if sh.down.Load() {
			st.Down++
		}
	}
	s.mu.Unlock()
	for i := range c.batches {
		st.Batches[i] = c.batches[i].Load()
	}
	return st
}
