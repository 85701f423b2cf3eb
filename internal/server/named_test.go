package server

import (
	"bytes"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/proto"
)

const namedConfig = `limits:
  login:
    limit: "token_bucket:max=3,refill_time=1h,refill_amount=1"
    description: "password attempts"
  watched:
    limit: "gcra:burst=0,count=1,period=1h"
    shadow: true
`

// startNamed starts a sidecar with the config file text and metrics.
func startNamed(t *testing.T, text string) (*sidecar, *config.Watcher, *metrics.Recorder) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	set, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	rec := metrics.New()
	w := &config.Watcher{Path: path, Holder: config.NewHolder(set), Interval: -1,
		OnReload: func(r config.Result, _ error) { rec.ConfigReload(r == config.Reloaded) }}
	return start(t, Config{Limits: w.Holder, Metrics: rec}), w, rec
}

// Named limits decide as their specs would; a shadow limit's denials are
// answered as allowed and counted; an unknown name is InvalidLimit; the
// metrics count what happened, and promtool accepts them.
func TestNamed_limitsShadowAndMetrics(t *testing.T) {
	sc, _, rec := startNamed(t, namedConfig)
	c := dial(t, sc)
	allowed := 0
	for range 5 {
		if r := c.acquire("alice", proto.Named("login"), 1, 0); r.Status != proto.StatusOK {
			t.Fatalf("login: %+v", r)
		} else if r.Decision.Allowed {
			allowed++
		}
	}
	if allowed != 3 {
		t.Errorf("login allowed %d of 5, want 3", allowed)
	}
	// The same bucket as the spec the name stands for.
	if r := c.acquire("alice", proto.TokenBucketLimit(3, 3600e9, 1), 1, 0); r.Decision.Allowed || r.Decision.Limit != 3 {
		t.Errorf("the spec of login on the same key: %+v", r.Decision)
	}
	for i := range 3 {
		r := c.acquire("bob", proto.Named("watched"), 1, 0)
		if r.Status != proto.StatusOK || !r.Decision.Allowed || r.ShadowDenied != (i > 0) {
			t.Fatalf("shadow request %d: %+v", i, r)
		}
	}
	// SHADOW on a request does the same for an inline spec.
	one := proto.GCRALimit(0, 1, 3600e9)
	for i := range 2 {
		r := c.do(func(b []byte) []byte {
			return proto.AppendItem(b, proto.OpAcquire, proto.FlagShadow, one, 1, 0, []byte("carol"))
		})
		if r.Status != proto.StatusOK || !r.Decision.Allowed || r.ShadowDenied != (i > 0) {
			t.Fatalf("SHADOW request %d: %+v", i, r)
		}
	}
	if r := c.acquire("x", proto.Named("nope"), 1, 0); r.Status != proto.StatusInvalidLimit || !strings.Contains(string(r.Message), "nope") {
		t.Errorf("unknown name: %+v", r)
	}
	stats := c.do(proto.AppendStats)
	got := map[string]uint64{}
	for b := stats.Stats; len(b) > 0; {
		name, v, rest, err := proto.NextStat(b)
		if err != nil {
			t.Fatal(err)
		}
		got[string(name)] = v
		b = rest
	}
	if got["shadow_denied"] != 3 {
		t.Errorf("STATS shadow_denied = %d, want 3", got["shadow_denied"])
	}

	w := httptest.NewRecorder()
	rec.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	body := w.Body.String()
	for _, want := range []string{
		`sluice_decisions_total{algorithm="token_bucket",limit="login",outcome="allowed"} 3`,
		`sluice_decisions_total{algorithm="token_bucket",limit="login",outcome="denied"} 2`,
		`sluice_decisions_total{algorithm="token_bucket",limit="spec",outcome="denied"} 1`,
		`sluice_decisions_total{algorithm="gcra",limit="watched",outcome="denied"} 2`,
		`sluice_shadow_denied_total{limit="watched"} 2`,
		`sluice_shadow_denied_total{limit="spec"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// Every acquire that found or created its bucket measured its probe.
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, "sluice_probe_length_count "); ok && (v == "0" || v == "") {
			t.Errorf("no probe lengths recorded: %s", line)
		}
	}
	if !strings.Contains(body, "sluice_probe_length_count ") {
		t.Error("metrics lack sluice_probe_length")
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is required (apt-get install prometheus; .ci/run installs it)")
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(w.Body.Bytes())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// A loop of acquires runs while the config file is rewritten 100 times,
// valid and invalid in turn: no request fails, each valid change is in
// force once reloaded, each invalid file is rejected and counted.
func TestNamed_reloadUnderLoad(t *testing.T) {
	sc, w, rec := startNamed(t, namedConfig)
	var stop sync.WaitGroup
	done := make(chan struct{})
	var failures, requests int
	stop.Add(1)
	go func() {
		defer stop.Done()
		c := dial(t, sc)
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			r := c.acquire(fmt.Sprintf("k%d", i%50), proto.Named("login"), 1, 0)
			requests++
			if r.Status != proto.StatusOK {
				failures++
			}
		}
	}()
	c := dial(t, sc)
	for i := range 100 {
		valid := i%2 == 0
		text := fmt.Sprintf("limits:\n  login:\n    limit: \"token_bucket:max=%d,refill_time=1h\"\n", 10+i)
		if !valid {
			text = "limits:\n  login:\n    limit: \"token_bucket:max=oops\"\n"
		}
		if err := os.WriteFile(w.Path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		err := w.Reload()
		if valid != (err == nil) {
			t.Fatalf("reload %d (valid %v): %v", i, valid, err)
		}
		// In force at once: a new key's first acquire reports the limit
		// the last valid file gave.
		want := int64(10 + i - i%2)
		if r := c.acquire(fmt.Sprintf("probe%d", i), proto.Named("login"), 1, 0); r.Decision.Limit != want {
			t.Fatalf("after reload %d: limit %d, want %d", i, r.Decision.Limit, want)
		}
	}
	close(done)
	stop.Wait()
	if failures != 0 || requests == 0 {
		t.Errorf("%d of %d requests failed during the reloads", failures, requests)
	}
	if w.Count(config.Reloaded) != 50 || w.Count(config.Rejected) != 50 {
		t.Errorf("reloads counted: %d reloaded, %d rejected; want 50 and 50", w.Count(config.Reloaded), w.Count(config.Rejected))
	}
	rw := httptest.NewRecorder()
	rec.Handler().ServeHTTP(rw, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{`sluice_config_reloads_total{result="ok"} 50`, `sluice_config_reloads_total{result="error"} 50`} {
		if !strings.Contains(rw.Body.String(), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
