package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

const conc1 = "concurrency:limit=1,lease=1h"

// syncBuffer is a buffer that one goroutine writes and another reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// background runs a command line of sluice in a goroutine; wait returns
// its exit status and output.
type background struct {
	stdout, stderr syncBuffer
	done           chan int
}

func runBackground(sock string, args ...string) *background {
	b := &background{done: make(chan int, 1)}
	go func() { b.done <- run(args, sidecarEnv(sock), &b.stdout, &b.stderr) }()
	return b
}

func (b *background) wait(t *testing.T) (code int, stdout, stderr string) {
	t.Helper()
	select {
	case code = <-b.done:
	case <-time.After(20 * time.Second):
		t.Fatal("sluice did not finish")
	}
	return code, b.stdout.String(), b.stderr.String()
}

// until polls f until it returns true, for up to 10 s.
func until(t *testing.T, what string, f func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !f(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: %s", what)
		}
	}
}

// held reports how many slots of key's bucket under conc1 are held.
func held(t *testing.T, sock, key string) int {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run([]string{"peek", key, conc1}, sidecarEnv(sock), &stdout, &stderr); code > 1 {
		t.Fatalf("peek: %s", stderr.String())
	}
	if strings.Contains(stdout.String(), "remaining=0 ") {
		return 1
	}
	return 0
}

// lease --hold prints the lease and holds it; release gives it back from
// another process; --wait waits for a slot.
func TestLease_hold(t *testing.T) {
	sock := startSidecar(t, 64)
	runSteps(t, sock, []step{
		{"lease jobs " + conc1 + " --hold 1ms", 0, "allowed lease=ID remaining=0 limit=1 reset_after=1h0m0s\n", ""},
		{"peek jobs " + conc1, 0, "allowed remaining=1 limit=1 reset_after=0s\n", ""}, // given back
		{"lease --json jobs " + conc1 + " --hold 1ms", 0,
			`{"allowed":true,"remaining":0,"limit":1,"retry_after_ns":-1,"reset_after_ns":3600000000000,"delay_ns":0,"lease":ID}` + "\n", ""},
	})

	holder := runBackground(sock, "lease", "jobs", conc1, "--hold", "500ms")
	until(t, "the holder printed its lease", func() bool { return holder.stdout.String() != "" })
	id := strings.TrimPrefix(strings.Fields(holder.stdout.String())[1], "lease=")
	runSteps(t, sock, []step{
		{"lease jobs " + conc1 + " --hold 1ms", 1, "denied remaining=0 limit=1 retry_after=1h0m0s reset_after=1h0m0s\n", ""},
		{"lease --json jobs " + conc1, 1,
			`{"allowed":false,"remaining":0,"limit":1,"retry_after_ns":3600000000000,"reset_after_ns":3600000000000,"delay_ns":0,"lease":0}` + "\n", ""},
		{"lease jobs " + conc1 + " -- true", 1, "", "sluice: lease: denied remaining=0 limit=1 retry_after=1h0m0s reset_after=1h0m0s; not running true"},
		{"release jobs " + conc1 + " " + id, 0, "released remaining=1 limit=1 reset_after=0s\n", ""},
		{"release --json jobs " + conc1 + " " + id, 1,
			`{"released":false,"allowed":true,"remaining":1,"limit":1,"retry_after_ns":-1,"reset_after_ns":0,"delay_ns":0}` + "\n", ""},
		{"release other " + conc1 + " " + id, 1, "not_held remaining=1 limit=1 reset_after=0s\n", ""},
	})
	// The holder's lease was released under it: it says so when its hold
	// ends.
	if code, _, stderr := holder.wait(t); code != 0 || !strings.HasPrefix(stderr, "sluice: lease: the lease was no longer held when the hold ended") {
		t.Errorf("holder: exit %d, stderr %q", code, stderr)
	}

	// --wait: a slot held for a while comes back, and is taken.
	holder = runBackground(sock, "lease", "waited", conc1, "--hold", "300ms")
	until(t, "the holder printed its lease", func() bool { return holder.stdout.String() != "" })
	began := time.Now()
	var stdout, stderr bytes.Buffer
	code := run([]string{"lease", "waited", conc1, "--wait", "10s", "--hold", "1ms"}, sidecarEnv(sock), &stdout, &stderr)
	if waited := time.Since(began); code != 0 || !strings.HasPrefix(stdout.String(), "allowed lease=") || waited < 150*time.Millisecond {
		t.Errorf("lease --wait: exit %d after %v, %q %q", code, waited, stdout.String(), stderr.String())
	}
	if code, _, stderr := holder.wait(t); code != 0 || stderr != "" {
		t.Errorf("holder: exit %d, stderr %q", code, stderr)
	}
	runSteps(t, sock, []step{ // a --wait that runs out is a denial
		{"lease waited " + conc1 + " --wait 1ms --hold 1ms", 0, "allowed...", ""},
	})
}

// lease -- COMMAND runs the command holding the slot, and exits with its
// status.
func TestLease_command(t *testing.T) {
	sock := startSidecar(t, 64)
	gate := filepath.Join(t.TempDir(), "gate")
	// The command waits for the gate, then exits 3.
	cmd := runBackground(sock, "lease", "cmd", conc1, "--", "sh", "-c", `while [ ! -e "$1" ]; do sleep 0.01; done; echo ran; exit 3`, "sh", gate)
	until(t, "the command holds the slot", func() bool { return held(t, sock, "cmd") == 1 })
	runSteps(t, sock, []step{
		{"lease cmd " + conc1 + " -- true", 1, "", "sluice: lease: denied remaining=0 limit=1 retry_after=1h0m0s reset_after=1h0m0s; not running true"},
	})
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, stdout, stderr := cmd.wait(t); code != 3 || stdout != "ran\n" || stderr != "" {
		t.Errorf("lease -- COMMAND: exit %d, stdout %q, stderr %q; want 3, the command's output", code, stdout, stderr)
	}
	if n := held(t, sock, "cmd"); n != 0 {
		t.Errorf("%d slots held after the command ended", n)
	}
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"lease", "cmd", conc1, "--", "true"}, 0, ""},
		{[]string{"lease", "cmd", conc1, "--", "sh", "-c", "kill -TERM $$"}, 128 + 15, ""},
		// A key that looks like a flag follows a -- of its own.
		{[]string{"lease", "--wait", "1s", "--", "-k", conc1, "--", "sh", "-c", "exit 4"}, 4, ""},
		{[]string{"lease", "cmd", conc1, "--", "/nonexistent/command"}, 2, "sluice: lease: fork/exec /nonexistent/command: no such file or directory"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(tc.args, sidecarEnv(sock), &stdout, &stderr)
		if code != tc.code || !strings.HasPrefix(stderr.String(), tc.stderr) || (tc.stderr == "" && stderr.Len() > 0) {
			t.Errorf("sluice %q: exit %d, stderr %q; want %d, %q", tc.args, code, stderr.String(), tc.code, tc.stderr)
		}
		if n := held(t, sock, "cmd"); n != 0 {
			t.Errorf("sluice %q: %d slots held after it ended", tc.args, n)
		}
	}
}

func TestLease_usage(t *testing.T) {
	sock := startSidecar(t, 64)
	state := filepath.Join(filepath.Dir(sock), "state")
	runSteps(t, sock, []step{
		{"lease --help", 0, "usage: sluice lease KEY LIMIT [--wait D] [-- COMMAND [ARGS...] | --hold D] [--json]\n...", ""},
		{"release --help", 0, "usage: sluice release KEY LIMIT ID [--json]\n...", ""},
		{"lease jobs", 2, "", "sluice: lease: want KEY LIMIT"},
		{"lease jobs " + conc1 + " true", 2, "", "sluice: lease: want KEY LIMIT"},
		{"lease jobs " + conc1 + " --", 2, "", "sluice: lease: no COMMAND after --"},
		{"lease jobs " + conc1 + " --hold 1s -- true", 2, "", "sluice: lease: --hold is for a lease without a COMMAND"},
		{"lease jobs " + conc1 + " --json -- true", 2, "", "sluice: lease: --json is for a lease without a COMMAND"},
		{"lease jobs " + conc1 + " --wait -1s", 2, "", "sluice: lease: --hold and --wait want a duration >= 0"},
		{"lease jobs " + tb10 + " --hold 1ms", 2, "", "sluice: lease: invalid limit: only concurrency limits take leases"},
		{"lease jobs concurrency:limit=1 --hold 1ms", 2, "", `sluice: lease: invalid limit: limit "concurrency:limit=1": missing parameter "lease"`},
		{"--direct --state " + state + " lease jobs " + conc1, 2, "", "sluice: lease: a lease is held through the sidecar's socket"},
		{"release jobs " + conc1, 2, "", "sluice: release: want KEY LIMIT ID"},
		{"release jobs " + conc1 + " 0", 2, "", `sluice: release: ID "0": want the lease id that lease printed`},
		{"release jobs " + conc1 + " x", 2, "", `sluice: release: ID "x": want the lease id that lease printed`},
		{"release jobs " + tb10 + " 7", 2, "", "sluice: release: invalid limit: only concurrency limits take leases"},
		{"--direct --state " + state + " release jobs " + conc1 + " 7", 2, "", "sluice: release: --direct decides in the state file, which only acquire, peek, refund and reset do (drop --direct)"},
		{"acquire jobs " + conc1, 2, "", "sluice: acquire: invalid limit: concurrency limits take LEASE and RELEASE"},
	})
}
