package rls

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/engine"
)

// Unit is a rate limit unit, as the response names it.
type Unit = rlspb.RateLimitResponse_RateLimit_Unit

// The units' lengths in seconds: envoyproxy/ratelimit's, a month 30 days
// and a year 365 days, windows aligned to the Unix epoch.
var unitSeconds = map[Unit]int64{
	rlspb.RateLimitResponse_RateLimit_SECOND: 1,
	rlspb.RateLimitResponse_RateLimit_MINUTE: 60,
	rlspb.RateLimitResponse_RateLimit_HOUR:   3600,
	rlspb.RateLimitResponse_RateLimit_DAY:    86400,
	rlspb.RateLimitResponse_RateLimit_WEEK:   7 * 86400,
	rlspb.RateLimitResponse_RateLimit_MONTH:  30 * 86400,
	rlspb.RateLimitResponse_RateLimit_YEAR:   365 * 86400,
}

// UnitSeconds returns the length of u in seconds (a month is 30 days, a
// year 365), 0 for a value that is no unit.
func UnitSeconds(u Unit) int64 { return unitSeconds[u] }

// ParseUnit reads a unit as a config file writes it: second, minute, hour,
// day, week, month or year, in any case.
func ParseUnit(s string) (Unit, bool) {
	v, ok := rlspb.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(s)]
	if !ok || v == 0 {
		return 0, false
	}
	return Unit(v), true
}

// Rule is what a descriptor's rate_limit says: a fixed window of
// RequestsPerUnit per Unit, unlimited, or a named limit of the config file
// (Limit) decided by its own algorithm.
type Rule struct {
	Name            string   // rate_limit.name, the target of other rules' replaces
	Replaces        []string // the names of the rules this one replaces
	Unlimited       bool
	RequestsPerUnit uint32
	Unit            Unit
	Limit           string // a named limit of the config file, instead of a window
	Shadow          bool   // the descriptor's shadow_mode

	window engine.Limit // the fixed window, when RequestsPerUnit > 0
}

// Check validates r and prepares its window. It returns a sentence for
// people when r is not valid.
func (r *Rule) Check() error {
	for _, n := range r.Replaces {
		if n == "" {
			return fmt.Errorf("should not have an empty replaces entry")
		}
		if n == r.Name {
			return fmt.Errorf("replaces should not contain name of same descriptor")
		}
	}
	switch {
	case r.Unlimited && (r.Unit != 0 || r.RequestsPerUnit != 0 || r.Limit != ""):
		return fmt.Errorf("should not specify rate limit unit when unlimited")
	case r.Unlimited:
		return nil
	case r.Limit != "" && (r.Unit != 0 || r.RequestsPerUnit != 0):
		return fmt.Errorf("a rate limit names a limit or gives a unit and requests_per_unit, not both")
	case r.Limit != "":
		return nil
	case r.Unit == 0:
		return fmt.Errorf("a rate limit needs a unit (second, minute, hour, day, week, month or year), unlimited: true, or a limit name")
	}
	if r.RequestsPerUnit == 0 {
		return nil // every request denied: no bucket
	}
	w, err := FixedWindow(int64(r.RequestsPerUnit), r.Unit, 1)
	if err != nil {
		return err
	}
	r.window = w
	return nil
}

// FixedWindow returns the fixed window of n requests per mult units.
func FixedWindow(n int64, u Unit, mult int64) (engine.Limit, error) {
	secs, ok := unitSeconds[u]
	if !ok {
		return engine.Limit{}, fmt.Errorf("unit %d is not a unit of time", u)
	}
	if mult < 1 || mult > bucket.MaxDuration/1e9/secs {
		return engine.Limit{}, fmt.Errorf("a window of %d %s is out of range", mult, strings.ToLower(u.String()))
	}
	return engine.NewLimit(bucket.Limit{Algorithm: bucket.FixedWindow, Max: n, Window: mult * secs * 1e9})
}

// Descriptor is one node of a domain's descriptor tree.
type Descriptor struct {
	Key            string
	Value          string // "" for any value; may contain '*' wildcards
	Rule           *Rule  // nil: no limit at this node (a whitelist, if it has no children either)
	ShareThreshold bool   // a wildcard's matches share one bucket
	Descriptors    []*Descriptor
}

// Domain is one domain's descriptors.
type Domain struct {
	Name        string
	Descriptors []*Descriptor
}

// Config is the descriptor trees of every domain, indexed for matching.
// It is immutable once built: any number of goroutines may use it.
type Config struct {
	domains map[string]*level
	named   []string // the limit names the rules use
}

// level is the children of one node: matched by key and value first, then
// by wildcard in the file's order, then by key alone.
type level struct {
	exact map[[2]string]*node
	wild  []*node
	bare  map[string]*node
}

type node struct {
	d        *Descriptor
	children *level
}

// NewConfig indexes domains. It returns an error naming the first
// duplicate domain or descriptor, or invalid rule.
func NewConfig(domains []*Domain) (*Config, error) {
	c := &Config{domains: make(map[string]*level, len(domains))}
	for _, d := range domains {
		if d.Name == "" {
			return nil, fmt.Errorf("config file cannot have empty domain")
		}
		if _, dup := c.domains[d.Name]; dup {
			return nil, fmt.Errorf("duplicate domain '%s' in config file", d.Name)
		}
		lv, err := c.index(d.Name, d.Descriptors)
		if err != nil {
			return nil, err
		}
		c.domains[d.Name] = lv
	}
	return c, nil
}

func (c *Config) index(path string, ds []*Descriptor) (*level, error) {
	lv := &level{exact: map[[2]string]*node{}, bare: map[string]*node{}}
	for _, d := range ds {
		if d.Key == "" {
			return nil, fmt.Errorf("descriptor has empty key")
		}
		composite := path + "." + d.Key
		if d.Value != "" {
			composite += "_" + d.Value
		}
		n := &node{d: d}
		switch {
		case d.Value == "":
			if lv.bare[d.Key] != nil {
				return nil, fmt.Errorf("duplicate descriptor composite key '%s'", composite)
			}
			lv.bare[d.Key] = n
		case strings.Contains(d.Value, "*"):
			for _, w := range lv.wild {
				if w.d.Key == d.Key && w.d.Value == d.Value {
					return nil, fmt.Errorf("duplicate descriptor composite key '%s'", composite)
				}
			}
			lv.wild = append(lv.wild, n)
		default:
			k := [2]string{d.Key, d.Value}
			if lv.exact[k] != nil {
				return nil, fmt.Errorf("duplicate descriptor composite key '%s'", composite)
			}
			lv.exact[k] = n
		}
		if d.ShareThreshold && !strings.Contains(d.Value, "*") {
			return nil, fmt.Errorf("descriptor '%s': share_threshold applies to a wildcard value only", composite)
		}
		if d.Rule != nil {
			if err := d.Rule.Check(); err != nil {
				return nil, fmt.Errorf("descriptor '%s': %w", composite, err)
			}
			if d.Rule.Limit != "" {
				c.named = append(c.named, d.Rule.Limit)
			}
		}
		if len(d.Descriptors) > 0 {
			ch, err := c.index(composite, d.Descriptors)
			if err != nil {
				return nil, err
			}
			n.children = ch
		}
	}
	return lv, nil
}

// Len returns the number of domains.
func (c *Config) Len() int {
	if c == nil {
		return 0
	}
	return len(c.domains)
}

// Domains returns the domains' names, sorted.
func (c *Config) Domains() []string {
	if c == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(c.domains))
}

// LimitNames returns the names of the config file's limits that rules use,
// in the file's order (with repeats).
func (c *Config) LimitNames() []string { return c.named }

// match finds the rule for one request descriptor of entries in domain, as
// envoyproxy/ratelimit does: level by level, key and value first, then a
// wildcard value, then the key alone; a rule applies only at the
// descriptor's last entry. It appends the bucket key to key (every entry's
// key and value, or a shared wildcard's pattern) and returns it with the
// rule, nil if none applies.
func (c *Config) match(key []byte, domain string, entries [][2]string) (*Rule, []byte) {
	lv := c.domains[domain]
	for i, e := range entries {
		if lv == nil {
			return nil, key
		}
		n := lv.exact[e]
		if n == nil {
			for _, w := range lv.wild {
				if w.d.Key == e[0] && wildcardMatch(w.d.Value, e[1]) {
					n = w
					break
				}
			}
		}
		if n == nil {
			n = lv.bare[e[0]]
		}
		if n == nil {
			return nil, key
		}
		v := e[1]
		if n.d.ShareThreshold {
			v = n.d.Value
		}
		key = appendField(appendField(key, e[0]), v)
		if i == len(entries)-1 {
			return n.d.Rule, key
		}
		lv = n.children
	}
	return nil, key
}

// wildcardMatch reports whether value matches pattern, in which each '*'
// stands for any run of bytes, the empty one included.
func wildcardMatch(pattern, value string) bool {
	parts := strings.Split(pattern, "*")
	if !strings.HasPrefix(value, parts[0]) {
		return false
	}
	value = value[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(value, p)
		if i < 0 {
			return false
		}
		value = value[i+len(p):]
	}
	return len(parts) == 1 && value == "" || len(parts) > 1 && len(value) >= len(last) && strings.HasSuffix(value, last)
}

// appendField appends s to a bucket key, length-prefixed, so that no two
// descriptors' keys are the same bytes.
func appendField(b []byte, s string) []byte {
	return append(append(b, byte(len(s)>>8), byte(len(s))), s...)
}
