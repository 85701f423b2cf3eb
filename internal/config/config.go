package config

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/global"
	"github.com/sluicehq/sluice/internal/rls"
	"github.com/sluicehq/sluice/proto"
	"github.com/sluicehq/sluice/vocab"
)

// MaxFileSize is the largest config file Load reads, in bytes.
const MaxFileSize = 4 << 20

// MaxNameLen is the longest limit name, in bytes: the wire's.
const MaxNameLen = proto.MaxNameLen

// SpecLabel is the name reserved for requests that bring an inline limit
// spec rather than a name; metrics use it as their limit label.
const SpecLabel = "spec"

// Scope says where a limit's buckets live.
type Scope uint8

const (
	Local  Scope = iota // on this host only: the default
	Global              // shared by the hosts of a fleet
)

func (s Scope) String() string {
	if s == Global {
		return "global"
	}
	return "local"
}

// MaxListLen is the most limits one name may list: the most items of an
// all-or-nothing decision (a MULTI).
const MaxListLen = vocab.MaxMulti

// Limit is one named limit of a config file: one spec, or a list of specs
// decided together, all or nothing (the first in Spec, Wire, Bucket and
// Engine, the others in More).
type Limit struct {
	Name   string
	Spec   string       // the spec as written
	Wire   proto.Limit  // the spec parsed, as the wire carries it
	Bucket bucket.Limit // the algorithm's parameters, validated
	Engine engine.Limit // the limit as the engine runs it
	More   []Part       // a list's limits after the first; nil for one limit
	// Overrides are the limits of particular keys and key patterns, in
	// place of this one's (each a Limit with this one's options); nil if
	// none.
	Overrides *Overrides
	// Pattern is, for an override, its key or key pattern as written (the
	// label its decisions are counted under); "" for a named limit.
	Pattern     string
	Description string // free text for people; "" if none
	Shadow      bool   // decide and count, but always allow
	Line        int    // the line of the limit's name in the file
	Scope       Scope  // Local unless the file says global
	// The fields of a global limit (Scope Global) only.
	//
	// Lease is the leased mode: 0 decides every request in Redis (exact
	// mode); N > 0 takes leases of N tokens; LeaseAuto sizes them from
	// the host's demand. LeaseTTL is a lease's longest life (0: the
	// default, 1 s).
	Lease     int64
	LeaseAuto bool
	LeaseTTL  time.Duration
	// OnUnavailable is what the limit decides while Redis cannot be
	// reached, and FallbackShare the share of it this host decides alone
	// under global.Local (0: the default, 1/N of the N sidecars sharing
	// the Redis).
	OnUnavailable global.OnUnavailable
	FallbackShare float64
}

// Part is one limit of a list: its spec as written, parsed and validated.
type Part struct {
	Spec   string
	Wire   proto.Limit
	Bucket bucket.Limit
	Engine engine.Limit
}

// Parts returns every limit of l, the first included, in the file's order.
func (l *Limit) Parts() []Part {
	return append([]Part{{l.Spec, l.Wire, l.Bucket, l.Engine}}, l.More...)
}

// Leased reports whether a global limit is decided from leases.
func (l *Limit) Leased() bool { return l.Lease > 0 || l.LeaseAuto }

// Policy returns a global limit's outage policy.
func (l *Limit) Policy() global.Policy {
	return global.Policy{OnUnavailable: l.OnUnavailable, FallbackShare: l.FallbackShare}
}

// ValidName reports why name cannot name a limit, or nil if it can: the
// wire's rule (proto.ValidName), and not SpecLabel.
func ValidName(name string) error {
	switch {
	case name == "":
		return errors.New("empty name")
	case len(name) > MaxNameLen:
		return fmt.Errorf("name of %d bytes, longer than %d", len(name), MaxNameLen)
	case strings.Contains(name, ":"):
		return fmt.Errorf("name %q contains ':', which marks a limit spec", name)
	case proto.ValidName(name) != nil:
		return fmt.Errorf("name %q: want letters, digits, '_', '-' and '.', starting with a letter", name)
	case name == SpecLabel:
		return fmt.Errorf("name %q is reserved for requests that bring a spec", name)
	}
	return nil
}

// Load reads and parses the config file at path, and its overrides file
// beside it if there is one (OverridesPath). It reads regular files only,
// of at most MaxFileSize bytes, and gives up after DefaultReadTimeout.
func Load(path string) (*Set, error) {
	data, err := readWithin(context.Background(), path, 0, nil, readFile)
	if err != nil {
		return nil, err
	}
	side, err := readOverrides(context.Background(), path, 0, nil, readFile)
	if err != nil {
		return nil, err
	}
	return ParseWith(path, data, side)
}

// Parse parses a config file's content; file names it in errors. It checks
// the whole file and returns the first problem as an *Error.
func Parse(file string, data []byte) (*Set, error) { return ParseWith(file, data, nil) }

// ParseWith parses a config file's content and, if side is not nil, the
// content of its overrides file (OverridesPath(file)), whose overrides
// replace the file's of the same limit and key.
func ParseWith(file string, data, side []byte) (*Set, error) {
	s, err := parse(file, data, contentSum(data, side))
	if err == nil && side != nil {
		err = s.applyOverrides(OverridesPath(file), side)
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// contentSum is the SHA-256 a Set is known by: of the file, and of the
// overrides file if there is one.
func contentSum(data, side []byte) [32]byte {
	sum := sha256.Sum256(data)
	if side == nil {
		return sum
	}
	o := sha256.Sum256(side)
	return sha256.Sum256(append(sum[:], o[:]...))
}

func parse(file string, data []byte, sum [32]byte) (*Set, error) {
	p := parser{file: file}
	s := &Set{path: file, sum: sum, limits: map[string]*Limit{}}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, p.errorf(nil, "", "empty file: want a \"limits:\" mapping")
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, p.yamlError(err, data)
	}
	if len(doc.Content) == 0 {
		return nil, p.errorf(nil, "", "empty file: want a \"limits:\" mapping")
	}
	root := doc.Content[0]
	if isRLSFile(root) {
		// An envoyproxy/ratelimit file as it is: one domain, no named limits.
		d, err := p.rlsDomain(root, "")
		if err != nil {
			return nil, err
		}
		if err := p.rlsConfig(s, []*rls.Domain{d}, root, ""); err != nil {
			return nil, err
		}
		return s, nil
	}
	var domains []*rls.Domain
	var domainsAt *yaml.Node
	err := p.mapping(root, "", func(key, val *yaml.Node, field string) error {
		switch key.Value {
		case "rls":
			ds, err := p.rlsDomains(val, field)
			domains, domainsAt = ds, key
			return err
		case "version":
			if val.Kind != yaml.ScalarNode || val.Value != "1" {
				return p.errorf(val, field, "version %q: this build reads version 1", val.Value)
			}
			return nil
		case "limits":
			return p.mapping(val, field, func(k, v *yaml.Node, f string) error {
				if err := ValidName(k.Value); err != nil {
					return p.errorf(k, f, "%v", err)
				}
				l, err := p.limit(k, v, f)
				if err != nil {
					return err
				}
				s.limits[l.Name] = l
				s.names = append(s.names, l.Name)
				return nil
			})
		case "resp":
			rs, err := p.routes(val, field)
			s.routes = rs
			return err
		}
		return p.errorf(key, field, "unknown field (want version, limits, resp or rls)")
	})
	if err != nil {
		return nil, err
	}
	if domainsAt != nil {
		if err := p.rlsConfig(s, domains, domainsAt, "rls"); err != nil {
			return nil, err
		}
	}
	slices.Sort(s.names)
	return s, nil
}

// isRLSFile reports whether a document is an envoyproxy/ratelimit file: a
// mapping with a domain at the top.
func isRLSFile(root *yaml.Node) bool {
	if root.Kind != yaml.MappingNode {
		return false
	}
	for i := 0; i < len(root.Content); i += 2 {
		if root.Content[i].Value == "domain" {
			return true
		}
	}
	return false
}

// parser carries the file name into errors.
type parser struct{ file string }

func (p *parser) errorf(n *yaml.Node, field, format string, a ...any) *Error {
	e := &Error{File: p.file, Field: field, Msg: fmt.Sprintf(format, a...)}
	if n != nil {
		e.Line = n.Line
	}
	return e
}

// yamlError turns a YAML syntax error in data into an *Error with its
// line: the line where the problem is, not the one where the construct
// around it starts, which the YAML library gives (problemLine).
func (p *parser) yamlError(err error, data []byte) *Error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	e := &Error{File: p.file, Msg: msg, Err: err}
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg = te.Errors[0]
	}
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, after, ok := strings.Cut(rest, ": "); ok {
			if n, err := strconv.Atoi(num); err == nil {
				e.Line, e.Msg = problemLine(data, n, after), after
			}
		}
	}
	return e
}

// problemLine returns the line of a syntax error that the YAML library
// reports as msg on line from. The library names the line where the
// mapping, list or string around the problem starts ("did not find
// expected key" on the "limits:" line for a mis-indented line 40 lines
// below): the problem is on the first line whose end makes the file up to
// it fail with the same message. The parser stops at the problem, so the
// lines after it do not change that message: the search is a bisection
// over the lines from from to the end of the file.
func problemLine(data []byte, from int, msg string) int {
	ends := []int{} // ends[i] is the offset just past line i+1
	for i, b := range data {
		if b == '\n' {
			ends = append(ends, i+1)
		}
	}
	if len(ends) == 0 || ends[len(ends)-1] != len(data) {
		ends = append(ends, len(data))
	}
	fails := func(line int) bool {
		var doc yaml.Node
		err := yaml.Unmarshal(data[:ends[line-1]], &doc)
		return err != nil && strings.HasSuffix(err.Error(), ": "+msg)
	}
	lo, hi := max(from, 1), len(ends) // the answer is in [lo, hi]
	if lo > hi || !fails(hi) {
		return from
	}
	for lo < hi {
		mid := lo + (hi-lo)/2
		if fails(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// mapping calls fn for each key of the mapping n, in order, refusing
// duplicate and non-scalar keys. field is n's path.
func (p *parser) mapping(n *yaml.Node, field string, fn func(key, val *yaml.Node, field string) error) error {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind != yaml.MappingNode {
		what := "this"
		if field != "" {
			what = field
		}
		return p.errorf(n, field, "want a mapping of names to values, %s is a %s", what, kindName(n))
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return p.errorf(k, field, "want a name as key, got a %s", kindName(k))
		}
		f := k.Value
		if field != "" {
			f = field + "." + k.Value
		}
		if line, dup := seen[k.Value]; dup {
			return p.errorf(k, f, "defined twice (first on line %d)", line)
		}
		seen[k.Value] = k.Line
		if v.Kind == yaml.AliasNode {
			v = v.Alias
		}
		if err := fn(k, v, f); err != nil {
			return err
		}
	}
	return nil
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "null"
		}
		return "scalar"
	}
	return "document"
}

// limit parses one named limit: a mapping of its fields, or a bare spec
// string (or a list of them) as shorthand for {limit: SPEC}. limit may be a
// list of specs, decided together, all or nothing.
func (p *parser) limit(k, v *yaml.Node, field string) (*Limit, error) {
	l := &Limit{Name: k.Value, Line: k.Line}
	var specNode, overridesNode *yaml.Node
	globalKeys := map[string]*yaml.Node{}
	if v.Kind == yaml.ScalarNode && v.Tag == "!!str" || v.Kind == yaml.SequenceNode {
		specNode = v // shorthand: a spec, or a list of specs
	} else {
		err := p.mapping(v, field, func(key, val *yaml.Node, f string) error {
			switch key.Value {
			case "limit":
				specNode = val
				return nil
			case "overrides":
				overridesNode = val
				return nil
			case "description":
				return p.str(val, f, &l.Description)
			case "shadow":
				return p.boolean(val, f, &l.Shadow)
			case "scope":
				return p.scope(val, f, &l.Scope)
			case "lease", "lease_ttl", "on_unavailable", "fallback_share":
				globalKeys[key.Value] = key
				return p.globalField(l, key.Value, val, f)
			}
			return p.errorf(key, f, "unknown field (want limit, overrides, description, shadow, scope, lease, lease_ttl, on_unavailable or fallback_share)")
		})
		if err != nil {
			return nil, err
		}
	}
	if specNode == nil {
		return nil, p.errorf(k, field, "no limit: want limit: \"ALGORITHM:name=value,...\"")
	}
	if err := p.limits(l, specNode, field+".limit", globalKeys); err != nil {
		return nil, err
	}
	if overridesNode != nil {
		err := p.mapping(overridesNode, field+".overrides", func(key, val *yaml.Node, f string) error {
			if key.Value == "" || len(key.Value) > proto.MaxKeyLen {
				return p.errorf(key, f, "a key of %d bytes, want 1 to %d", len(key.Value), proto.MaxKeyLen)
			}
			return p.override(l, key, val, f, false)
		})
		if err != nil {
			return nil, err
		}
	}
	if err := p.localOnly(l, globalKeys, field, "limits"); err != nil {
		return nil, err
	}
	return l, nil
}

// scope parses a scope field.
func (p *parser) scope(val *yaml.Node, f string, dst *Scope) error {
	var s string
	if err := p.str(val, f, &s); err != nil {
		return err
	}
	switch s {
	case "local":
		*dst = Local
	case "global":
		*dst = Global
	default:
		return p.errorf(val, f, "scope %q: want local or global", s)
	}
	return nil
}

// override parses the override of l for key, val, and adds it (replacing
// one of the same key if replace is set).
func (p *parser) override(l *Limit, key, val *yaml.Node, field string, replace bool) error {
	if key.Value == "" || len(key.Value) > proto.MaxKeyLen {
		return p.errorf(key, field, "a key of %d bytes, want 1 to %d", len(key.Value), proto.MaxKeyLen)
	}
	o := *l
	o.More, o.Overrides, o.Line, o.Pattern = nil, nil, key.Line, key.Value
	if err := p.limits(&o, val, field, map[string]*yaml.Node{}); err != nil {
		return err
	}
	if l.Overrides == nil {
		l.Overrides = &Overrides{}
	}
	if err := l.Overrides.add(key.Value, &o, replace); err != nil {
		return p.errorf(key, field, "%v", err)
	}
	return nil
}

// localOnly refuses the global fields (keys, by name) on a local limit or
// route (what names which).
func (p *parser) localOnly(l *Limit, keys map[string]*yaml.Node, field, what string) error {
	if l.Scope != Local {
		return nil
	}
	for _, name := range []string{"lease", "lease_ttl", "on_unavailable", "fallback_share"} {
		if key := keys[name]; key != nil {
			return p.errorf(key, field+"."+name, "applies to global %s only (add scope: global)", what)
		}
	}
	return nil
}

// limits parses the limit field of l, specNode: a spec or a list of specs,
// decided together, into l's parts, and checks them against l's scope.
func (p *parser) limits(l *Limit, specNode *yaml.Node, field string, globalKeys map[string]*yaml.Node) error {
	specs := []*yaml.Node{specNode}
	if specNode.Kind == yaml.SequenceNode {
		specs = specNode.Content
		switch {
		case len(specs) == 0:
			return p.errorf(specNode, field, "an empty list: want one or more limit specs")
		case len(specs) > MaxListLen:
			return p.errorf(specNode, field, "a list of %d limits, want at most %d", len(specs), MaxListLen)
		case len(specs) > 1 && l.Scope == Global && l.Leased():
			n, f := specNode, field
			if key := globalKeys["lease"]; key != nil {
				n, f = key, strings.TrimSuffix(field, ".limit")+".lease"
			}
			return p.errorf(n, f, "a list of limits decided fleet-wide cannot be leased (leases cannot decide its limits all or nothing): remove lease for exact mode")
		}
	}
	for i, n := range specs {
		f := field
		if specNode.Kind == yaml.SequenceNode {
			f += "[" + strconv.Itoa(i) + "]"
		}
		part, shadow, err := p.spec(n, f)
		if err != nil {
			return err
		}
		l.Shadow = l.Shadow || shadow // the spec's shadow=true is the field's shadow: true
		if i == 0 {
			l.Spec, l.Wire, l.Bucket, l.Engine = part.Spec, part.Wire, part.Bucket, part.Engine
		} else {
			l.More = append(l.More, part)
		}
	}
	if l.Scope == Global {
		for i, part := range l.Parts() {
			f, n := field, specNode
			if specNode.Kind == yaml.SequenceNode {
				f, n = field+"["+strconv.Itoa(i)+"]", specs[i]
			}
			if err := global.Check(part.Bucket); err != nil {
				return &Error{File: p.file, Line: n.Line, Field: f, Msg: fmt.Sprintf("%q cannot be global: %v", part.Spec, err), Err: err}
			}
			if len(specs) > 1 && part.Bucket.Algorithm == bucket.Concurrency {
				return p.errorf(n, f, "%q: a concurrency limit cannot be in a list decided fleet-wide (it takes LEASE and RELEASE): name it on its own", part.Spec)
			}
		}
		if l.Leased() && l.Bucket.Algorithm == bucket.Pacer {
			return p.errorf(globalKeys["lease"], strings.TrimSuffix(field, ".limit")+".lease", "a pacer cannot be leased (its replies carry a delay): remove lease for exact mode")
		}
		if l.Leased() && l.Bucket.Algorithm == bucket.Concurrency {
			return p.errorf(globalKeys["lease"], strings.TrimSuffix(field, ".limit")+".lease", "a concurrency limit cannot be leased (a lease of it is a slot held in Redis): remove lease for exact mode")
		}
	}
	return nil
}

// spec parses and validates one limit spec of a named limit, the string
// in n, and reports whether it said shadow=true.
func (p *parser) spec(n *yaml.Node, field string) (Part, bool, error) {
	var part Part
	if err := p.str(n, field, &part.Spec); err != nil {
		return part, false, err
	}
	w, err := proto.ParseLimit(part.Spec)
	if err != nil {
		msg := err.Error()
		if _, after, ok := strings.Cut(msg, "limit "+strconv.Quote(part.Spec)+": "); ok {
			msg = after
		} else {
			msg = strings.TrimPrefix(msg, "proto: ")
		}
		return part, false, &Error{File: p.file, Line: n.Line, Field: field, Msg: fmt.Sprintf("%q: %s", part.Spec, msg), Err: err}
	}
	if w.Name != "" {
		err := fmt.Errorf("%w: a limit is defined by a spec, not by another limit's name", proto.ErrInvalidLimit)
		return part, false, &Error{File: p.file, Line: n.Line, Field: field, Msg: fmt.Sprintf("%q: want ALGORITHM:name=value,...", part.Spec), Err: err}
	}
	el, err := engine.FromProto(w)
	if err != nil {
		return part, false, &Error{File: p.file, Line: n.Line, Field: field, Msg: fmt.Sprintf("%q: %v", part.Spec, err), Err: err}
	}
	shadow := w.Shadow
	w.Shadow = false
	part.Wire, part.Bucket, part.Engine = w, *el.Bucket(), el
	return part, shadow, nil
}

// globalField parses one of the fields of a global limit.
func (p *parser) globalField(l *Limit, name string, val *yaml.Node, f string) error {
	var s string
	if err := p.str(val, f, &s); err != nil {
		return err
	}
	switch name {
	case "lease":
		if s == "auto" {
			l.LeaseAuto = true
			return nil
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 1 || n > global.MaxCount {
			return p.errorf(val, f, "%q: want auto, or a number of tokens from 1 to %d", s, global.MaxCount)
		}
		l.Lease = n
	case "lease_ttl":
		d, err := proto.ParseDuration(s)
		if err != nil || d < time.Millisecond || d > time.Hour {
			return p.errorf(val, f, "%q: want a duration from 1ms to 1h", s)
		}
		l.LeaseTTL = d
	case "on_unavailable":
		o, err := global.ParseOnUnavailable(s)
		if err != nil {
			return p.errorf(val, f, "%q: want local, open or closed", s)
		}
		l.OnUnavailable = o
	case "fallback_share":
		x, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(x) || x <= 0 || x > 1 {
			return p.errorf(val, f, "%q: want a fraction above 0 and at most 1", s)
		}
		l.FallbackShare = x
	}
	return nil
}

// str reads a scalar as a string.
func (p *parser) str(n *yaml.Node, field string, dst *string) error {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return p.errorf(n, field, "want a value, got a %s", kindName(n))
	}
	*dst = n.Value
	return nil
}

// boolean reads a YAML boolean: true or false.
func (p *parser) boolean(n *yaml.Node, field string, dst *bool) error {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
		return p.errorf(n, field, "%q: want true or false", n.Value)
	}
	*dst = n.Value == "true" || n.Value == "True" || n.Value == "TRUE"
	return nil
}
