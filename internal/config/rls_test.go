package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Ensure the errors of envoyproxy/ratelimit's config tests are errors here
// too, with the file's line, and a named limit must be one of the file's
// that can decide a descriptor.
func TestParse_rlsErrors(t *testing.T) {
	cases := []struct{ text, want string }{
		{"domain: \"\"\ndescriptors: []\n", "config file cannot have empty domain"},
		{"rls:\n  - domain: a\n  - domain: a\n", "duplicate domain 'a' in config file"},
		{"domain: a\ndescriptors:\n  - value: x\n", "f.yaml:3: descriptors[0]: descriptor has empty key"},
		{"domain: a\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n", "duplicate descriptor composite key 'a.k_v'"},
		{"domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: foo\n      requests_per_unit: 1\n", "f.yaml:5: descriptors[0].rate_limit.unit: invalid rate limit unit 'foo'"},
		{"domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      name: n\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: n\n", "replaces should not contain name of same descriptor"},
		{"domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: \"\"\n", "should not have an empty replaces entry"},
		{"domain: a\ndescriptors:\n  - key: k\n    ratelimit:\n      unit: second\n", "unknown key 'ratelimit'"},
		{"domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      unlimited: true\n", "should not specify rate limit unit when unlimited"},
		{"domain: a\ndescriptors:\n  - key: k\n    quota_mode: true\n", "quota mode is not supported"},
		{"domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      limit: nope\n", "names the limit \"nope\", which the file does not define"},
		{"limits:\n  c: \"concurrency:limit=2,lease=1s\"\nrls:\n  - domain: a\n    descriptors:\n      - key: k\n        rate_limit:\n          limit: c\n", "a concurrency limit"},
		{"limits:\n  w: \"fixed_window:limit=2,window=1s\"\nrls:\n  - domain: a\n    descriptors:\n      - key: k\n        rate_limit:\n          limit: w\n          unit: second\n", "not both"},
		{"domain: a\ndescriptors:\n  - key: k\n    share_threshold: true\n", "share_threshold applies to a wildcard value only"},
		// A list would decide only its first limit, an override would never match.
		{"limits:\n  l: [\"fixed_window:limit=2,window=1s\", \"quota:limit=5,period=day\"]\nrls:\n  - domain: a\n    descriptors:\n      - key: k\n        rate_limit:\n          limit: l\n", "a list of limits, which cannot decide a descriptor"},
		{"limits:\n  o:\n    limit: \"fixed_window:limit=2,window=1s\"\n    overrides: {\"k*\": \"fixed_window:limit=9,window=1s\"}\nrls:\n  - domain: a\n    descriptors:\n      - key: k\n        rate_limit:\n          limit: o\n", "which has overrides"},
	}
	for _, tc := range cases {
		_, err := Parse("f.yaml", []byte(tc.text))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q): %v, want %q", tc.text, err, tc.want)
		}
	}
}

// Ensure an envoyproxy/ratelimit file is read as it is, and a Sluice file's
// rls list beside its limits, and a reload that keeps limits keeps the
// domains too.
func TestParse_rls(t *testing.T) {
	s, err := Parse("f.yaml", []byte("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: Second, requests_per_unit: 3}\n    detailed_metric: true\n    metadata: {x: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s.RLS().Len() != 1 || s.Len() != 0 {
		t.Errorf("an envoyproxy/ratelimit file: %d domains, %d limits", s.RLS().Len(), s.Len())
	}
	s, err = Parse("f.yaml", []byte("limits:\n  w: \"fixed_window:limit=2,window=1s\"\nrls:\n  - domain: a\n    descriptors:\n      - key: k\n        rate_limit: {limit: w}\n  - domain: b\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s.RLS().Len() != 2 || s.Len() != 1 {
		t.Errorf("a Sluice file: %d domains, %d limits", s.RLS().Len(), s.Len())
	}
	next, err := Parse("f.yaml", []byte("limits:\n  x: \"fixed_window:limit=2,window=1s\"\nrls:\n  - domain: c\n"))
	if err != nil {
		t.Fatal(err)
	}
	kept, _ := next.keep(s)
	if kept.RLS() != next.RLS() || kept.Len() != 2 {
		t.Errorf("a reload keeping limits: %d limits, domains %p, want %p", kept.Len(), kept.RLS(), next.RLS())
	}
}

// An override of a limit that decides descriptors is refused in the
// overrides file too, which sluice override set checks before writing.
func TestOverridesFile_rlsLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	text := "limits:\n  w: \"fixed_window:limit=2,window=1s\"\nrls:\n  - domain: a\n    descriptors:\n      - key: k\n        rate_limit:\n          limit: w\n"
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := SetOverride(path, "w", "k*", "fixed_window:limit=9,window=1s"); err == nil || !strings.Contains(err.Error(), "a rate_limit of the rls section names this limit") {
		t.Errorf("override of a descriptor's limit: %v", err)
	}
	if _, err := os.Stat(OverridesPath(path)); err == nil {
		t.Error("the refused override was written")
	}
}
