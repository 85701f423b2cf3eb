package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/global"
)

// Ensure a key pattern matches as documented: '*' any run of bytes,
// separators included, '?' one byte, '\' a literal, the rest itself.
func TestMatchKey(t *testing.T) {
	for _, c := range []struct {
		pattern, key string
		want         bool
	}{
		{"login:*", "login:alice", true},
		{"login:*", "login:", true},
		{"login:*", "login", false},
		{"login:*", "xlogin:alice", false},
		{"*", "", true},
		{"*", "anything/at:all", true},
		{"*:ip:*", "signup:ip:203.0.113.9", true},
		{"*:ip:*", "signup:ip", false},
		{"a*b*c", "aXXbYYc", true},
		{"a*b*c", "aXXbYYcZ", false},
		{"a*b*c", "abcbc", true},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"a?c", "abbc", false},
		{`a\*`, "a*", true},
		{`a\*`, "ab", false},
		{`a\?`, "a?", true},
		{`a\\b`, `a\b`, true},
		{"exact", "exact", true},
		{"exact", "exactly", false},
		{"login:*/x", "login:a/b/x", true},
		{"**a", "bba", true},
		{"héllo*", "héllo wörld", true},
	} {
		if got := MatchKey(c.pattern, []byte(c.key)); got != c.want {
			t.Errorf("MatchKey(%q, %q) = %v, want %v", c.pattern, c.key, got, c.want)
		}
	}
}

// Ensure a pattern of many stars against a long key that almost matches
// costs at most pattern x key steps, not an exponential backtrack: this
// would not finish if it did.
func TestMatchKey_noBacktrackingBlowUp(t *testing.T) {
	pattern := strings.Repeat("*a", 40) + "b"
	key := []byte(strings.Repeat("a", 1024))
	if MatchKey(pattern, key) {
		t.Fatal("matched a key without the final b")
	}
}

// Ensure the resp section parses into routes in the file's order, the
// first match decides, and a global route carries its settings.
func TestParse_routes(t *testing.T) {
	s, err := Parse("f.yaml", []byte(`resp:
  - match: "login:test-*"
    scope: local
  - match: "login:*"
    scope: global
    lease: auto
    on_unavailable: closed
  - match: "signup:?"
    scope: global
    lease_ttl: 200ms
    fallback_share: 0.25
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Routes()) != 3 || s.Len() != 0 {
		t.Fatalf("%d routes and %d limits, want 3 and 0", len(s.Routes()), s.Len())
	}
	for _, c := range []struct {
		key   string
		line  int // 0: no route
		scope Scope
	}{
		{"login:test-1", 2, Local},
		{"login:alice", 4, Global},
		{"signup:a", 8, Global},
		{"signup:ab", 0, Local},
		{"other", 0, Local},
	} {
		r := s.Route([]byte(c.key))
		switch {
		case c.line == 0 && r != nil:
			t.Errorf("%q: route of line %d, want none", c.key, r.Line)
		case c.line != 0 && (r == nil || r.Line != c.line || r.Limit.Scope != c.scope):
			t.Errorf("%q: route %+v, want the one of line %d (%v)", c.key, r, c.line, c.scope)
		}
	}
	login := s.Route([]byte("login:alice")).Limit
	if !login.LeaseAuto || login.OnUnavailable != global.Closed || login.Name != RouteName {
		t.Errorf("login route's limit: %+v", login)
	}
	signup := s.Route([]byte("signup:a")).Limit
	if signup.LeaseTTL != 200*time.Millisecond || signup.FallbackShare != 0.25 || signup.Leased() {
		t.Errorf("signup route's limit: %+v", signup)
	}
	if !s.HasGlobal() {
		t.Error("HasGlobal is false with global routes")
	}
	local, err := Parse("f.yaml", []byte("resp:\n  - {match: \"*\", scope: local}\nlimits:\n  a: \"gcra:burst=1,count=1,period=1s\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if local.HasGlobal() {
		t.Error("HasGlobal is true without a global limit or route")
	}
}

// Ensure every mistake in a route is refused with its line and field.
func TestParse_routeErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"resp:\n  match: x\n", "f.yaml:2: resp: want a list of routes"},
		{"resp:\n  - scope: global\n", "f.yaml:2: resp[0]: no match: want match: PATTERN"},
		{"resp:\n  - match: \"a*\"\n", "f.yaml:2: resp[0]: no scope: want scope: global"},
		{"resp:\n  - match: \"\"\n    scope: global\n", "f.yaml:2: resp[0].match: an empty pattern matches no key"},
		{"resp:\n  - match: \"a\\\\\"\n    scope: global\n", `f.yaml:2: resp[0].match: "a\\" ends in a lone '\'`},
		{"resp:\n  - match: \"" + strings.Repeat("a", 1025) + "\"\n    scope: global\n", "f.yaml:2: resp[0].match: a pattern of 1025 bytes: want at most 1024"},
		{"resp:\n  - match: a\n    scope: fleet\n", `f.yaml:3: resp[0].scope: scope "fleet": want local or global`},
		{"resp:\n  - match: a\n    scope: local\n    lease: 10\n", "f.yaml:4: resp[0].lease: applies to global routes only (add scope: global)"},
		{"resp:\n  - match: a\n    scope: global\n    on_unavailable: maybe\n", `f.yaml:4: resp[0].on_unavailable: "maybe": want local, open or closed`},
		{"resp:\n  - match: a\n    scope: global\n  - match: b\n    scope: global\n    limit: x\n", "f.yaml:6: resp[1].limit: unknown field (want match, scope, lease"},
	} {
		_, err := Parse("f.yaml", []byte(c.in))
		if err == nil {
			t.Errorf("Parse(%q) succeeded, want %q", c.in, c.want)
			continue
		}
		if !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("Parse(%q):\n got %q\nwant %q", c.in, err, c.want)
		}
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%q): %v does not wrap ErrInvalid", c.in, err)
		}
	}
}

// Ensure a reload that keeps removed limits takes the new file's routes as
// they are.
func TestKeep_routes(t *testing.T) {
	old, err := Parse("f.yaml", []byte("limits:\n  a: \"gcra:burst=1,count=1,period=1s\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Parse("f.yaml", []byte("resp:\n  - {match: \"x*\", scope: global}\n"))
	if err != nil {
		t.Fatal(err)
	}
	k, kept := s.keep(old)
	if len(kept) != 1 || len(k.Routes()) != 1 || k.Route([]byte("xy")) == nil {
		t.Fatalf("kept %v, routes %d", kept, len(k.Routes()))
	}
	// A route the new file removes is gone (its keys are local again),
	// unlike a removed limit, which a reload keeps.
	gone, err := Parse("f.yaml", []byte("limits:\n  b: \"gcra:burst=1,count=1,period=1s\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if k2, _ := gone.keep(k); len(k2.Routes()) != 0 || k2.Route([]byte("xy")) != nil {
		t.Fatalf("a removed route stayed: %d routes", len(k2.Routes()))
	}
}
