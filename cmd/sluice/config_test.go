package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/config"
)

func TestConfigCheck(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("limits:\n  login:\n    limit: \"token_bucket:max=10,refill_time=1h\"\n    shdow: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	global := filepath.Join(dir, "global.yaml")
	if err := os.WriteFile(global, []byte("limits:\n  exports:\n    limit: \"fixed_window:limit=1000,window=1d\"\n    scope: global\nresp:\n  - {match: \"test:*\", scope: local}\n  - {match: \"*\", scope: global}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	example := filepath.Join("..", "..", "deploy", "sluice.example.yaml")
	runSteps(t, "", []step{
		{"config check " + global, 0, global + ": 1 limit, valid\n  exports fixed_window:limit=1000,window=24h0m0s global\n  resp \"test:*\" local\n  resp \"*\" global\n", ""},
		{"config check " + example, 0, example + ": 4 limits, valid\n" +
			"  api gcra:burst=20,count=100,period=1m0s\n" +
			"  login token_bucket:max=10,refill_time=1h0m0s,refill_amount=1\n" +
			"  signup sliding_window:limit=5,window=1h0m0s shadow\n" +
			"  webhooks pacer:rate=10,period=1s,max_delay=2s\n", ""},
		{"config check --quiet " + example, 0, "", ""},
		{"config check " + bad, 1, "", "sluice: config check: " + bad + ":4: limits.login.shdow: unknown field (want limit,"},
		{"config check " + filepath.Join(dir, "missing.yaml"), 1, "", "sluice: config check: open " + filepath.Join(dir, "missing.yaml") + ": no such file or directory"},
		{"config lint " + example, 2, "", `sluice: config: unknown subcommand "lint" (want check or import)`},
		{"config check", 2, "", "sluice: config: want check PATH [--quiet]"},
	})
}

// Ensure a LIMIT without ':' is a name the sidecar looks up in its config
// file: it decides as its spec would, an unknown name is a clear error, and
// --direct, which has no config, refuses a name.
func TestNamedLimits(t *testing.T) {
	sock := startSidecarConfig(t, filepath.Join("..", "..", "deploy", "sluice.example.yaml"))
	runSteps(t, sock, []step{
		{"acquire login:alice login", 0, "allowed remaining=9 limit=10 reset_after=1h0m0s\n", ""},
		{"acquire login:alice login --cost 9", 0, "allowed remaining=0 limit=10 reset_after=10h0m0s\n", ""},
		{"acquire login:alice login", 1, "denied remaining=0 limit=10 retry_after=1h0m0s reset_after=10h0m0s\n", ""},
		// The same bucket as the name's spec.
		{"peek login:alice token_bucket:max=10,refill_time=1h,refill_amount=1", 1, "denied ...", ""},
		{"acquire x nope", 2, "", `sluice: acquire: invalid limit: no limit of that name: "nope" is not in the config file`},
		{"acquire --direct --state /nonexistent x login", 2, "", `sluice: acquire: "login" is a named limit, which only the sidecar knows`},
	})
}

// Ensure a named list, a named quota and its overrides decide through the
// CLI as through the other front ends, an override set at run time (a
// glob) included once the sidecar loads it.
func TestNamedListsQuotasAndOverrides(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.yaml")
	text := `limits:
  login: ["token_bucket:max=5,refill_time=1h,refill_amount=5", "quota:limit=2,period=day"]
  api:
    limit: "quota:limit=1,period=day"
    overrides:
      "tenant:acme": "quota:limit=3,period=day"
      "tenant:*": "token_bucket:max=4,refill_time=1h,refill_amount=4"
`
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(k string) string { return map[string]string{"SLUICE_CONFIG": path}[k] }
	var stdout, stderr strings.Builder
	if code := run([]string{"override", "set", "api", "tenant:*:admin", "quota:limit=9,period=week"}, env, &stdout, &stderr); code != 0 {
		t.Fatalf("override set: %d %s", code, stderr.String())
	}
	sock := startSidecarConfig(t, path)
	runSteps(t, sock, []step{
		// A list's decision, then each limit's (protocol version 7), the one that binds marked.
		{"acquire alice login", 0, "allowed remaining=1 limit=2 reset_after=1h46m40s\n" +
			"  1 of 2: allowed remaining=4 limit=5 reset_after=1h0m0s\n" +
			"  2 of 2, binds: allowed remaining=1 limit=2 reset_after=1h46m40s\n", ""},
		{"acquire alice login --json", 0, `{"allowed":true,"remaining":0,"limit":2,"retry_after_ns":-1,"reset_after_ns":6400000000000,"delay_ns":0,` +
			`"limits":[{"allowed":true,"remaining":3,"limit":5,"retry_after_ns":-1,"reset_after_ns":3600000000000,"delay_ns":0},` +
			`{"allowed":true,"remaining":0,"limit":2,"retry_after_ns":-1,"reset_after_ns":6400000000000,"delay_ns":0}],"bound":1}` + "\n", ""},
		{"acquire alice login", 1, "denied remaining=0 limit=2 retry_after=1h46m40s reset_after=1h46m40s\n" +
			"  1 of 2: allowed remaining=2 limit=5 reset_after=1h0m0s\n" +
			"  2 of 2, binds: denied remaining=0 limit=2 retry_after=1h46m40s reset_after=1h46m40s\n", ""},
		{"acquire someone api", 0, "allowed remaining=0 limit=1 reset_after=1h46m40s\n", ""},
		{"acquire tenant:acme api", 0, "allowed remaining=2 limit=3 reset_after=1h46m40s\n", ""},
		{"acquire tenant:beta api", 0, "allowed remaining=3 limit=4 ...", ""},
		{"acquire tenant:beta:admin api", 0, "allowed remaining=8 limit=9 ...", ""},
	})
}

// startSidecarConfig starts a sidecar with slots of 64 bytes and the named
// limits of the config file at path (and its overrides file).
func startSidecarConfig(t *testing.T, path string) string {
	t.Helper()
	set, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return startSidecarWith(t, 64, config.NewHolder(set))
}
