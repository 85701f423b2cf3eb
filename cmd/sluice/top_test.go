package main

import (
	"io"
	"net/http/httptest"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/server"
	"testing"
	"time"
)

// Ensure the view's rates are the counters' differences over the interval.
func TestTop_render(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	prev := snapshot{at: t0, stats: map[string]uint64{"allowed": 100, "denied": 10, "ops": 120, "slot_count": 1000, "used_slots": 10}}
	cur := snapshot{at: t0.Add(2 * time.Second), rtt: 150 * time.Microsecond, stats: map[string]uint64{
		"allowed": 1100, "denied": 1010, "ops": 2200, "frames": 400, "slot_count": 1000, "slot_size": 128, "used_slots": 250,
		"connections": 7, "inserts": 240, "table_full": 3, "syncs": 2}}
	var b strings.Builder
	render(&b, "/run/sluice/sluice.sock", prev, cur)
	out := b.String()
	for _, want := range []string{
		"sluice top  /run/sluice/sluice.sock  03:04:07  (every 2s; ctrl-c quits)\n",
		"decisions/s        1000   allowed/s        500   denied/s        500   (50.0% denied)\n",
		"requests/s         1040   frames/s         200   errors/s          0",
		"connections           7",
		"table             1,000 slots of 128 bytes   load 0.250 (250 used)\n",
		"table full 3 (+2/s)",
		"latency      ping round trip 150µs\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
}

// Ensure top --once samples a running sidecar twice and prints one view.
func TestTop_once(t *testing.T) {
	sock := startSidecar(t, 64)
	runSteps(t, sock, []step{
		{"acquire a " + tb10, 0, "...", ""},
		{"acquire b " + tb10, 0, "...", ""},
	})
	var stdout, stderr strings.Builder
	code := run([]string{"top", "--once", "--interval", "20ms"}, sidecarEnv(sock), &stdout, &stderr)
	out := stdout.String()
	if code != exitOK || stderr.Len() > 0 || strings.Contains(out, "\x1b[") {
		t.Fatalf("top: exit %d, stderr %q, stdout %q", code, stderr.String(), out)
	}
	for _, want := range []string{"decisions/s ", "table             1,024 slots of 64 bytes   load 0.002 (2 used)", "latency      ping round trip "} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	runSteps(t, sock, []step{{"top --interval 1ms", 2, "", "sluice: top: --interval 1ms: want at least 10ms"}})
}

// Ensure top shows the overrides in force and, with --metrics, each named
// limit's overrides and the busiest that decided in the interval.
func TestTop_overrides(t *testing.T) {
	set, err := config.Parse("sluice.yaml", []byte(`limits:
  api:
    limit: "gcra:burst=0,count=1,period=1h"
    overrides:
      "tenant:acme": "gcra:burst=100,count=1,period=1h"
      "tenant:*": "gcra:burst=100,count=1,period=1h"
  plain:
    limit: "gcra:burst=0,count=1,period=1h"
`))
	if err != nil {
		t.Fatal(err)
	}
	rec := metrics.New()
	ms := httptest.NewServer(rec.Handler())
	defer ms.Close()
	sock := startSidecarWith(t, 64, config.NewHolder(set), func(c *server.Config) { c.Metrics = rec })
	// Decisions keep coming while top samples, so that its one interval
	// sees some whatever the machine's load.
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			run([]string{"acquire", "tenant:acme", "api"}, sidecarEnv(sock), io.Discard, io.Discard)
			if i%2 == 0 {
				run([]string{"acquire", "tenant:x" + strconv.Itoa(i), "api"}, sidecarEnv(sock), io.Discard, io.Discard)
			}
		}
	}()
	var stdout, stderr strings.Builder
	code := run([]string{"top", "--once", "--interval", "200ms", "--metrics", strings.TrimPrefix(ms.URL, "http://")}, sidecarEnv(sock), &stdout, &stderr)
	close(done)
	<-stopped
	out := stdout.String()
	if code != exitOK || stderr.Len() > 0 {
		t.Fatalf("top: exit %d, stderr %q, stdout %q", code, stderr.String(), out)
	}
	for _, want := range []string{"overrides             2 in force   decided/s ", "  api          2 overrides, deciding/s: \"tenant:acme\" ", `"tenant:*" `} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "plain") || strings.Contains(out, "tenant:x") {
		t.Errorf("a limit without overrides, or a request's key, in\n%s", out)
	}
	runSteps(t, sock, []step{{"top --once --interval 10ms --metrics unix:/nonexistent/metrics.sock", 2, "", "sluice: top: the metrics (--metrics) did not answer: dial unix /nonexistent/metrics.sock: connect: no such file or directory"}})
}
