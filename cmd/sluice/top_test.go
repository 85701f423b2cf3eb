package main

import (
	"strings"
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
