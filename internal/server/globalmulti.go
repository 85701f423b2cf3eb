package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/global"
	"github.com/sluicehq/sluice/proto"
)

// A MULTI of global limits: its items are decided together in one call of
// Redis's multi script (global.Store.Multi), all or nothing, as a local
// MULTI decides its items in the table. One script runs on one Redis
// master, so every item's Redis key must lie in one Cluster slot: the keys
// share a hash tag (the key's text up to its first "}", since a global
// bucket's Redis key is prefix{key}:...). The rule is the same on one
// Redis as on a Cluster, so that a configuration that works on the one
// works on the other. A MULTI that mixes global and local items is
// refused: no one call decides a bucket in Redis and one in the table
// together.

var (
	// errMultiMixed answers a MULTI with global and local items.
	errMultiMixed = errors.New("a MULTI cannot mix limits decided fleet-wide (scope: global) with limits decided on this host: send the global items in a MULTI of their own")
	// errMultiSlots answers a MULTI of global items whose keys lie in
	// different Redis Cluster slots.
	errMultiSlots = errors.New("the global items of a MULTI must share a hash tag, so that one Redis decides them together")
)

// globalMultiScratch holds a global MULTI's or list's requests between
// requests.
type globalMultiScratch struct {
	reqs   [proto.MaxMulti]global.Request
	ps     [proto.MaxMulti]global.Policy
	nls    [proto.MaxMulti]*namedLimit
	limits [proto.MaxMulti]config.Limit // a global list's limits, each alone (listRemote)
	calls  [proto.MaxMulti]globalCall
}

// globalItems returns the named limits of op's items (nil for an item that
// names none, or a name the config lacks) in nls, and reports whether any
// is global: the MULTI is then a global MULTI.
func (s *server) globalItems(op *proto.Op, nls []*namedLimit) bool {
	any := false
	for i := range op.NItems {
		nls[i] = nil
		it := &op.Items[i]
		if it.Name == nil {
			continue
		}
		if nl, err := s.lookup(it.Name); err == nil {
			nls[i] = nl.forKey(it.Key)
			any = any || nls[i].cfg.Scope == config.Global
		}
	}
	return any
}

// checkGlobalMulti checks that the items of op, a MULTI with a global
// item (named nls), are all global limits whose keys share a slot under
// prefix, and each a request a global limit takes.
func (s *server) checkGlobalMulti(op *proto.Op, nls []*namedLimit, prefix string) error {
	if op.Flags&proto.FlagAt != 0 {
		return engine.ErrRemoteTime
	}
	slot := 0
	for i := range op.NItems {
		it, nl := &op.Items[i], nls[i]
		if it.Name != nil && nl == nil {
			_, err := s.lookup(it.Name)
			return fmt.Errorf("item %d: %w", i, err)
		}
		if nl == nil || nl.cfg.Scope != config.Global {
			return fmt.Errorf("item %d: %w", i, errMultiMixed)
		}
		if len(nl.parts) > 1 {
			return fmt.Errorf("item %d: %w", i, errListMulti)
		}
		if err := checkItem(it, nl); err != nil {
			return fmt.Errorf("item %d: %w", i, err)
		}
		sl := global.KeySlot(prefix, &nl.cfg.Bucket, string(it.Key))
		if i == 0 {
			slot = sl
		} else if sl != slot {
			return fmt.Errorf("%w: item %d's key %q and item 0's key %q lie in different Redis Cluster slots; "+
				"give the keys a common tag in braces, as {tenant42}:login and {tenant42}:signup", errMultiSlots, i, it.Key, op.Items[0].Key)
		}
	}
	return nil
}

// checkItem checks a MULTI item on a global limit as a local MULTI checks
// its items: its key, its cost, and a concurrency limit (leased only).
func checkItem(it *proto.MultiItem, nl *namedLimit) error {
	if err := engine.CheckKeyCost(it.Key, it.Cost); err != nil {
		return err
	}
	if nl.cfg.Bucket.Algorithm == bucket.Concurrency {
		return engine.ErrLeaseOnly
	}
	return nil
}

// globalMulti answers op, a MULTI whose items are global limits (nls):
// decided in Redis together, or, if Redis does not answer in time, by the
// strictest of the items' outage policies (global.Fallback.Multi). In a
// frame of version 7 each item's decision carries the marks an ACQUIRE of
// the item would: the outage policy that decided (the strictest) and
// whether the item's limit fails closed.
func (s *server) globalMulti(b []byte, op *proto.Op, c *conn, nls []*namedLimit) []byte {
	g := s.global
	if g == nil {
		return c.fail(b, op.Code, errNoGlobal)
	}
	if err := s.checkGlobalMulti(op, nls, g.store.Prefix()); err != nil {
		return c.fail(b, op.Code, err)
	}
	gm := &c.globalMulti
	for i := range op.NItems {
		it := &op.Items[i]
		gm.reqs[i] = global.Request{Limit: nls[i].cfg.Bucket, Key: string(it.Key), Cost: it.Cost, Flags: engine.FlagsFromProto(it.Flags)}
		gm.ps[i] = nls[i].cfg.Policy()
	}
	ds, allowed, src, err := c.decideGlobalMulti(g, op, op.NItems, c.multi.ds[:0])
	c.multi.ds = ds
	b = c.multiResult(b, op, ds, allowed, err)
	if err != nil || c.version < proto.ListVersion { // older clients read a boolean
		return b
	}
	o := proto.OutageNone
	if src == global.FromPolicy {
		o = wireOutage(global.Strictest(gm.ps[:op.NItems]))
	}
	for i := range op.NItems {
		b = proto.MarkMulti(b, op.NItems, i, proto.Marks{Outage: o, FailsClosed: nls[i].cfg.OnUnavailable == global.Closed})
	}
	return b
}

// decideGlobalMulti decides the first n of c.globalMulti's requests
// together, all or nothing, in Redis or by their policies (Fallback.Multi),
// Redis answering by the time op's deadline says, and appends their
// decisions to ds.
func (c *conn) decideGlobalMulti(g *globalLimits, op *proto.Op, n int, ds []bucket.Decision) ([]bucket.Decision, bool, global.Source, error) {
	gm := &c.globalMulti
	arrived := c.arrived
	if arrived.IsZero() {
		arrived = time.Now()
	}
	ctx, cancel := context.WithDeadline(context.Background(), g.answerBy(arrived, op.Flags, op.Deadline))
	defer cancel()
	c.leaveLoop()
	ds, allowed, src, err := g.fallback.Multi(ctx, gm.reqs[:n], gm.ps[:n], global.AllOrNothing, ds)
	clear(gm.reqs[:n]) // drop the keys
	return ds, allowed, src, err
}

// A named list of scope global: its limits are decided in Redis on the
// request's key, an ACQUIRE all or nothing in one call of the multi script
// (one key: one slot), a PEEK, REFUND or RESET on each limit's bucket, as
// a local list's are in the table; and by the list's outage policy when
// Redis does not answer in time (an ACQUIRE all or nothing on this host's
// share of each limit). A global list is never leased (the config refuses
// it: leases cannot decide several limits all or nothing).

// globalListAcquire decides op, an ACQUIRE of the global list nl (req as
// the engine takes it), appending one decision per limit to ds, and says
// which outage policy decided, if one did.
func (s *server) globalListAcquire(ds []bucket.Decision, op *proto.Op, nl *namedLimit, c *conn, req *engine.Request) ([]bucket.Decision, proto.Outage, error) {
	g := s.global
	if g == nil {
		return ds, proto.OutageNone, errNoGlobal
	}
	if req.OwnTime {
		return ds, proto.OutageNone, engine.ErrRemoteTime
	}
	if err := engine.CheckKeyCost(op.Key, op.N); err != nil {
		return ds, proto.OutageNone, err
	}
	gm := &c.globalMulti
	parts := nl.parts
	for i := range parts {
		gm.reqs[i] = global.Request{Limit: *parts[i].Bucket(), Key: string(op.Key), Cost: op.N, Flags: req.Flags}
		gm.ps[i] = nl.cfg.Policy()
	}
	ds, _, src, err := c.decideGlobalMulti(g, op, len(parts), ds)
	if src == global.FromPolicy {
		return ds, outageOf(nl.cfg), err
	}
	return ds, proto.OutageNone, err
}

// listRemote returns the Remote that decides op on limit i of the global
// list nl in Redis (a PEEK, REFUND or RESET of that limit alone).
func (c *conn) listRemote(op *proto.Op, nl *namedLimit, i int) engine.Remote {
	gm := &c.globalMulti
	gm.limits[i] = *nl.cfg
	gm.limits[i].Bucket, gm.limits[i].Engine, gm.limits[i].More = *nl.parts[i].Bucket(), nl.parts[i], nil
	gm.calls[i] = c.globalCall(op, nl)
	gm.calls[i].l = &gm.limits[i]
	return &gm.calls[i]
}

// markGlobal marks the answer that ends b, a decision of the global limit
// nl that outage o decided (proto.OutageNone: Redis), for a client that
// reads the marks (version 4), as globalOp marks a single limit's.
func (c *conn) markGlobal(b []byte, nl *namedLimit, o proto.Outage) []byte {
	if c.version < 4 || nl.cfg.Scope != config.Global {
		return b
	}
	b = proto.MarkOutage(b, o)
	if nl.cfg.OnUnavailable == global.Closed {
		b = proto.MarkFailsClosed(b)
	}
	return b
}
