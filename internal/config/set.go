package config

import (
	"maps"
	"slices"
	"sync/atomic"

	"github.com/sluicehq/sluice/internal/rls"
)

// Set is the named limits of one version of the config file. It is
// immutable: Parse and Load return a new Set, and nothing changes it
// afterwards, so any number of goroutines may read it.
type Set struct {
	path   string
	sum    [32]byte // SHA-256 of the file's content
	limits map[string]*Limit
	names  []string    // sorted
	kept   []string    // sorted: the names in force that the file no longer defines
	routes []*Route    // the resp section, in the file's order
	rls    *rls.Config // the rate limit service's domains; nil if none
}

// Empty returns a Set without limits, for a sidecar run without a config
// file: every name is unknown.
func Empty() *Set { return &Set{limits: map[string]*Limit{}} }

// Lookup returns the limit named name. The *Limit belongs to the Set and
// must not be modified.
func (s *Set) Lookup(name string) (*Limit, bool) {
	l, ok := s.limits[name]
	return l, ok
}

// Names returns the limits' names, sorted. The slice belongs to the Set and
// must not be modified.
func (s *Set) Names() []string { return s.names }

// Kept returns the names of the limits in force that the file no longer
// defines, sorted: a reload of a changed file keeps the limits it would
// remove until a reload on demand (see Watcher). The slice belongs to the
// Set and must not be modified.
func (s *Set) Kept() []string { return s.kept }

// keep returns s with the limits of old that s does not define, kept in
// force, and the names among them that old did not keep already.
func (s *Set) keep(old *Set) (*Set, []string) {
	var gone []string
	for _, n := range old.names {
		if _, ok := s.limits[n]; !ok {
			gone = append(gone, n)
		}
	}
	if len(gone) == 0 {
		return s, nil
	}
	k := &Set{path: s.path, sum: s.sum, limits: make(map[string]*Limit, len(s.limits)+len(gone)), kept: gone, routes: s.routes, rls: s.rls}
	maps.Copy(k.limits, s.limits)
	var newly []string
	for _, n := range gone {
		k.limits[n] = old.limits[n]
		if !slices.Contains(old.kept, n) {
			newly = append(newly, n)
		}
	}
	k.names = slices.Sorted(maps.Keys(k.limits))
	return k, newly
}

// Len returns the number of limits.
func (s *Set) Len() int { return len(s.names) }

// Path returns the file the Set was read from ("" for Empty).
func (s *Set) Path() string { return s.path }

// Sum returns the SHA-256 of the file's content.
func (s *Set) Sum() [32]byte { return s.sum }

// Changes lists what differs from old to s: the names added, removed, and
// changed (a different spec or option). old may be nil.
func (s *Set) Changes(old *Set) (added, removed, changed []string) {
	if old == nil {
		old = Empty()
	}
	for _, n := range s.names {
		o, ok := old.limits[n]
		switch {
		case !ok:
			added = append(added, n)
		case !sameLimit(o, s.limits[n]):
			changed = append(changed, n)
		}
	}
	for _, n := range old.names {
		if _, ok := s.limits[n]; !ok {
			removed = append(removed, n)
		}
	}
	return added, removed, changed
}

func sameLimit(a, b *Limit) bool {
	return a.Wire == b.Wire && slices.EqualFunc(a.More, b.More, func(x, y Part) bool { return x.Wire == y.Wire }) &&
		sameOverrides(a.Overrides, b.Overrides) && a.Shadow == b.Shadow && a.Description == b.Description &&
		a.Scope == b.Scope && a.Lease == b.Lease && a.LeaseAuto == b.LeaseAuto && a.LeaseTTL == b.LeaseTTL &&
		a.OnUnavailable == b.OnUnavailable && a.FallbackShare == b.FallbackShare
}

// Holder holds the current Set. Its zero value holds Empty(). Readers Load
// the Set once per request and decide under it: a Swap never changes a Set
// a request already holds.
type Holder struct {
	p atomic.Pointer[Set]
}

// NewHolder returns a Holder of s.
func NewHolder(s *Set) *Holder {
	h := &Holder{}
	h.p.Store(s)
	return h
}

var empty = Empty()

// Load returns the current Set. It never returns nil.
func (h *Holder) Load() *Set {
	if s := h.p.Load(); s != nil {
		return s
	}
	return empty
}

// Swap makes s the current Set and returns the one it replaces.
func (h *Holder) Swap(s *Set) *Set {
	old := h.p.Swap(s)
	if old == nil {
		old = empty
	}
	return old
}
