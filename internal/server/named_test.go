package server

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
	got := statsOf(t, c.do(proto.AppendStats).Stats)
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
	promtoolCheck(t, w.Body.Bytes())
}

// promtoolCheck checks an exposition with promtool.
func promtoolCheck(t *testing.T, body []byte) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is required (apt-get install prometheus; .ci/run installs it)")
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// statsOf decodes a STATS result.
func statsOf(t *testing.T, b []byte) map[string]uint64 {
	t.Helper()
	got := map[string]uint64{}
	for len(b) > 0 {
		name, v, rest, err := proto.NextStat(b)
		if err != nil {
			t.Fatal(err)
		}
		got[string(name)] = v
		b = rest
	}
	return got
}

// Decisions are counted by the override that made them, under its
// pattern (never the request's key), in STATS (the sums) and the metrics,
// which promtool accepts; a reload keeps the counts and updates how many
// overrides a limit has.
func TestNamed_overrideMetrics(t *testing.T) {
	const text = `limits:
  api:
    limit: "gcra:burst=0,count=1,period=1h"
    overrides:
      "tenant:acme": "gcra:burst=2,count=1,period=1h"
      "tenant:*:admin": "gcra:burst=1,count=1,period=1h"
      "tenant:*": "gcra:burst=0,count=1,period=1h"
`
	sc, w, rec := startNamed(t, text)
	c := dial(t, sc)
	for _, key := range []string{"tenant:acme", "tenant:acme", "tenant:acme", "tenant:acme", "tenant:a:admin", "tenant:b:admin", "tenant:b:admin", "tenant:c", "user"} {
		if r := c.acquire(key, proto.Named("api"), 1, 0); r.Status != proto.StatusOK {
			t.Fatalf("%s: %+v", key, r)
		}
	}
	got := statsOf(t, c.do(proto.AppendStats).Stats)
	if got["overrides"] != 3 || got["override_decisions"] != 8 {
		t.Errorf("STATS overrides %d, override_decisions %d, want 3 and 8", got["overrides"], got["override_decisions"])
	}
	scrape := func() string {
		rw := httptest.NewRecorder()
		rec.Handler().ServeHTTP(rw, httptest.NewRequest("GET", "/metrics", nil))
		promtoolCheck(t, rw.Body.Bytes())
		return rw.Body.String()
	}
	body := scrape()
	for _, want := range []string{
		`sluice_overrides{limit="api"} 3`,
		`sluice_override_decisions_total{limit="api",outcome="allowed",override="tenant:acme"} 3`,
		`sluice_override_decisions_total{limit="api",outcome="denied",override="tenant:acme"} 1`,
		`sluice_override_decisions_total{limit="api",outcome="allowed",override="tenant:*:admin"} 3`,
		`sluice_override_decisions_total{limit="api",outcome="allowed",override="tenant:*"} 1`,
		`sluice_decisions_total{algorithm="gcra",limit="api",outcome="allowed"} 8`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(body, `override="tenant:a:admin"`) || strings.Contains(body, `override="user"`) {
		t.Error("a request's key is a label")
	}
	if err := os.WriteFile(w.Path, []byte(strings.Replace(text, `      "tenant:*": "gcra:burst=0,count=1,period=1h"`+"\n", "", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := w.Reload(t.Context()); err != nil {
		t.Fatal(err)
	}
	if r := c.acquire("tenant:acme", proto.Named("api"), 1, 0); r.Status != proto.StatusOK {
		t.Fatal(r)
	}
	body = scrape()
	for _, want := range []string{
		`sluice_overrides{limit="api"} 2`,
		`sluice_override_decisions_total{limit="api",outcome="denied",override="tenant:acme"} 2`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("after the reload, metrics lack %s", want)
		}
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
		err := w.Reload(t.Context())
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

// A file rewritten in place is seen between its writes: here a valid
// prefix without "api", applied by the watcher, then the rest. Requests on
// api meanwhile never fail (the watcher keeps api in force, and counts
// it); a reload on demand (SIGHUP) of the prefix alone removes api.
func TestNamed_rewriteInPlaceKeepsLimitsInUse(t *testing.T) {
	prefix := "limits:\n  login: \"token_bucket:max=3,refill_time=1h,refill_amount=1\"\n"
	whole := prefix + "  api: \"gcra:burst=1000000,count=1,period=1s\"\n"
	sc, w, rec := startNamed(t, whole)
	w.Interval = 5 * time.Millisecond
	w.OnReload = func(r config.Result, _ error) {
		rec.ConfigReload(r == config.Reloaded)
		rec.ConfigKept(len(w.Holder.Load().Kept()))
	}
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	defer func() { cancel(); <-ran }()

	var requests, failures atomic.Int64
	var firstFailure atomic.Value
	done := make(chan struct{})
	var traffic sync.WaitGroup
	c := dial(t, sc)
	traffic.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			if r := c.acquire(fmt.Sprintf("k%d", i%50), proto.Named("api"), 1, 0); r.Status != proto.StatusOK {
				failures.Add(1)
				firstFailure.CompareAndSwap(nil, string(r.Message))
			}
			requests.Add(1)
		}
	})
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	reloads := w.Count(config.Reloaded)
	f, err := os.OpenFile(w.Path, os.O_WRONLY|os.O_TRUNC, 0) // in place, as cat > file does
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(prefix); err != nil {
		t.Fatal(err)
	}
	waitFor("the prefix to be loaded", func() bool { return w.Count(config.Reloaded) > reloads })
	if kept := w.Holder.Load().Kept(); !slices.Equal(kept, []string{"api"}) {
		t.Errorf("kept %v after the prefix, want [api]", kept)
	}
	n := requests.Load()
	waitFor("requests under the prefix", func() bool { return requests.Load() > n+100 })
	reloads = w.Count(config.Reloaded)
	if _, err := f.WriteString(whole[len(prefix):]); err != nil {
		t.Fatal(err)
	}
	f.Close()
	waitFor("the whole file to be loaded", func() bool { return w.Count(config.Reloaded) > reloads })
	close(done)
	traffic.Wait()
	if failures.Load() != 0 {
		t.Fatalf("%d of %d requests on api failed while the file was rewritten in place (first: %v)",
			failures.Load(), requests.Load(), firstFailure.Load())
	}
	if kept := w.Holder.Load().Kept(); len(kept) != 0 {
		t.Fatalf("kept %v once the file defines api again", kept)
	}

	// Removing a limit on purpose: the file without it, then SIGHUP.
	if err := os.WriteFile(w.Path, []byte(prefix), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor("the prefix to be loaded again", func() bool { return len(w.Holder.Load().Kept()) == 1 })
	rw := httptest.NewRecorder()
	rec.Handler().ServeHTTP(rw, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(rw.Body.String(), "\nsluice_config_kept_limits 1\n") {
		t.Errorf("the metrics do not count the kept limit:\n%s", rw.Body.String())
	}
	if err := w.Reload(t.Context()); err != nil {
		t.Fatal(err)
	}
	if r := c.acquire("k0", proto.Named("api"), 1, 0); r.Status != proto.StatusInvalidLimit || !strings.Contains(string(r.Message), "no limit of that name") {
		t.Fatalf("api after a reload on demand without it: %+v", r)
	}
	t.Logf("%d requests on api while the file was rewritten in place", requests.Load())
}
