package config

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Overrides are a named limit's limits for particular keys, by exact key
// and by key pattern, a glob of the routes' syntax (MatchKey: '*' any run
// of bytes, '?' any one byte, '\' makes the next byte literal). An entry
// without a wildcard is an exact key ("tenant:acme"; "a\*" is the key
// "a*"). The most specific entry that matches a key decides it:
//
//  1. the exact key;
//  2. else the pattern with the longest literal prefix, the bytes before
//     its first wildcard ("tenant:beta-big*" before "tenant:beta-*",
//     "tenant:*:admin" after both);
//  3. of patterns with the same literal prefix, the one with the most
//     literal bytes ("tenant:*:admin" before "tenant:*"), then the one
//     with the fewest '*' ("tenant:?" before "tenant:*");
//  4. then the first in the file's order (the config file's before the
//     overrides file's).
//
// Lookup reads the key once along a trie of the patterns' literal
// prefixes, never scanning every pattern: a node whose patterns are only
// "prefix*" matches at once; the other patterns of a prefix the key
// starts with (a glob with inner wildcards) are matched against the rest
// of the key, deepest prefix first, and only they.
type Overrides struct {
	exact    map[string]*Override
	patterns trieNode
	n        int
	all      []Override  // in the file's order
	ptrs     []*Override // what the map and the trie hold, in the same order
}

// Override is one override: its key or pattern and its limit.
type Override struct {
	Key   string
	Limit *Limit
}

// All returns every override, in the file's order.
func (o *Overrides) All() []Override {
	if o == nil {
		return nil
	}
	return o.all
}

// sameOverrides reports whether a and b give the same limits to the same
// keys, in the same order.
func sameOverrides(a, b *Overrides) bool {
	return slices.EqualFunc(a.All(), b.All(), func(x, y Override) bool {
		return x.Key == y.Key && sameLimit(x.Limit, y.Limit)
	})
}

// trieNode is one literal prefix of the patterns: the patterns of that
// prefix, and the longer prefixes, by their next byte.
type trieNode struct {
	// globs are the patterns whose literal prefix is this node's, most
	// specific first; rest is each one's pattern after the prefix.
	globs []glob
	// up is the nearest shorter prefix that has patterns; nil if none.
	up    *trieNode
	depth int    // the prefix's length
	edges []byte // the next bytes, in the order added
	kids  []*trieNode
	dense *[256]*trieNode // the same, by byte, once a node has denseAt of them
}

// glob is one pattern of a trie node.
type glob struct {
	rest     string // the pattern after its literal prefix: begins with '*' or '?'
	any      bool   // rest is "*": every key with the prefix matches
	suffix   string // the literal bytes after its last wildcard, if none is escaped: a key must end so
	literals int    // literal bytes of the whole pattern
	stars    int    // '*' of the whole pattern
	seq      int    // the order it was added in
	o        *Override
}

// denseAt is the number of next bytes from which a node indexes them by
// byte rather than scanning them.
const denseAt = 16

// Len returns the number of overrides.
func (o *Overrides) Len() int {
	if o == nil {
		return 0
	}
	return o.n
}

// splitPattern returns the literal prefix of pattern (its escapes undone),
// the pattern from its first wildcard on ("" for an exact key), and the
// counts of its literal bytes and its '*'.
func splitPattern(pattern string) (prefix, rest string, literals, stars int) {
	var b []byte
	for i := 0; i < len(pattern); i++ {
		switch c := pattern[i]; c {
		case '*', '?':
			if rest == "" {
				rest = pattern[i:]
			}
			if c == '*' {
				stars++
			}
			continue
		case '\\':
			i++ // checkPattern refused a trailing one
		}
		if rest == "" {
			b = append(b, pattern[i])
		}
		literals++
	}
	return string(b), rest, literals, stars
}

// add records l as the override of key, an exact key or a pattern. A key
// given twice is an error, unless replace is set: l then replaces the
// earlier one (an overrides file's replace the config file's).
func (o *Overrides) add(key string, l *Limit, replace bool) error {
	if err := checkPattern(key); err != nil {
		return fmt.Errorf("override %q: %v", key, err)
	}
	if i := slices.IndexFunc(o.all, func(x Override) bool { return x.Key == key }); i >= 0 {
		if !replace {
			return fmt.Errorf("override %q given twice", key)
		}
		o.all[i].Limit, o.ptrs[i].Limit = l, l
		return nil
	}
	ov := &Override{key, l}
	prefix, rest, literals, stars := splitPattern(key)
	if rest == "" {
		if o.exact == nil {
			o.exact = map[string]*Override{}
		}
		if _, dup := o.exact[prefix]; dup {
			return fmt.Errorf("override %q: another entry is the same key", key)
		}
		o.exact[prefix] = ov
	} else {
		n, up := &o.patterns, (*trieNode)(nil)
		for i := 0; i < len(prefix); i++ {
			if len(n.globs) > 0 {
				up = n
			}
			n = n.child(prefix[i], true)
			n.up = up
		}
		if len(n.globs) == 0 { // the longer prefixes below n now fall back to n
			for _, k := range n.kids {
				k.relink(n)
			}
		}
		suffix := rest[strings.LastIndexAny(rest, "*?")+1:]
		if strings.Contains(suffix, `\`) {
			suffix = ""
		}
		n.globs = append(n.globs, glob{rest: rest, any: rest == "*", suffix: suffix, literals: literals, stars: stars, seq: o.n, o: ov})
		slices.SortStableFunc(n.globs, func(a, b glob) int {
			return cmp.Or(cmp.Compare(b.literals, a.literals), cmp.Compare(a.stars, b.stars), cmp.Compare(a.seq, b.seq))
		})
	}
	o.n++
	o.all, o.ptrs = append(o.all, *ov), append(o.ptrs, ov)
	return nil
}

// relink makes up the nearest node with patterns above n and above the
// nodes below n that have none of their own.
func (n *trieNode) relink(up *trieNode) {
	n.up = up
	if len(n.globs) > 0 {
		return
	}
	for _, k := range n.kids {
		k.relink(up)
	}
}

// child returns the node after byte c, adding it if add is set; nil if
// there is none.
func (n *trieNode) child(c byte, add bool) *trieNode {
	if n.dense != nil {
		if k := n.dense[c]; k != nil || !add {
			return k
		}
	} else {
		for i, e := range n.edges {
			if e == c {
				return n.kids[i]
			}
		}
		if !add {
			return nil
		}
	}
	k := &trieNode{depth: n.depth + 1}
	n.edges, n.kids = append(n.edges, c), append(n.kids, k)
	if n.dense != nil {
		n.dense[c] = k
	} else if len(n.edges) >= denseAt {
		n.dense = new([256]*trieNode)
		for i, e := range n.edges {
			n.dense[e] = n.kids[i]
		}
	}
	return k
}

// Lookup returns the override of key, the most specific that matches
// (see Overrides); nil if none matches. It allocates nothing.
func (o *Overrides) Lookup(key []byte) *Limit {
	if ov := o.Find(key); ov != nil {
		return ov.Limit
	}
	return nil
}

// Find is Lookup, returning the override: its key or pattern too.
func (o *Overrides) Find(key []byte) *Override {
	if o == nil {
		return nil
	}
	if ov, ok := o.exact[string(key)]; ok {
		return ov
	}
	// The deepest prefix of key that has patterns, then the shorter ones.
	var deep *trieNode
	n := &o.patterns
	if len(n.globs) > 0 {
		deep = n
	}
	for _, c := range key {
		if n = n.child(c, false); n == nil {
			break
		}
		if len(n.globs) > 0 {
			deep = n
		}
	}
	for n = deep; n != nil; n = n.up {
		for i := range n.globs {
			g := &n.globs[i]
			if g.any || (bytes.HasSuffix(key, []byte(g.suffix)) && MatchKey(g.rest, key[n.depth:])) {
				return g.o
			}
		}
	}
	return nil
}
