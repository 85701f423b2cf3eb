package config

import (
	"fmt"
	"slices"
	"strings"
)

// Overrides are a named limit's limits for particular keys, by exact key
// and by key pattern: a prefix followed by '*' ("tenant:beta-*"; "*" alone
// matches every key). The most specific wins: the exact key, else the
// longest pattern that matches. Lookup reads the key once, whatever the
// number of overrides: the exact keys are a map, the patterns a trie of
// their prefixes, walked along the key, which remembers the deepest
// pattern it passes.
type Overrides struct {
	exact    map[string]*Limit
	patterns trieNode
	n        int
	all      []Override // in the file's order
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

// trieNode is one prefix of the patterns: the limit of the pattern that
// is this prefix, if any, and the longer prefixes, by their next byte.
type trieNode struct {
	limit *Limit
	edges []byte // the next bytes, in the order added
	kids  []*trieNode
	dense *[256]*trieNode // the same, by byte, once a node has denseAt of them
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

// add records l as the override of key, an exact key or a pattern. A key
// given twice is an error, unless replace is set: l then replaces the
// earlier one (an overrides file's replace the config file's).
func (o *Overrides) add(key string, l *Limit, replace bool) error {
	prefix, pattern := strings.CutSuffix(key, "*")
	if strings.Contains(prefix, "*") {
		return fmt.Errorf("override %q: '*' may only end a pattern", key)
	}
	slot := &o.patterns.limit
	if pattern {
		n := &o.patterns
		for i := 0; i < len(prefix); i++ {
			n = n.child(prefix[i], true)
		}
		slot = &n.limit
	} else {
		if o.exact == nil {
			o.exact = map[string]*Limit{}
		}
		old := o.exact[key]
		slot = &old
		defer func() { o.exact[key] = *slot }()
	}
	if *slot != nil {
		if !replace {
			return fmt.Errorf("override %q given twice", key)
		}
		i := slices.IndexFunc(o.all, func(x Override) bool { return x.Key == key })
		o.all[i].Limit, *slot = l, l
		return nil
	}
	*slot = l
	o.n++
	o.all = append(o.all, Override{key, l})
	return nil
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
	k := &trieNode{}
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

// Lookup returns the override of key: the exact key's, else the longest
// matching pattern's; nil if none matches. It allocates nothing.
func (o *Overrides) Lookup(key []byte) *Limit {
	if o == nil {
		return nil
	}
	if l, ok := o.exact[string(key)]; ok {
		return l
	}
	n, best := &o.patterns, o.patterns.limit
	for _, c := range key {
		if n = n.child(c, false); n == nil {
			break
		}
		if n.limit != nil {
			best = n.limit
		}
	}
	return best
}
