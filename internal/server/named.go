package server

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/proto"
)

// Named limits and what is counted of each decision. A request names a
// limit of the config file (Config.Limits) or brings its own spec; either
// way its decision is counted under a bounded label (the name, or "spec")
// when the sidecar serves metrics.

// sampleMask selects the decisions and requests whose duration the metrics
// measure: one in 16 (the counters count every one). Two clock reads cost
// more than the rest of what metrics add to a decision.
const sampleMask = 15

// namedLimits is a config Set compiled for serving: each named limit with
// its metric counters. It is built once per Set (after each reload), the
// first time a request needs it.
type namedLimits struct {
	set    *config.Set
	m      map[string]*namedLimit
	global bool // some limit is global: frames are scanned for global operations
}

// namedLimit is one named limit, ready to decide.
type namedLimit struct {
	cfg     *config.Limit
	parts   []engine.Limit // its limits: one, or a list's (listOp)
	metrics *metrics.Limit // nil without metrics
	// override counts the decisions of an override (its key or pattern)
	// besides its limit's; nil for a limit itself, or without metrics.
	override *metrics.Override
	// over are its overrides, by their config entry; nil if none.
	over map[*config.Limit]*namedLimit
}

// globalOne reports whether nl (nil for an unnamed limit) is one global
// limit: its requests are decided in Redis by a Remote (globalOp), which
// waits for no lock of the table. A global list is listOp's.
func (nl *namedLimit) globalOne() bool {
	return nl != nil && nl.cfg.Scope == config.Global && len(nl.parts) == 1
}

// newNamedLimit compiles the config's limit l, counted under m.
func newNamedLimit(l *config.Limit, m *metrics.Limit) *namedLimit {
	nl := &namedLimit{cfg: l, metrics: m}
	for _, p := range l.Parts() {
		nl.parts = append(nl.parts, p.Engine)
	}
	if m != nil {
		if l.Pattern != "" {
			nl.override = m.Override(l.Pattern)
		} else {
			m.SetOverrides(l.Overrides.Len())
		}
	}
	for _, o := range l.Overrides.All() {
		if nl.over == nil {
			nl.over = map[*config.Limit]*namedLimit{}
		}
		nl.over[o.Limit] = newNamedLimit(o.Limit, m)
	}
	return nl
}

// forKey returns the limit that decides key: its override's, or nl.
func (nl *namedLimit) forKey(key []byte) *namedLimit {
	if nl.over == nil {
		return nl
	}
	if o := nl.cfg.Overrides.Lookup(key); o != nil {
		return nl.over[o]
	}
	return nl
}

// errUnknownName is the error for a named limit the configuration does not
// define.
var errUnknownName = errors.New("no limit of that name")

// noLimits is the Set of a server without a config file.
var noLimits = config.Empty()

// named returns the current Set's compiled limits.
func (s *server) named() *namedLimits {
	set := noLimits
	if s.cfg.Limits != nil {
		set = s.cfg.Limits.Load()
	}
	if n := s.namedSet.Load(); n != nil && n.set == set {
		return n
	}
	n := &namedLimits{set: set, m: make(map[string]*namedLimit, set.Len())}
	for _, name := range set.Names() {
		l, _ := set.Lookup(name)
		var m *metrics.Limit
		if s.rec != nil {
			m = s.rec.Limit(name)
		}
		n.m[name] = newNamedLimit(l, m)
		n.global = n.global || l.Scope == config.Global
	}
	s.namedSet.Store(n) // two requests may build it at once: either copy serves
	return n
}

// lookup returns the named limit name.
func (s *server) lookup(name []byte) (*namedLimit, error) {
	if nl, ok := s.named().m[string(name)]; ok {
		return nl, nil
	}
	if s.cfg.Limits == nil {
		return nil, fmt.Errorf("%w: %q: this sidecar has no config file (--config) defining named limits", errUnknownName, name)
	}
	return nil, fmt.Errorf("%w: %q is not in the config file", errUnknownName, name)
}

// limit returns the engine limit of an operation on key and, for a named
// limit, the limit's entry: the one its wire limit gives, or the one the
// configuration names (its override for key, if it has one).
func (c *conn) limit(w proto.Limit, name, key []byte) (*engine.Limit, *namedLimit, error) {
	if name != nil {
		nl, err := c.s.lookup(name)
		if err != nil {
			return nil, nil, err
		}
		nl = nl.forKey(key)
		return &nl.cfg.Engine, nl, nil
	}
	l, err := c.lim.get(w, engine.FromProto)
	return l, nil, err
}

// shadowDenied counts a denial that a shadow limit, or a request that
// asked for it (FlagShadow), answered as allowed (engine.Shadow), under
// its limit's label.
func (s *server) shadowDenied(nl *namedLimit) {
	switch {
	case nl != nil && nl.metrics != nil:
		nl.metrics.ShadowDenied()
	case nl == nil && s.specMetrics != nil:
		s.specMetrics.ShadowDenied()
	}
}

// record counts a decision under its limit's label, with the time the
// engine took since start, when the sidecar serves metrics.
func (s *server) record(nl *namedLimit, alg bucket.Algorithm, allowed, shadowed bool, start time.Time) {
	if s.rec == nil {
		return
	}
	o := metrics.Denied
	if allowed && !shadowed {
		o = metrics.Allowed
	}
	l := s.specMetrics
	if nl != nil {
		l = nl.metrics
		if nl.override != nil {
			nl.override.Decision(o)
		}
	}
	l.Decision(alg, o)
	if !start.IsZero() {
		s.rec.DecisionDuration(alg, time.Since(start))
	}
}

// protocolError counts a malformed frame or command, when the sidecar
// serves metrics.
func (s *server) protocolError(p metrics.Protocol) {
	if s.rec != nil {
		s.rec.ProtocolError(p)
	}
}

// recordError counts a decision that failed, under its limit's label, when
// the sidecar serves metrics: table_full, or error.
func (s *server) recordError(nl *namedLimit, l *engine.Limit, err error) {
	if s.rec == nil || l == nil {
		return
	}
	o := metrics.Failed
	if errors.Is(err, engine.ErrTableFull) {
		o = metrics.TableFull
	}
	m := s.specMetrics
	if nl != nil {
		m = nl.metrics
		if nl.override != nil {
			nl.override.Decision(o)
		}
	}
	m.Decision(l.Bucket().Algorithm, o)
}

// requestDone records a Redis-protocol command that began at start.
func (s *server) requestDone(start time.Time) { s.rec.Request(metrics.RESP, time.Since(start)) }
