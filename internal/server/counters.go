package server

import (
	"sync/atomic"

	"github.com/sluicehq/sluice/internal/metrics"
)

// counters are the server's statistics. STATS, INFO and the metrics
// report them through metrics.Counters, the one list of what each reports.
type counters struct {
	conns, connsTotal, connsRejected atomic.Int64
	peersDenied                      atomic.Int64
	frames, ops, malformed, timeouts atomic.Int64
	denied, allowed, errors          atomic.Int64
	shadowDenied                     atomic.Int64 // denials of shadow limits, answered as allowed
	buffered                         atomic.Int64 // bytes of connection buffers
	lockWaits                        atomic.Int64 // requests that waited for a lock past the first spin
	handoffs                         atomic.Int64 // of those, the ones that handed their event loop over
	multiplexed                      atomic.Int64 // connections an event loop found multiplexed (TransportAuto)
	polls                            atomic.Int64 // waits an event loop began by polling for requests
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

// read returns the counters' values.
func (c *counters) read() metrics.ServerStats {
	return metrics.ServerStats{
		Conns: c.conns.Load(), ConnsTotal: c.connsTotal.Load(), ConnsRejected: c.connsRejected.Load(),
		PeersDenied: c.peersDenied.Load(), Frames: c.frames.Load(), Ops: c.ops.Load(),
		Malformed: c.malformed.Load(), Timeouts: c.timeouts.Load(), Allowed: c.allowed.Load(),
		Denied: c.denied.Load(), Errors: c.errors.Load(), ShadowDenied: c.shadowDenied.Load(),
		LockWaits: c.lockWaits.Load(), Handoffs: c.handoffs.Load(), Multiplexed: c.multiplexed.Load(), Polls: c.polls.Load(),
		Buffered: c.buffered.Load(),
	}
}

// snapshot reads the table's and the server's counters, and the global
// limits' if withGlobal and there are some: what STATS and INFO report.
func (s *server) snapshot(withGlobal bool) metrics.Snapshot {
	snap := metrics.Snapshot{Table: s.tableCounters(), Server: s.stats.read()}
	snap.Server.LoopSpinLimit = int64(s.loops.spinLimit())
	if g := s.global; g != nil && withGlobal {
		gs := g.stats()
		snap.Global = &gs
	}
	if s.rec != nil {
		snap.Overrides = s.rec.Overrides()
	}
	return snap
}

// tableCounters reads the table's counters (all but its live buckets).
func (s *server) tableCounters() metrics.TableStats {
	st, g := s.engine.Stats(), s.engine.Geometry()
	return metrics.TableStats{Slots: st.SlotCount, SlotSize: uint64(g.SlotSize), FileSize: uint64(g.FileSize),
		UsedSlots: st.Used, TableFull: st.TableFull, Reclaimed: st.Reclaims, Torn: st.Torn,
		ArenaCells: st.ArenaCells, ArenaUsed: st.ArenaUsed, ArenaFull: st.ArenaFull,
		Inserts: st.Inserts, LockedOnOpen: st.LockedOnOpen, Syncs: st.Syncs, SyncErrors: st.SyncErrors}
}
