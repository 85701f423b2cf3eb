package config

import (
	"fmt"

	"go.yaml.in/yaml/v3"
)

// MaxPatternLen is the longest key pattern of a route, in bytes: the
// longest key.
const MaxPatternLen = 1024

// A Route gives the keys of the Redis-protocol commands that carry their
// own parameters (RL.REDUCE and its kin, CL.THROTTLE) a scope: a command
// whose key matches Match is decided as Limit says, with the command's
// parameters. Routes are tried in the file's order; the first that matches
// decides, and a key no route matches is local.
//
//	resp:
//	  - match: "login:*"
//	    scope: global
//	    lease: auto
//	    on_unavailable: local
type Route struct {
	Match string // the key pattern (see MatchKey)
	Line  int    // the line of its entry in the file
	// Limit holds the route's scope and, for a global route, its lease
	// and outage settings; its Name is "resp" and it has no spec: a
	// request brings its own (Limit.Bucket is to be set per request).
	Limit Limit
}

// RouteName is the name a request a Route decides carries in metrics and
// logs.
const RouteName = "resp"

// Routes returns the Set's routes, in the file's order. The slice belongs
// to the Set and must not be modified.
func (s *Set) Routes() []*Route { return s.routes }

// Route returns the first route whose pattern matches key, or nil: the key
// is then local.
func (s *Set) Route(key []byte) *Route {
	for _, r := range s.routes {
		if MatchKey(r.Match, key) {
			return r
		}
	}
	return nil
}

// HasGlobal reports whether a limit or a route of the Set is global.
func (s *Set) HasGlobal() bool {
	for _, l := range s.limits {
		if l.Scope == Global {
			return true
		}
	}
	for _, r := range s.routes {
		if r.Limit.Scope == Global {
			return true
		}
	}
	return false
}

// MatchKey reports whether key matches pattern, a glob over bytes: '*'
// matches any run of bytes (':' and '/' included), '?' any one byte, and
// '\' makes the byte after it literal; every other byte matches itself.
// It takes time linear in len(pattern)*len(key) at worst, never more.
func MatchKey(pattern string, key []byte) bool {
	p, k := 0, 0
	star, mark := -1, 0 // the last '*' seen, and the key's position when it was
	for k < len(key) {
		if p < len(pattern) {
			switch c := pattern[p]; c {
			case '*':
				star, mark = p, k
				p++
				continue
			case '?':
				p++
				k++
				continue
			case '\\':
				if p+1 < len(pattern) && pattern[p+1] == key[k] {
					p += 2
					k++
					continue
				}
			default:
				if c == key[k] {
					p++
					k++
					continue
				}
			}
		}
		if star < 0 {
			return false
		}
		// Let the last '*' take one more byte, and try again after it.
		mark++
		p, k = star+1, mark
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// checkPattern says what is wrong with a route's pattern, if anything.
func checkPattern(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("an empty pattern matches no key: want a key or a pattern such as \"login:*\"")
	case len(s) > MaxPatternLen:
		return fmt.Errorf("a pattern of %d bytes: want at most %d", len(s), MaxPatternLen)
	}
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' {
			if i+1 == len(s) {
				return fmt.Errorf("%q ends in a lone '\\': write \\\\ for a backslash", s)
			}
			i++
		}
	}
	return nil
}

// routes parses the resp section: a sequence of routes.
func (p *parser) routes(n *yaml.Node, field string) ([]*Route, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, p.errorf(n, field, "want a list of routes (- match: PATTERN, scope: global, ...), not %s", kindName(n))
	}
	var rs []*Route
	for i, e := range n.Content {
		r, err := p.route(e, fmt.Sprintf("%s[%d]", field, i))
		if err != nil {
			return nil, err
		}
		rs = append(rs, r)
	}
	return rs, nil
}

// route parses one route.
func (p *parser) route(n *yaml.Node, field string) (*Route, error) {
	r := &Route{Line: n.Line, Limit: Limit{Name: RouteName, Line: n.Line}}
	var matchNode, scopeNode *yaml.Node
	globalKeys := map[string]*yaml.Node{}
	err := p.mapping(n, field, func(key, val *yaml.Node, f string) error {
		switch key.Value {
		case "match":
			matchNode = val
			return p.str(val, f, &r.Match)
		case "scope":
			scopeNode = val
			return p.scope(val, f, &r.Limit.Scope)
		case "lease", "lease_ttl", "on_unavailable", "fallback_share":
			globalKeys[key.Value] = key
			return p.globalField(&r.Limit, key.Value, val, f)
		}
		return p.errorf(key, f, "unknown field (want match, scope, lease, lease_ttl, on_unavailable or fallback_share)")
	})
	if err != nil {
		return nil, err
	}
	if matchNode == nil {
		return nil, p.errorf(n, field, "no match: want match: PATTERN (a key, or a glob such as \"login:*\")")
	}
	if err := checkPattern(r.Match); err != nil {
		return nil, p.errorf(matchNode, field+".match", "%v", err)
	}
	if scopeNode == nil {
		return nil, p.errorf(n, field, "no scope: want scope: global (or local, to keep some keys of a wider pattern on this host)")
	}
	if err := p.localOnly(&r.Limit, globalKeys, field, "routes"); err != nil {
		return nil, err
	}
	return r, nil
}
