package server

import "sync/atomic"

// counters are the server's statistics, reported by STATS.
type counters struct {
	conns, connsTotal, connsRejected atomic.Int64
	peersDenied                      atomic.Int64
	frames, ops, malformed, timeouts atomic.Int64
	denied, allowed, errors          atomic.Int64
	shadowDenied                     atomic.Int64 // denials of shadow limits, answered as allowed
	buffered                         atomic.Int64 // bytes of connection buffers
	lockWaits                        atomic.Int64 // requests that waited for a lock past the first spin
	handoffs                         atomic.Int64 // of those, the ones that handed their event loop over
}

// connCounters are a connection's share of counters, kept without atomics
// while it handles a batch and added to the server's once per batch.
type connCounters struct {
	frames, ops, malformed, denied, allowed, errors, shadowDenied int64
}

// add moves n into the server's counters and zeroes it.
func (c *counters) add(n *connCounters) {
	addNonZero(&c.frames, n.frames)
	addNonZero(&c.ops, n.ops)
	addNonZero(&c.malformed, n.malformed)
	addNonZero(&c.denied, n.denied)
	addNonZero(&c.allowed, n.allowed)
	addNonZero(&c.errors, n.errors)
	addNonZero(&c.shadowDenied, n.shadowDenied)
	*n = connCounters{}
}

func addNonZero(dst *atomic.Int64, v int64) {
	if v != 0 {
		dst.Add(v)
	}
}
