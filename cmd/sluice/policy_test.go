package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/global"
	"github.com/sluicehq/sluice/internal/server"
)

// Ensure that a decision a global limit's outage policy made says so in
// both forms, with the time until the sidecar asks Redis again, not
// "never": a sidecar whose Redis is not there denies a closed limit.
func TestDecisions_policy(t *testing.T) {
	set, err := config.Parse("sluice.yaml", []byte(`limits:
  payments: {limit: "token_bucket:max=1000,refill_time=1h", scope: global, on_unavailable: closed}
`))
	if err != nil {
		t.Fatal(err)
	}
	socket := startSidecarWith(t, 128, config.NewHolder(set), func(c *server.Config) {
		c.Global = &global.Options{Addrs: []string{filepath.Join(t.TempDir(), "no-redis.sock")}}
	})
	run1 := func(args string) (int, string) {
		var stdout, stderr bytes.Buffer
		code := run(strings.Fields(args), func(k string) string {
			if k == "SLUICE_SOCKET" {
				return socket
			}
			return ""
		}, &stdout, &stderr)
		if stderr.Len() != 0 {
			t.Errorf("sluice %s: stderr %q", args, stderr.String())
		}
		return code, stdout.String()
	}
	code, out := run1("acquire k payments")
	if code != exitDenied || !strings.HasPrefix(out, "denied policy=closed remaining=0 limit=1000 retry_after=") ||
		strings.Contains(out, "never") {
		t.Errorf("sluice acquire: %d %q, want a denial of the closed policy with a retry_after", code, out)
	}
	code, out = run1("acquire k payments --json")
	var d jsonDecision
	if err := json.Unmarshal([]byte(out), &d); err != nil || code != exitDenied || d.Allowed || d.Policy != "closed" || d.RetryAfterNs <= 0 {
		t.Errorf("sluice acquire --json: %d %q (%v), want the closed policy's denial with retry_after_ns", code, out, err)
	}
}
