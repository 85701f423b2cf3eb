package config

import (
	"fmt"
	"github.com/sluicehq/sluice/bucket"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/proto"
)

const overridesConfig = `limits:
  api:
    limit: "quota:limit=100,period=day,tz=UTC"
    shadow: true
    overrides:
      "tenant:acme": "quota:limit=10000,period=day,tz=America/New_York"
      "tenant:beta-*": "token_bucket:max=500,refill_time=1m"
      "tenant:beta-big*": ["token_bucket:max=5000,refill_time=1m", "quota:limit=9,period=week"]
      "*": "quota:limit=50,period=day"
`

// The most specific override wins: the exact key, else the longest
// pattern; each override keeps its limit's options.
func TestOverrides(t *testing.T) {
	set, err := Parse("f.yaml", []byte(overridesConfig))
	if err != nil {
		t.Fatal(err)
	}
	api, _ := set.Lookup("api")
	if api.Overrides.Len() != 4 {
		t.Fatalf("%d overrides, want 4", api.Overrides.Len())
	}
	for _, c := range []struct {
		key  string
		want string // the first spec of the override, "" for none
	}{
		{"tenant:acme", "quota:limit=10000,period=day,tz=America/New_York"},
		{"tenant:acme2", "quota:limit=50,period=day"},
		{"tenant:beta-1", "token_bucket:max=500,refill_time=1m0s,refill_amount=500"},
		{"tenant:beta-", "token_bucket:max=500,refill_time=1m0s,refill_amount=500"},
		{"tenant:beta-big", "token_bucket:max=5000,refill_time=1m0s,refill_amount=5000"},
		{"tenant:beta-bigger", "token_bucket:max=5000,refill_time=1m0s,refill_amount=5000"},
		{"tenant:beta", "quota:limit=50,period=day"},
		{"x", "quota:limit=50,period=day"},
	} {
		o := api.Overrides.Lookup([]byte(c.key))
		if o == nil || o.Wire.String() != c.want || !o.Shadow || o.Name != "api" {
			t.Errorf("%q: %+v, want %s", c.key, o, c.want)
		}
	}
	if o := api.Overrides.Lookup([]byte("tenant:beta-big1")); len(o.More) != 1 || o.More[0].Wire.Algorithm != proto.Quota {
		t.Errorf("a list as an override: %+v", o)
	}
	for _, bad := range []struct{ text, want string }{
		{"limits:\n  a:\n    limit: \"gcra:burst=1,count=1,period=1s\"\n    overrides:\n      'a\\': \"gcra:burst=2,count=1,period=1s\"\n",
			`f.yaml:5: limits.a.overrides.a\: override "a\\": "a\\" ends in a lone '\': write \\ for a backslash`},
		{"limits:\n  a:\n    limit: \"gcra:burst=1,count=1,period=1s\"\n    overrides:\n      'ab': \"gcra:burst=2,count=1,period=1s\"\n      'a\\b': \"gcra:burst=2,count=1,period=1s\"\n",
			`override "a\\b": another entry is the same key`},
		{"limits:\n  a:\n    limit: \"gcra:burst=1,count=1,period=1s\"\n    overrides:\n      \"k\": \"gcra:burst=x,count=1,period=1s\"\n",
			`f.yaml:5: limits.a.overrides.k: "gcra:burst=x,count=1,period=1s": burst: invalid integer "x"`},
		{"limits:\n  a:\n    limit: \"gcra:burst=1,count=1,period=1s\"\n    scope: global\n    overrides:\n      \"k\": \"token_bucket:max=10,refill_time=2000h\"\n",
			`f.yaml:6: limits.a.overrides.k: "token_bucket:max=10,refill_time=2000h" cannot be global`},
	} {
		if _, err := Parse("f.yaml", []byte(bad.text)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: %v, want %q", bad.text, err, bad.want)
		}
	}
	// A reload that changes an override changes the limit.
	other, err := Parse("f.yaml", []byte(strings.Replace(overridesConfig, "limit=10000", "limit=20000", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, changed := other.Changes(set); len(changed) != 1 || changed[0] != "api" {
		t.Errorf("changed %v, want [api]", changed)
	}
}

// overridesOf returns a limit with n overrides: a third exact keys, a
// third "prefix*" patterns of several lengths, a third globs with an inner
// wildcard, about 35 under each of 97 literal prefixes.
func overridesOf(b testing.TB, n int) *Limit {
	var sb strings.Builder
	sb.WriteString("limits:\n  api:\n    limit: \"quota:limit=100,period=day\"\n    overrides:\n")
	for i := range n {
		switch i % 3 {
		case 0:
			fmt.Fprintf(&sb, "      \"tenant:%d\": \"quota:limit=%d,period=day\"\n", i, 1000+i)
		case 1:
			fmt.Fprintf(&sb, "      \"org:%d:team-%d*\": \"token_bucket:max=%d,refill_time=1m\"\n", i%97, i, 10+i)
		case 2:
			fmt.Fprintf(&sb, "      \"app:%d:*:user-%d\": \"gcra:burst=%d,count=1,period=1s\"\n", i%97, i, 10+i)
		}
	}
	set, err := Parse("f.yaml", []byte(sb.String()))
	if err != nil {
		b.Fatal(err)
	}
	l, _ := set.Lookup("api")
	return l
}

// BenchmarkOverrideLookup finds a key's override among 10,000 (a third
// exact keys, a third "prefix*" patterns, a third globs with an inner
// wildcard): an exact key, a key under a "prefix*" pattern, a key under a
// glob (its literal prefix has about 35 globs to match), a key that
// matches none; beside a token bucket's decision, and a scan of every
// pattern, in the same run.
func BenchmarkOverrideLookup(b *testing.B) {
	l := overridesOf(b, 10_000)
	for _, c := range []struct{ name, key string }{
		{"exact", "tenant:4242"},
		{"pattern", "org:72:team-4243-frontend:user:9"},
		{"glob", "app:73:eu-west:user-4244"},
		{"none", "user:alice@example.com"},
	} {
		key := []byte(c.key)
		if (l.Overrides.Lookup(key) == nil) != (c.name == "none") {
			b.Fatalf("%s: lookup of %q", c.name, c.key)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				l.Overrides.Lookup(key)
			}
		})
	}
	b.Run("token_bucket_decision_baseline", func(b *testing.B) {
		tb := bucket.Limit{Algorithm: bucket.TokenBucket, Max: 1 << 40, RefillTime: 1e9, RefillAmount: 1}
		if err := tb.Validate(); err != nil {
			b.Fatal(err)
		}
		var s bucket.State
		var d bucket.Decision
		now := int64(1e18)
		tb.Init(now, &s, nil)
		for b.Loop() {
			now += 50_000
			tb.Decide(now, &s, nil, 1, 0, &d)
		}
	})
	// What the trie saves: the most specific pattern found by a scan.
	key := []byte("app:73:eu-west:user-4244")
	b.Run("glob_by_scan_baseline", func(b *testing.B) {
		for b.Loop() {
			best := -1
			for _, o := range l.Overrides.All() {
				if p, rest, _, _ := splitPattern(o.Key); rest != "" && len(p) > best && MatchKey(o.Key, key) {
					best = len(p)
				}
			}
		}
	})
}

// Overrides set at run time live in the overrides file beside the config
// file: they replace the file's for the same key, survive a new Load (a
// restart), reach a running sidecar through its watcher, and a bad one is
// refused without touching the file.
func TestOverridesFile(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/sluice.yaml"
	if err := os.WriteFile(path, []byte(overridesConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	set, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	h := NewHolder(set)
	w := &Watcher{Path: path, Holder: h, Interval: -1}
	limitOf := func(key string) string {
		l, _ := h.Load().Lookup("api")
		if o := l.Overrides.Lookup([]byte(key)); o != nil {
			return o.Wire.String()
		}
		return ""
	}
	if existed, err := SetOverride(path, "api", "tenant:acme", "quota:limit=5,period=day"); err != nil || existed {
		t.Fatalf("set: %v %v", existed, err)
	}
	if existed, err := SetOverride(path, "api", "tenant:new", "gcra:burst=1,count=1,period=1s"); err != nil || existed {
		t.Fatalf("set: %v %v", existed, err)
	}
	if err := w.Reload(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := limitOf("tenant:acme"); got != "quota:limit=5,period=day" {
		t.Errorf("acme after the set: %s", got)
	}
	if got := limitOf("tenant:new"); got != "gcra:burst=1,count=1,period=1s" {
		t.Errorf("a new key: %s", got)
	}
	// A restart: Load reads both files.
	again, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := again.Lookup("api"); l.Overrides.Lookup([]byte("tenant:acme")).Wire.String() != "quota:limit=5,period=day" || l.Overrides.Len() != 5 {
		t.Errorf("after a restart: %d overrides", l.Overrides.Len())
	}
	before, _ := os.ReadFile(OverridesPath(path))
	for _, bad := range []struct{ name, key, spec, want string }{
		{"api", "k", "quota:limit=1,period=fortnight", `invalid period "fortnight"`},
		{"nope", "k", "quota:limit=1,period=day", "no limit of that name"},
		{"api", `a\`, "quota:limit=1,period=day", "ends in a lone"},
	} {
		if _, err := SetOverride(path, bad.name, bad.key, bad.spec); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("set %s %s %s: %v, want %q", bad.name, bad.key, bad.spec, err, bad.want)
		}
	}
	if after, _ := os.ReadFile(OverridesPath(path)); string(after) != string(before) {
		t.Error("a refused override changed the file")
	}
	if existed, err := SetOverride(path, "api", "tenant:acme", ""); err != nil || !existed {
		t.Fatalf("unset: %v %v", existed, err)
	}
	if existed, err := SetOverride(path, "api", "tenant:acme", ""); err != nil || existed {
		t.Fatalf("unset again: %v %v", existed, err)
	}
	if err := w.Reload(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := limitOf("tenant:acme"); got != "quota:limit=10000,period=day,tz=America/New_York" {
		t.Errorf("acme after the unset: the config file's again, got %s", got)
	}
}

// Overrides take the routes' globs; the most specific wins: the exact
// key, the longest literal prefix, the most literal bytes, the fewest '*',
// the file's order.
func TestOverrideGlobs(t *testing.T) {
	var o Overrides
	keys := []string{"tenant:*", "tenant:*:admin", "tenant:beta-*", "tenant:beta-?", "tenant:beta-*x", `tenant:\*`, "*:admin", "*", "t?nant:*"}
	for _, k := range keys {
		if err := o.add(k, &Limit{Pattern: k}, false); err != nil {
			t.Fatal(err)
		}
	}
	for key, want := range map[string]string{
		"tenant:*":            `tenant:\*`, // an escaped '*' is an exact key
		"tenant:acme":         "tenant:*",
		"tenant:acme:admin":   "tenant:*:admin",
		"tenant:beta-1":       "tenant:beta-?", // fewer '*' than tenant:beta-*
		"tenant:beta-12":      "tenant:beta-*",
		"tenant:beta-1x":      "tenant:beta-*x", // more literal bytes
		"tenant:beta-1:admin": "tenant:beta-*",  // the longer literal prefix
		"tanant:1":            "t?nant:*",
		"user:admin":          "*:admin",
		"user":                "*",
		"":                    "*",
	} {
		if got := o.Find([]byte(key)); got == nil || got.Key != want {
			t.Errorf("%q: %+v, want %s", key, got, want)
		}
	}
}

// Find agrees with a scan of every override under the same rules, over
// random patterns and keys of a small alphabet (so that they meet).
func TestOverrideGlobsAgainstScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	word := func(alphabet string, max int) string {
		b := make([]byte, rng.IntN(max+1))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
	for trial := range 300 {
		var o Overrides
		var entries []string
		for range 1 + rng.IntN(40) {
			k := word(`ab:*?*\`, 5)
			if checkPattern(k) != nil || o.add(k, &Limit{Pattern: k}, false) != nil {
				continue
			}
			entries = append(entries, k)
		}
		for range 100 {
			key := []byte(word("ab:", 6))
			var best string
			var bestRank [4]int
			for seq, e := range entries {
				prefix, rest, literals, stars := splitPattern(e)
				if rest == "" {
					if prefix == string(key) {
						best, bestRank = e, [4]int{1 << 30}
						break
					}
					continue
				}
				if !MatchKey(e, key) {
					continue
				}
				r := [4]int{len(prefix), literals, -stars, -seq}
				if best == "" || slices.Compare(r[:], bestRank[:]) > 0 {
					best, bestRank = e, r
				}
			}
			got := ""
			if f := o.Find(key); f != nil {
				got = f.Key
			}
			if got != best {
				t.Fatalf("trial %d, entries %q, key %q: %q, want %q", trial, entries, key, got, best)
			}
		}
	}
}
