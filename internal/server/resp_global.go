package server

import (
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/config"
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

// globalInTx is the error reply to a command queued in a transaction whose
// key a global route matches.
func globalInTx(r *config.Route) string {
	return "ERR a transaction may not include a command decided fleet-wide (the key matches the global route " +
		strconv.Quote(r.Match) + "): send it outside MULTI"
}

// routedKey returns the key of a rate-limit command (one with parse), which
// the config's routes may send to Redis, or nil for any other command.
func (c *respCommand) routedKey(args [][]byte) []byte {
	if c.parse == nil || c.key <= 0 || c.key >= len(args) {
		return nil
	}
	return args[c.key]
}
