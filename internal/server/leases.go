package server

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/proto"
)

// Concurrency leases. A connection remembers the leases it took and has not
// given back; when it closes (its client exited or died), the server gives
// them back. A lease the sidecar cannot give back (the sidecar itself was
// killed) expires at its limit's lease time.

// maxLeasesPerConn bounds the leases one connection holds at once, so a
// client cannot grow the server's memory without bound: LEASE beyond it is
// refused (leases that expired without a RELEASE are forgotten first).
const maxLeasesPerConn = 4096

var errTooManyLeases = fmt.Errorf("%w: this connection holds %d leases already; release some first",
	proto.ErrStatusBusy, maxLeasesPerConn)

// heldLease is a lease a connection took.
type heldLease struct {
	limit   engine.Limit
	key     string
	id      int64
	expires int64 // Unix ns, the server's clock: from then on it holds nothing
}

// leaseOp answers LEASE.
func (s *server) leaseOp(b []byte, op *proto.Op, c *conn, l *engine.Limit, nl *namedLimit, start time.Time) []byte {
	if len(c.leases) >= maxLeasesPerConn {
		c.forgetExpired(c.now)
		if len(c.leases) >= maxLeasesPerConn {
			return c.fail(b, op.Code, errTooManyLeases)
		}
	}
	var d bucket.Decision
	id, err := s.engine.Lease(&d, op.Key, l, c.at(c.now))
	if err != nil {
		s.recordError(nl, l, err)
		return c.fail(b, op.Code, err)
	}
	if id > 0 {
		expires := c.now + min(l.Bucket().Lease, math.MaxInt64-c.now)
		c.leases = append(c.leases, heldLease{*l, string(op.Key), id, expires})
		if until := time.Now().Add(time.Duration(l.Bucket().Lease)); until.After(c.leasedUntil) {
			c.leasedUntil = until
		}
		c.n.allowed++
	} else {
		c.n.denied++
	}
	s.record(nl, l.Bucket().Algorithm, d.Allowed, false, start)
	w := proto.Decision(d)
	return proto.AppendLeaseResult(b, &w, uint64(id))
}

// releaseOp answers RELEASE. Any connection may give a lease back, not only
// the one that took it.
func (s *server) releaseOp(b []byte, op *proto.Op, c *conn, l *engine.Limit) []byte {
	var d bucket.Decision
	id := int64(op.Lease)
	released, err := s.engine.Release(&d, op.Key, l, id, c.at(c.now))
	if err != nil {
		return c.fail(b, op.Code, err)
	}
	c.forget(op.Key, id)
	w := proto.Decision(d)
	return proto.AppendReleaseResult(b, released, &w)
}

// idleDeadline is when the connection, idle from now, is closed:
// IdleTimeout from now or, while it holds leases, not before the last of
// them expires. A client may hold a lease quietly for longer than the idle
// timeout (a job that takes ten minutes, leased for an hour); closing its
// connection would give the lease back while the job still runs.
func (st *stream) idleDeadline(now time.Time) time.Time {
	d := now.Add(st.s.cfg.IdleTimeout)
	if len(st.leases) > 0 && st.leasedUntil.After(d) {
		return st.leasedUntil
	}
	return d
}

// forgetExpired drops the leases that expired by now: they hold no slot.
func (st *stream) forgetExpired(now int64) {
	st.leases = slices.DeleteFunc(st.leases, func(h heldLease) bool { return h.expires <= now })
}

// forget drops lease id of key from the connection's leases, if it is there.
func (st *stream) forget(key []byte, id int64) {
	for i := range st.leases {
		if h := &st.leases[i]; h.id == id && h.key == string(key) {
			last := len(st.leases) - 1
			st.leases[i] = st.leases[last]
			st.leases = st.leases[:last]
			return
		}
	}
}

// releaseLeases gives back every lease the connection still holds: it has
// closed. Leases given back meanwhile by another connection, or expired,
// are not held any more and release nothing. A connection closed because
// the sidecar is stopping keeps its leases: its client is still running
// what it leased, and gives the lease back through the next sidecar (the
// leases are in the state file), or it expires.
func (st *stream) releaseLeases() {
	if len(st.leases) == 0 || st.s.draining.Load() {
		return
	}
	now := engine.At(st.s.now())
	var d bucket.Decision
	for i := range st.leases {
		h := &st.leases[i]
		st.s.engine.Release(&d, []byte(h.key), &h.limit, h.id, now)
	}
	st.leases = nil
}
