package server

import (
	"context"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/global"
	"github.com/sluicehq/sluice/proto"
)

// Global concurrency limits: a LEASE takes an entry of the bucket in Redis
// (global.Store.Hold, through globalCall), held until its RELEASE or its
// expiry, and the connection that took it (leaseOp) remembers it as it
// does a local lease: when the connection closes (its client exited or was
// killed), this sidecar gives it back in Redis. A sidecar that dies gives
// nothing back: its holders' entries expire in Redis at their lease time.

// leaseOutage is the outage mark of a LEASE or RELEASE of l that src
// decided: none unless the outage policy did.
func leaseOutage(src global.Source, l *config.Limit) proto.Outage {
	if src != global.FromPolicy {
		return proto.OutageNone
	}
	return outageOf(l)
}

// markLease marks the LEASE or RELEASE result (op) that ends b with the
// outage policy o that made it, if one did, for a client that reads the
// mark (version 5).
func (c *conn) markLease(b []byte, op proto.Opcode, o proto.Outage) []byte {
	if o == proto.OutageNone || c.version < 5 {
		return b
	}
	return proto.MarkLeaseOutage(b, op, o)
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
