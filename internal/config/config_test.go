package config

import (
	"errors"
	"fmt"
	"github.com/sluicehq/sluice/internal/global"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/proto"
)

// Ensure the example in deploy/ loads and says what its comments say, and
// so does its global limit, commented out (a sidecar without Redis refuses
// it), once its lines are uncommented.
func TestLoad_example(t *testing.T) {
	path := filepath.Join("..", "..", "deploy", "sluice.example.yaml")
	s, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(s.Names(), " "), "api login signup webhooks"; got != want {
		t.Fatalf("names %q, want %q", got, want)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	uncommented := regexp.MustCompile(`(?m)^#(  )`).ReplaceAll(data, []byte("$1"))
	if s, err = Parse(path, uncommented); err != nil {
		t.Fatalf("the example uncommented: %v", err)
	}
	if got, want := strings.Join(s.Names(), " "), "api exports login signup webhooks"; got != want {
		t.Fatalf("names of the example uncommented %q, want %q", got, want)
	}
	login, _ := s.Lookup("login")
	if login.Wire != proto.TokenBucketLimit(10, time.Hour, 1) || login.Shadow || login.Description == "" {
		t.Errorf("login = %+v", login)
	}
	if login.Bucket.Algorithm != bucket.TokenBucket || login.Bucket.Max != 10 {
		t.Errorf("login's bucket limit = %+v", login.Bucket)
	}
	if l, _ := s.Lookup("signup"); !l.Shadow {
		t.Error("signup is not shadow")
	}
	if l, _ := s.Lookup("webhooks"); l.Wire != proto.PacerLimit(10, time.Second, 2*time.Second) {
		t.Errorf("webhooks = %v", l.Wire)
	}
	x, _ := s.Lookup("exports")
	if x.Scope != Global || x.Lease != 50 || x.LeaseTTL != 5*time.Second || x.OnUnavailable != global.Local || x.FallbackShare != 0.1 {
		t.Errorf("exports = %+v", x)
	}
	if _, ok := s.Lookup("nope"); ok {
		t.Error("an unknown name was found")
	}
}

// Ensure every mistake is refused with the file, line and field, and a
// message that says what is wanted.
func TestParse_errors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", "f.yaml: empty file: want a \"limits:\" mapping"},
		{"# nothing\n", "f.yaml: empty file"},
		{"limits: [1, 2]\n", "f.yaml:1: limits: want a mapping of names to values, limits is a list"},
		{"limit:\n  a: b\n", "f.yaml:1: limit: unknown field (want version, limits, resp or rls)"},
		{"version: 2\nlimits: {}\n", "f.yaml:1: version: version \"2\": this build reads version 1"},
		{"limits:\n  login: {limit: \"token_bucket:max=10,refill_time=1h\", shdow: true}\n",
			"f.yaml:2: limits.login.shdow: unknown field (want limit, overrides, description, shadow, scope"},
		{"limits:\n  login:\n    limit: \"token_bucket:max=x,refill_time=1h\"\n",
			`f.yaml:3: limits.login.limit: "token_bucket:max=x,refill_time=1h": max: invalid integer "x"`},
		{"limits:\n  login:\n    limit: \"token_bucket:max=0,refill_time=1h\"\n",
			`f.yaml:3: limits.login.limit: "token_bucket:max=0,refill_time=1h": `},
		{"limits:\n  api:\n    limit: \"quota:limit=1,period=day,tz=Nowhere/Land\"\n",
			`f.yaml:3: limits.api.limit: "quota:limit=1,period=day,tz=Nowhere/Land": unknown time zone "Nowhere/Land"`},
		{"limits:\n  api:\n    limit: \"quota:limit=1,period=year\"\n    scope: global\n",
			`f.yaml:3: limits.api.limit: "quota:limit=1,period=year" cannot be global: the limit cannot be global: a global quota's period is at most about 50 days (days, weeks or one month), got 1 year`},
		{"limits:\n  api: []\n", `f.yaml:2: limits.api.limit: an empty list: want one or more limit specs`},
		{"limits:\n  api: [\"gcra:burst=1,count=1,period=1s\", \"quota:limit=x,period=day\"]\n",
			`f.yaml:2: limits.api.limit[1]: "quota:limit=x,period=day": limit: invalid integer "x"`},
		{"limits:\n  api: [\"gcra:burst=1,count=1,period=1s\", \"login\"]\n",
			`f.yaml:2: limits.api.limit[1]: "login": want ALGORITHM:name=value,...`},
		{"limits:\n  api:\n    limit: [\"gcra:burst=1,count=1,period=1s\", \"quota:limit=1,period=day\"]\n    scope: global\n    lease: 5\n",
			`f.yaml:5: limits.api.lease: a list of limits decided fleet-wide cannot be leased (leases cannot decide its limits all or nothing): remove lease for exact mode`},
		{"limits:\n  api:\n    limit: [\"gcra:burst=1,count=1,period=1s\", \"quota:limit=1,period=year\"]\n    scope: global\n",
			`f.yaml:3: limits.api.limit[1]: "quota:limit=1,period=year" cannot be global`},
		{"limits:\n  api:\n    limit: [\"gcra:burst=1,count=1,period=1s\", \"concurrency:limit=1,lease=1s\"]\n    scope: global\n",
			`f.yaml:3: limits.api.limit[1]: "concurrency:limit=1,lease=1s": a concurrency limit cannot be in a list decided fleet-wide`},
		{"limits:\n  api: [" + strings.Repeat("\"gcra:burst=1,count=1,period=1s\", ", 16) + "\"gcra:burst=1,count=1,period=1s\"]\n",
			`f.yaml:2: limits.api.limit: a list of 17 limits, want at most 16`},
		{"limits:\n  login:\n    limit: \"bucket:max=1\"\n",
			`f.yaml:3: limits.login.limit: "bucket:max=1": unknown algorithm "bucket"`},
		{"limits:\n  login:\n    description: x\n", "f.yaml:2: limits.login: no limit: want limit:"},
		{"limits:\n  login:\n    limit: \"gcra:burst=1,count=1,period=1s\"\n    shadow: yes\n",
			`f.yaml:4: limits.login.shadow: "yes": want true or false`},
		{"limits:\n  a:b: \"gcra:burst=1,count=1,period=1s\"\n", `f.yaml:2: limits.a:b: name "a:b" contains ':'`},
		{"limits:\n  1x: \"gcra:burst=1,count=1,period=1s\"\n", `f.yaml:2: limits.1x: name "1x": want letters, digits`},
		{"limits:\n  spec: \"gcra:burst=1,count=1,period=1s\"\n", `f.yaml:2: limits.spec: name "spec" is reserved`},
		{"limits:\n  " + strings.Repeat("a", 65) + ": \"gcra:burst=1,count=1,period=1s\"\n", "name of 65 bytes, longer than 64"},
		{"limits:\n  a: \"gcra:burst=1,count=1,period=1s\"\n  a: \"gcra:burst=2,count=1,period=1s\"\n",
			"f.yaml:3: limits.a: defined twice (first on line 2)"},
		{"limits:\n  a:\n    limit: \"gcra:burst=1,count=1,period=1s\"\n    lease: 10\n",
			"f.yaml:4: limits.a.lease: applies to global limits only (add scope: global)"},
		{"limits:\n  a:\n    limit: \"gcra:burst=1,count=1,period=1s\"\n    scope: fleet\n",
			`f.yaml:4: limits.a.scope: scope "fleet": want local or global`},
		{"limits:\n  a:\n    limit: \"gcra:burst=1,count=1,period=1s\"\n    scope: global\n    fallback_share: 1.5\n",
			`f.yaml:5: limits.a.fallback_share: "1.5": want a fraction above 0 and at most 1`},
		{"limits:\n  a:\n    limit: \"gcra:burst=1,count=1,period=1s\"\n    scope: global\n    on_unavailable: maybe\n",
			`f.yaml:5: limits.a.on_unavailable: "maybe": want local, open or closed`},
		{"limits:\n  a:\n    limit: \"gcra:burst=1,count=1,period=1s\"\n    scope: global\n    lease: forever\n",
			`f.yaml:5: limits.a.lease: "forever": want auto, or a number of tokens from 1 to 4503599627370496`},
		{"limits:\n  a:\n    limit: \"gcra:burst=1,count=1,period=1s\"\n    scope: global\n    lease_ttl: 2h\n",
			`f.yaml:5: limits.a.lease_ttl: "2h": want a duration from 1ms to 1h`},
		{"limits:\n  a:\n    limit: \"pacer:rate=1,period=1s,max_delay=1s\"\n    scope: global\n    lease: auto\n",
			`f.yaml:5: limits.a.lease: a pacer cannot be leased (its replies carry a delay): remove lease for exact mode`},
		{"limits:\n  a:\n    limit: \"token_bucket:max=10,refill_time=2000h\"\n    scope: global\n",
			`f.yaml:3: limits.a.limit: "token_bucket:max=10,refill_time=2000h" cannot be global: `},
		{"limits:\n  a:\n    limit: \"sliding_log:limit=10,window=1500h\"\n    scope: global\n",
			`f.yaml:3: limits.a.limit: "sliding_log:limit=10,window=1500h" cannot be global: `},
		{"limits:\n  a:\n    limit: \"concurrency:limit=5,lease=30s\"\n    scope: global\n    lease: auto\n",
			`f.yaml:5: limits.a.lease: a concurrency limit cannot be leased (a lease of it is a slot held in Redis): remove lease for exact mode`},
		{"limits:\n  a:\n    limit: \"sliding_log:limit=5000,window=1s\"\n", "want <= 4096 (the most requests a sliding log remembers)"},
		{"limits:\n  a: {limit: \"x\"\n", "f.yaml:2: did not find expected ',' or '}'"},
		// A syntax error is reported on its own line, not on the line of
		// the mapping or list around it.
		{"version: 1\nlimits:\n  login:\n    limit: \"gcra:burst=1,count=1,period=1s\"\n   description: x\n  api: \"gcra:burst=1,count=1,period=1s\"\n",
			"f.yaml:5: did not find expected key"},
		{"version: 1\nlimits:\n  login:\n    limit: gcra:burst=1,count=1,period=1s\n  - api: foo\n", "f.yaml:5: did not find expected key"},
		{"version: 1\nlimits:\n  login: [a, b\n  api: foo\n  other: bar\n", "f.yaml:3: did not find expected ',' or ']'"},
		{"version: 1\nlimits:\n  login:\n    limit: gcra:burst=1,count=1,period=1s\n    description: a: b\n", "f.yaml:5: mapping values are not allowed in this context"},
		{"version: 1\nlimits:\n" + manyLimits(200) + "   bad: \"gcra:burst=1,count=1,period=1s\"\n" + manyLimits(50),
			"f.yaml:203: did not find expected key"},
		{"limits:\n\ta: 1\n", "f.yaml:2: found character that cannot start any token"},
	} {
		_, err := Parse("f.yaml", []byte(c.in))
		if err == nil {
			t.Errorf("Parse(%q) succeeded, want %q", c.in, c.want)
			continue
		}
		if !strings.HasPrefix(err.Error(), c.want) && !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q):\n got %q\nwant %q", c.in, err, c.want)
		}
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%q): %v does not wrap ErrInvalid", c.in, err)
		}
	}
}

// Ensure a bad parameter's error still wraps the bucket package's sentinel
// for programs.
func TestParse_wrapsCause(t *testing.T) {
	_, err := Parse("f.yaml", []byte("limits:\n  a: \"gcra:burst=1,count=0,period=1s\"\n"))
	if !errors.Is(err, bucket.ErrZeroRate) {
		t.Fatalf("err = %v, want it to wrap bucket.ErrZeroRate", err)
	}
	_, err = Parse("f.yaml", []byte("limits:\n  a: \"gcra:burst=1\"\n"))
	if !errors.Is(err, proto.ErrInvalidLimit) {
		t.Fatalf("err = %v, want it to wrap proto.ErrInvalidLimit", err)
	}
}

func TestSet_changes(t *testing.T) {
	a, err := Parse("a", []byte("limits:\n  x: \"gcra:burst=1,count=1,period=1s\"\n  y: \"gcra:burst=1,count=1,period=1s\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse("b", []byte("limits:\n  y: \"gcra:burst=2,count=1,period=1s\"\n  z: \"gcra:burst=1,count=1,period=1s\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	added, removed, changed := b.Changes(a)
	if strings.Join(added, ",") != "z" || strings.Join(removed, ",") != "x" || strings.Join(changed, ",") != "y" {
		t.Fatalf("Changes = %v %v %v", added, removed, changed)
	}
	var h Holder
	if h.Load().Len() != 0 {
		t.Fatal("the zero Holder is not empty")
	}
	if old := h.Swap(a); old.Len() != 0 || h.Load() != a {
		t.Fatal("Swap")
	}
}

// A spec's shadow=true shadows the limit as the field shadow: true does.
func TestParse_shadowInSpec(t *testing.T) {
	c, err := Parse("f.yaml", []byte("limits:\n  a:\n    limit: \"gcra:burst=1,count=1,period=1s,shadow=true\"\n  b:\n    limit: \"gcra:burst=1,count=1,period=1s\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := c.Lookup("a")
	b, _ := c.Lookup("b")
	if !a.Shadow || b.Shadow || a.Wire != b.Wire {
		t.Errorf("a: shadow %v, wire %v; b: shadow %v, wire %v", a.Shadow, a.Wire, b.Shadow, b.Wire)
	}
}

// manyLimits returns n lines of valid limits, a0 to an-1.
func manyLimits(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "  a%d: \"gcra:burst=1,count=1,period=1s\"\n", i)
	}
	return b.String()
}

// A named limit may be a list of specs, in the shorthand or under limit:,
// and the list is part of what a reload compares.
func TestParse_list(t *testing.T) {
	set, err := Parse("f.yaml", []byte("limits:\n  login: [\"token_bucket:max=5,refill_time=1s\", \"quota:limit=1000,period=day,shadow=true\"]\n"+
		"  api:\n    limit:\n      - \"gcra:burst=1,count=1,period=1s\"\n    description: one in a list\n"))
	if err != nil {
		t.Fatal(err)
	}
	l, _ := set.Lookup("login")
	parts := l.Parts()
	if len(parts) != 2 || parts[0].Wire.Algorithm != proto.TokenBucket || parts[1].Wire.Algorithm != proto.Quota || !l.Shadow {
		t.Fatalf("login: %+v, shadow %v", parts, l.Shadow)
	}
	if a, _ := set.Lookup("api"); len(a.More) != 0 || a.Wire.Algorithm != proto.GCRA {
		t.Fatalf("api: %+v", a)
	}
	other, err := Parse("f.yaml", []byte("limits:\n  login: [\"token_bucket:max=5,refill_time=1s\", \"quota:limit=2000,period=day,shadow=true\"]\n"+
		"  api:\n    limit: \"gcra:burst=1,count=1,period=1s\"\n    description: one in a list\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, changed := other.Changes(set); !slices.Equal(changed, []string{"login"}) {
		t.Errorf("changed %v, want [login]", changed)
	}
	// A list may be global, in exact mode, with its outage policy.
	g, err := Parse("f.yaml", []byte("limits:\n  login:\n    limit: [\"token_bucket:max=5,refill_time=1s\", \"quota:limit=1000,period=day\"]\n"+
		"    scope: global\n    on_unavailable: closed\n"))
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := g.Lookup("login"); len(l.Parts()) != 2 || l.Scope != Global || l.OnUnavailable != global.Closed {
		t.Errorf("a global list: %+v", l)
	}
}
