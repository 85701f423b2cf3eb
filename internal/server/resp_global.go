package server

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/global"
)

// Redis-protocol commands decided fleet-wide. The config's resp section
// (config.Route) gives the keys of RL.* and CL.THROTTLE a scope: a command
// whose key a global route matches is decided by the global path (in
// Redis, exact or from leases, with the route's outage policy) under the
// limit its own parameters make, and answered exactly as a local one.

// route returns the global route that decides key, or nil: the key is
// local.
func (s *server) route(key []byte) *config.Route {
	if len(key) == 0 || s.cfg.Limits == nil { // an empty key is refused locally
		return nil
	}
	set := s.cfg.Limits.Load()
	if len(set.Routes()) == 0 {
		return nil
	}
	if r := set.Route(key); r != nil && r.Limit.Scope == config.Global {
		return r
	}
	return nil
}

// globalCall returns the Remote that decides req by route r in Redis: the
// route's settings, the command's parameters.
func (rc *respConn) globalCall(req *rlRequest, r *config.Route) *globalCall {
	l := r.Limit
	l.Bucket = *req.limit.Bucket()
	return &globalCall{g: rc.s.global, l: &l, arrived: time.Now(), blocking: rc.handOff}
}

// routedKey returns the key of a rate-limit command (one with parse), which
// the config's routes may send to Redis, or nil for any other command.
func (c *respCommand) routedKey(args [][]byte) []byte {
	if c.parse == nil || c.key <= 0 || c.key >= len(args) {
		return nil
	}
	return args[c.key]
}

// txScope checks a rate-limit command being queued in tx, whose key (a
// routed key) is key, against the commands queued before it: a
// transaction's rate-limit commands are all local, or all global with
// keys in one Redis Cluster slot (decided together in one script call,
// execGlobal). It returns the error reply that refuses the command, or "".
func (rc *respConn) txScope(tx *respTx, c *respCommand, args [][]byte, key []byte) string {
	r := rc.s.route(key)
	if r == nil {
		if tx.route != nil {
			return globalMixed(tx.route)
		}
		tx.local = true
		return ""
	}
	if tx.local {
		return globalMixed(r)
	}
	var req rlRequest
	if rc.s.global == nil || c.parse(rc, &req, args) != "" || req.refund {
		return "" // answered at EXEC, on its own
	}
	slot := global.KeySlot(rc.s.global.store.Prefix(), req.limit.Bucket(), string(key))
	if tx.route == nil {
		tx.route, tx.slot = r, slot
		return ""
	}
	if slot != tx.slot {
		return "CROSSSLOT the keys of a transaction decided fleet-wide must share a hash tag, so that one Redis decides them together: " +
			"give them a common tag in braces, as {tenant42}:login and {tenant42}:signup"
	}
	return ""
}

// globalMixed is the error reply to a rate-limit command that would mix
// global and local keys in a transaction (r: the global route).
func globalMixed(r *config.Route) string {
	return "ERR a transaction cannot mix keys decided fleet-wide (the global route " + strconv.Quote(r.Match) +
		") with keys decided on this host: send them in separate transactions"
}

// execGlobal decides the global rate-limit commands of a transaction
// (tx.reqs, their keys in one slot) together in one call of Redis's multi
// script, each in order as alone (global.EachInOrder), or by the strictest
// of their routes' outage policies if Redis does not answer in time. The
// decisions go to tx.ds.
func (rc *respConn) execGlobal(tx *respTx) error {
	g := rc.s.global
	if g == nil {
		return errNoGlobal
	}
	reqs, ps := tx.greqs[:0], tx.gps[:0]
	for i := range tx.reqs {
		r := &tx.reqs[i]
		route := rc.s.route(r.key)
		if route == nil { // a reload made the key local since it was queued
			return errors.New("the configuration changed while the transaction was queued: send it again")
		}
		reqs = append(reqs, global.Request{Limit: *r.limit.Bucket(), Key: string(r.key), Cost: r.cost, Flags: r.flags})
		ps = append(ps, route.Limit.Policy())
	}
	tx.greqs, tx.gps = reqs, ps
	ctx, cancel := context.WithDeadline(context.Background(), g.answerBy(time.Now(), 0, 0))
	defer cancel()
	rc.leaveLoop()
	ds, _, _, err := g.fallback.Multi(ctx, reqs, ps, global.EachInOrder, tx.ds[:0])
	clear(tx.greqs)
	tx.ds = ds
	return err
}
