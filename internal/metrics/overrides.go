package metrics

import (
	"slices"
	"strings"
	"sync/atomic"
)

// OtherOverride is the override label of decisions under the overrides of
// a limit beyond the first MaxOverrides it has counted: it bounds the
// series one limit's overrides make.
const OtherOverride = "other"

// MaxOverrides is the number of distinct override labels a limit keeps.
const MaxOverrides = 1000

// Override holds the decision counts of one override of a limit, by
// outcome. Get it once with Limit.Override and keep it: Decision then
// costs an atomic add.
type Override struct {
	decisions [numOutcomes]atomic.Uint64
}

// Decision counts a decision the override made, with outcome o.
func (o *Override) Decision(out Outcome) { o.decisions[out%numOutcomes].Add(1) }

// overrides are a limit's override counters and how many overrides it
// has now.
type overrides struct {
	m cowMap[Override] // by pattern
	n atomic.Int64     // overrides in the config in force
}

// Override returns the counters of l's override pattern (its key or key
// pattern as the config writes it, never a request's key), creating them
// on first use; beyond MaxOverrides patterns, OtherOverride's.
func (l *Limit) Override(pattern string) *Override {
	return l.over.m.get(pattern, OtherOverride, MaxOverrides, func(string) *Override { return &Override{} })
}

// SetOverrides records that l has n overrides in the config in force.
func (l *Limit) SetOverrides(n int) { l.over.n.Store(int64(n)) }

// OverrideStats are the counts of one override of a limit.
type OverrideStats struct {
	Limit, Override string
	Decisions       [numOutcomes]uint64 // by Outcome
}

// LimitOverrides is how many overrides a limit has in the config in force.
type LimitOverrides struct {
	Limit string
	N     int64
}

// Overrides are the override counts of a Snapshot.
type Overrides struct {
	Limits    []LimitOverrides // the limits that have or had overrides, by name
	Decisions []OverrideStats  // by limit, then pattern
}

// Overrides reads every limit's override counters, for a Snapshot.
func (r *Recorder) Overrides() *Overrides {
	var s Overrides
	for name, l := range r.limits.load() {
		m := l.over.m.load()
		n := l.over.n.Load()
		if m == nil && n == 0 {
			continue
		}
		s.Limits = append(s.Limits, LimitOverrides{name, n})
		for p, o := range m {
			st := OverrideStats{Limit: name, Override: p}
			for i := range st.Decisions {
				st.Decisions[i] = o.decisions[i].Load()
			}
			s.Decisions = append(s.Decisions, st)
		}
	}
	slices.SortFunc(s.Limits, func(a, b LimitOverrides) int { return strings.Compare(a.Limit, b.Limit) })
	slices.SortFunc(s.Decisions, func(a, b OverrideStats) int {
		if c := strings.Compare(a.Limit, b.Limit); c != 0 {
			return c
		}
		return strings.Compare(a.Override, b.Override)
	})
	return &s
}
