package metrics

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/sockfile"
)

// serve serves r's metrics on addr until the test ends and returns an
// HTTP client and the URL of the metrics.
func serve(t *testing.T, r *Recorder, addr string) (*http.Client, string) {
	t.Helper()
	ln, err := Listen(addr, 0o660)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		}}
		return &http.Client{Transport: tr}, "http://sluiced/metrics"
	}
	return http.DefaultClient, "http://" + ln.Addr().String() + "/metrics"
}

// scrape GETs the metrics and returns the body.
func scrape(t *testing.T, c *http.Client, url string) string {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Fatalf("content type %q", ct)
	}
	return string(b)
}

// parse parses the text exposition format.
func parse(t *testing.T, body string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("the exposition does not parse: %v", err)
	}
	return fams
}

// value returns the value of the series of family name whose labels are
// exactly labels (name=value pairs), or fails.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	f := fams[name]
	if f == nil {
		t.Fatalf("no metric %s", name)
	}
next:
	for _, m := range f.Metric {
		if len(m.Label) != len(labels)/2 {
			continue
		}
		for i, l := range m.Label { // client_golang sorts labels by name
			if l.GetName() != labels[2*i] || l.GetValue() != labels[2*i+1] {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return 0
}

// promtool runs "promtool check metrics" on body; promtool is required (CI
// installs Debian's prometheus package).
func promtool(t *testing.T, body string) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is not installed (apt-get install prometheus): the exposition cannot be checked")
	}
	cmd := exec.Command(path, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

// Ensure the exported counters are exactly what was fed: N allows, M
// denials, K table-full, shadow denials, latencies, probes, syncs,
// connections and reloads; and that promtool accepts the exposition.
func TestMetrics_countersMatch(t *testing.T) {
	r := New()
	const n, m, k = 37, 11, 3
	login := r.Limit("login")
	for range n {
		login.Decision(bucket.TokenBucket, Allowed)
		r.DecisionDuration(bucket.TokenBucket, 800*time.Nanosecond)
	}
	for range m {
		r.Decision("login", bucket.TokenBucket, Denied, 3*time.Microsecond)
	}
	for range k {
		r.Decision(SpecLimit, bucket.GCRA, TableFull, time.Microsecond)
	}
	r.Decision("signup", bucket.SlidingWindow, Denied, time.Microsecond)
	r.Limit("signup").ShadowDenied()
	for i := range 5 {
		r.Request(Native, time.Duration(i+1)*time.Microsecond)
		r.Probe(i)
	}
	r.Request(RESP, time.Millisecond)
	r.ProtocolError(RESP)
	r.Sync(2*time.Millisecond, nil)
	r.Sync(time.Second, errors.New("disk gone"))
	r.ConnOpened()
	r.ConnOpened()
	r.ConnClosed()
	r.PeerDenied()
	r.ConfigReload(true)
	r.ConfigReload(false)
	r.ConfigReload(false)
	r.ConfigKept(2)
	r.SetTable(func() TableStats {
		return TableStats{Slots: 1024, UsedSlots: 60, LiveBuckets: 42, TableFull: k, Reclaimed: 7, Torn: 1}
	})

	c, url := serve(t, r, "127.0.0.1:0")
	body := scrape(t, c, url)
	promtool(t, body)
	f := parse(t, body)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"sluice_decisions_total", []string{"algorithm", "token_bucket", "limit", "login", "outcome", "allowed"}, n},
		{"sluice_decisions_total", []string{"algorithm", "token_bucket", "limit", "login", "outcome", "denied"}, m},
		{"sluice_decisions_total", []string{"algorithm", "token_bucket", "limit", "login", "outcome", "table_full"}, 0},
		{"sluice_decisions_total", []string{"algorithm", "gcra", "limit", "spec", "outcome", "table_full"}, k},
		{"sluice_decisions_total", []string{"algorithm", "gcra", "limit", "spec", "outcome", "allowed"}, 0},
		{"sluice_decisions_total", []string{"algorithm", "sliding_window", "limit", "signup", "outcome", "denied"}, 1},
		{"sluice_shadow_denied_total", []string{"limit", "signup"}, 1},
		{"sluice_shadow_denied_total", []string{"limit", "login"}, 0},
		{"sluice_decision_duration_seconds", []string{"algorithm", "token_bucket"}, n + m},
		{"sluice_decision_duration_seconds", []string{"algorithm", "gcra"}, k},
		{"sluice_request_duration_seconds", []string{"protocol", "native"}, 5},
		{"sluice_request_duration_seconds", []string{"protocol", "resp"}, 1},
		{"sluice_protocol_errors_total", []string{"protocol", "resp"}, 1},
		{"sluice_protocol_errors_total", []string{"protocol", "native"}, 0},
		{"sluice_probe_length", nil, 5},
		{"sluice_sync_duration_seconds", nil, 2},
		{"sluice_sync_errors_total", nil, 1},
		{"sluice_connections", nil, 1},
		{"sluice_peers_denied_total", nil, 1},
		{"sluice_config_reloads_total", []string{"result", "ok"}, 1},
		{"sluice_config_reloads_total", []string{"result", "error"}, 2},
		{"sluice_config_kept_limits", nil, 2},
		{"sluice_table_slots", nil, 1024},
		{"sluice_table_used_slots", nil, 60},
		{"sluice_table_live_buckets", nil, 42},
		{"sluice_table_full_total", nil, k},
		{"sluice_reclaimed_slots_total", nil, 7},
		{"sluice_torn_slots_total", nil, 1},
	} {
		if got := value(t, f, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// Histogram buckets: 800 ns falls in le=1e-06, 3 µs in le=5e-06.
	h := f["sluice_decision_duration_seconds"].Metric
	for _, s := range h {
		if s.Label[0].GetValue() != "token_bucket" {
			continue
		}
		got := map[float64]uint64{}
		for _, b := range s.Histogram.Bucket {
			got[b.GetUpperBound()] = b.GetCumulativeCount()
		}
		if got[5e-7] != 0 || got[1e-6] != n || got[2.5e-6] != n || got[5e-6] != n+m {
			t.Errorf("token_bucket latency buckets %v", got)
		}
		if sum := s.Histogram.GetSampleSum(); sum < 6.2e-5 || sum > 6.3e-5 { // 37*0.8µs + 11*3µs = 62.6µs
			t.Errorf("token_bucket latency sum %v", sum)
		}
	}
	if !strings.Contains(body, "\ngo_goroutines ") || !strings.Contains(body, "\nprocess_open_fds ") {
		t.Error("the Go runtime and process metrics are missing")
	}
}

// Ensure the metrics are served on a Unix socket, and that the table
// metrics are absent until the table is known.
func TestMetrics_unixSocket(t *testing.T) {
	r := New()
	r.Decision(SpecLimit, bucket.Pacer, Allowed, time.Microsecond)
	c, url := serve(t, r, "unix:"+filepath.Join(t.TempDir(), "metrics.sock"))
	body := scrape(t, c, url)
	promtool(t, body)
	f := parse(t, body)
	if v := value(t, f, "sluice_decisions_total", "algorithm", "pacer", "limit", "spec", "outcome", "allowed"); v != 1 {
		t.Errorf("decisions = %v", v)
	}
	if f["sluice_table_slots"] != nil {
		t.Error("table metrics exported before the table is known")
	}
}

// Ensure the metrics socket follows the rules of sluiced's other sockets:
// its mode is the one asked for whatever the umask (under umask 000 it was
// 0777, open to every local user), a second listener on a live socket is
// refused and leaves it alone, a stale socket is replaced, anything else at
// the path is left alone, and the file goes when the server stops.
func TestListen_unixSocketRules(t *testing.T) {
	dir := t.TempDir() // 0700, made before the umask changes
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	path := filepath.Join(dir, "metrics.sock")
	for _, perm := range []fs.FileMode{0o660, 0o600} {
		ln, err := Listen("unix:"+path, perm)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(path)
		if err != nil || fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != perm {
			t.Errorf("under umask 000, asked for %v: %v %v", perm, fi.Mode(), err)
		}
		if _, err := Listen("unix:"+path, perm); !errors.Is(err, sockfile.ErrInUse) {
			t.Errorf("a second listener on a live socket: %v", err)
		}
		if _, err := os.Stat(path); err != nil {
			t.Errorf("the live socket was removed: %v", err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- New().Serve(ctx, ln) }()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the socket file is still there after Serve returned: %v", err)
		}
	}

	stale, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close() // as a crashed sidecar leaves it
	ln, err := Listen("unix:"+path, 0o660)
	if err != nil {
		t.Fatalf("on a stale socket: %v", err)
	}
	ln.Close()

	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("keep"), 0o600)
	if _, err := Listen("unix:"+file, 0o660); !errors.Is(err, sockfile.ErrPath) {
		t.Errorf("a regular file at the path: %v", err)
	}
	if b, _ := os.ReadFile(file); string(b) != "keep" {
		t.Error("the regular file at the path was touched")
	}
}

func TestListen_refusesRemote(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:9090", ":9090", "10.1.2.3:9090", "example.com:9090", "9090", "unix:"} {
		ln, err := Listen(addr, 0o660)
		if err == nil {
			ln.Close()
			t.Errorf("Listen(%q) succeeded", addr)
			continue
		}
		if !errors.Is(err, ErrAddress) {
			t.Errorf("Listen(%q): %v does not wrap ErrAddress", addr, err)
		}
	}
}

// Ensure a limit label per name, not per call: more than MaxLimits names
// fold into "other".
func TestRecorder_boundedLimits(t *testing.T) {
	r := New()
	r.maxLimits = 30
	for i := range 40 {
		r.Limit("l" + strconv.Itoa(i))
	}
	if n := len(r.limits.load()); n != 31 {
		t.Fatalf("%d limit labels, want 31", n)
	}
	if r.Limit("new") != r.Limit(OtherLimit) {
		t.Fatal("a name beyond MaxLimits is not counted as other")
	}
}

// Ensure an override label per pattern: more than MaxOverrides patterns of
// one limit fold into "other", and a pattern keeps its counters.
func TestRecorder_boundedOverrides(t *testing.T) {
	l := New().Limit("api")
	for i := range MaxOverrides + 10 {
		l.Override("tenant:" + strconv.Itoa(i) + "*")
	}
	if n := len(l.over.m.load()); n != MaxOverrides+1 {
		t.Fatalf("%d override labels, want %d", n, MaxOverrides+1)
	}
	if l.Override("tenant:new*") != l.Override(OtherOverride) || l.Override("tenant:0*") == l.Override(OtherOverride) {
		t.Fatal("a pattern beyond MaxOverrides is not counted as other, or one before is")
	}
}

// Ensure the decision path allocates nothing.
func TestRecorder_allocs(t *testing.T) {
	r := New()
	l := r.Limit("login")
	r.Limit(SpecLimit)
	if n := testing.AllocsPerRun(1000, func() {
		l.Decision(bucket.TokenBucket, Allowed)
		r.Decision(SpecLimit, bucket.GCRA, Denied, time.Microsecond)
		r.DecisionDuration(bucket.TokenBucket, time.Microsecond)
		r.Request(Native, 2*time.Microsecond)
		r.Probe(3)
	}); n != 0 {
		t.Fatalf("%v allocations per decision", n)
	}
}

// Ensure the counter table names each counter once per report, and that
// every INFO row has a section.
func TestCounters_table(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range Counters {
		names := []string{"name " + c.Name}
		if c.In&InInfo != 0 {
			names = append(names, "info "+c.Section+"."+c.InfoName())
		}
		for _, name := range names {
			if seen[name] {
				t.Errorf("%s twice", name)
			}
			seen[name] = true
		}
		if c.In&InInfo != 0 && c.Section == "" {
			t.Errorf("%s: in INFO without a section", c.Name)
		}
		if c.In == 0 || c.value == nil {
			t.Errorf("%s: in no report, or reads nothing", c.Name)
		}
	}
}
