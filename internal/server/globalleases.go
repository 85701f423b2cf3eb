package server

import (
	"context"
	"math"
	"time"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/global"
	"github.com/sluicehq/sluice/proto"
)

// Global concurrency limits: a LEASE takes an entry of the bucket in Redis
// (global.Store.Hold), held until its RELEASE or its expiry, and the
// connection that took it remembers it as it does a local lease: when the
// connection closes (its client exited or was killed), this sidecar gives
// it back in Redis. A sidecar that dies gives nothing back: its holders'
// entries expire in Redis at their lease time.

// globalLeaseOp answers LEASE on a global concurrency limit.
func (s *server) globalLeaseOp(b []byte, op *proto.Op, nl *namedLimit, c *conn) []byte {
	if len(c.leases) >= maxLeasesPerConn {
		c.forgetExpired(c.now)
		if len(c.leases) >= maxLeasesPerConn {
			return c.fail(b, op.Code, errTooManyLeases)
		}
	}
	l := nl.cfg
	ctx, cancel := s.global.opContext(c, op)
	defer cancel()
	d, id, src, err := s.global.fallback.Hold(ctx, global.Request{Limit: l.Bucket, Key: string(op.Key), Lease: c.leaseID()}, l.Policy())
	if err != nil {
		s.recordError(nl, &l.Engine, err)
		return c.fail(b, op.Code, err)
	}
	if id != 0 {
		expires := c.now + min(l.Bucket.Lease, math.MaxInt64-c.now)
		key := string(op.Key)
		c.leases = append(c.leases, heldLease{key: key, id: id, expires: expires, global: l})
		s.holders.add(id, &c.stream, key, expires)
		if until := time.Now().Add(time.Duration(l.Bucket.Lease)); until.After(c.leasedUntil) {
			c.leasedUntil = until
		}
		c.n.allowed++
	} else {
		c.n.denied++
	}
	s.record(nl, bucket.Concurrency, d.Allowed, false, time.Time{})
	w := proto.Decision(d)
	return c.markLease(proto.AppendLeaseResult(b, &w, uint64(id)), proto.OpLease, l, src)
}

// markLease marks the LEASE or RELEASE result (op) that ends b with the
// outage policy of l that made it, if one did (src), for a client that
// reads the mark (version 5).
func (c *conn) markLease(b []byte, op proto.Opcode, l *config.Limit, src global.Source) []byte {
	if src != global.FromPolicy || c.version < 5 {
		return b
	}
	return proto.MarkLeaseOutage(b, op, outageOf(l))
}

// globalReleaseOp answers RELEASE on a global concurrency limit, with the
// checks of releaseOp.
func (s *server) globalReleaseOp(b []byte, op *proto.Op, nl *namedLimit, c *conn) []byte {
	id := int64(op.Lease)
	if !c.holds(op.Key, id) {
		if p, held := s.holders.of(id, op.Key, c.now); held && !p.sameUser(c.peer) {
			return c.fail(b, op.Code, errNotHolder)
		}
	}
	ctx, cancel := s.global.opContext(c, op)
	defer cancel()
	d, released, src, err := s.global.fallback.Release(ctx, global.Request{Limit: nl.cfg.Bucket, Key: string(op.Key), Lease: id}, nl.cfg.Policy())
	if err != nil {
		return s.released(b, op, c, &d, released, err)
	}
	return c.markLease(s.released(b, op, c, &d, released, nil), proto.OpRelease, nl.cfg, src)
}

// opContext is the context of a global operation: Redis's answer is
// awaited until answerBy.
func (g *globalLimits) opContext(c *conn, op *proto.Op) (context.Context, context.CancelFunc) {
	arrived := c.arrived
	if arrived.IsZero() {
		arrived = time.Now()
	}
	return context.WithDeadline(context.Background(), g.answerBy(arrived, op.Flags, op.Deadline))
}

// releaseGlobal gives back, in Redis, a global lease of a connection that
// closed.
func (g *globalLimits) releaseGlobal(l *config.Limit, key string, id int64) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*g.timeout)
	defer cancel()
	_, _, _, err := g.fallback.Release(ctx, global.Request{Limit: l.Bucket, Key: key, Lease: id}, l.Policy())
	return err
}

// releaseGlobal gives back h, a global lease; a sidecar without Redis
// (its configuration changed) has nothing to give it back to.
func (s *server) releaseGlobal(h *heldLease) error {
	if s.global == nil {
		return errNoGlobal
	}
	return s.global.releaseGlobal(h.global, h.key, h.id)
}
