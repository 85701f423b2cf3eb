package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/shm"

	"github.com/sluicehq/sluice/vocab"
)

// crashEnv names the state file a re-executed test binary fills and then
// abandons without closing, as a crashed sidecar does.
const crashEnv = "SLUICE_TEST_CRASH_STATE"

func TestMain(m *testing.M) {
	if path := os.Getenv(crashEnv); path != "" {
		tb, err := shm.Create(path, shm.Options{SlotCount: 1024}, 0)
		if err == nil {
			fill(tb, 40)
			err = tb.Sync()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		os.Exit(0) // no Close: the file stays dirty, its owner gone
	}
	os.Exit(m.Run())
}

// fill puts n buckets in tb: token_bucket (kind 1) and gcra (kind 2)
// alternately.
func fill(tb *shm.Table, n int) {
	for i := range n {
		key := []byte(fmt.Sprint("user:", i))
		kind := vocab.Algorithm(1 + i%2)
		s, _, err := tb.LookupOrInsert(tb.Fingerprint(key, uint64(kind)), kind, key, 0, nil)
		if err != nil {
			panic(err)
		}
		*s.State() = [shm.StateWords]int64{int64(i), 0, 0}
		s.Commit(1 << 62)
	}
}

// cleanFile creates a closed state file of 1024 slots holding 40 buckets.
func cleanFile(t *testing.T) string {
	t.Helper()
	return stateFile(t, 1024, 40)
}

// stateFile returns a state file of slots slots holding buckets buckets,
// closed cleanly.
func stateFile(t *testing.T, slots uint64, buckets int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "clean.state")
	tb, err := shm.Create(path, shm.Options{SlotCount: slots}, 0)
	if err != nil {
		t.Fatal(err)
	}
	fill(tb, buckets)
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// dirtyFile has a child process create a file of 40 buckets and exit
// without closing it.
func dirtyFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "dirty.state")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashEnv+"="+path)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("crashing child: %v\n%s", err, out)
	}
	return path
}

// tear flips a byte of the state words of the first used slot of the file
// at path, as a torn write would leave it, and returns the slot's index.
func tear(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const header, slot = 4096, 64 // shm/format.go
	for off := header; off < len(b); off += slot {
		if binary.LittleEndian.Uint64(b[off+0x08:]) != 0 { // fp0
			b[off+0x28+5] ^= 0x40 // a byte of the first state word
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			return (off - header) / slot
		}
	}
	t.Fatal("no used slot")
	return 0
}

func TestInspect_offline(t *testing.T) {
	clean, dirty := cleanFile(t), dirtyFile(t)
	none := filepath.Join(t.TempDir(), "none")
	runSteps(t, "", []step{
		{"inspect " + clean, 0, "state file     " + clean + "\nformat         version " + strconv.Itoa(shm.FormatVersion) + "\n...", ""},
		{"inspect " + dirty, 0, "...", ""},
		{"inspect " + none, 2, "", "sluice: inspect: " + none + ": no such file or directory"},
		{"inspect", 2, "", "sluice: inspect: want STATEFILE [--json]"},
	})
	for _, c := range []struct {
		path string
		want []string
	}{
		{clean, []string{"state          clean\n", "load           0.039 (40 of 1,024 slots used)\n",
			"live buckets   40 (0 back to new, reclaimable)\n", "token_bucket    20\n", "gcra            20\n",
			"geometry       1,024 slots of 64 bytes, probe cap 512, 220.0 KiB\n",
			"arena          1,024 cells of 64 bytes, 0 in blocks (0.0%), 0 blocks refused (arena full)\n", "counters       inserts 40,"}},
		{dirty, []string{"state          dirty: not closed cleanly, and no owner; the next open recovers it\n", "holders        1 of at most 1,024: pids "}},
	} {
		out := runOut(t, 0, "inspect", c.path)
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("inspect %s: no %q in\n%s", c.path, w, out)
			}
		}
	}
	out := runOut(t, 0, "inspect", "--json", clean)
	for _, w := range []string{`"state":"clean"`, `"live_by_algorithm":{"gcra":20,"token_bucket":20}`, `"used_slots":40`} {
		if !strings.Contains(out, w) {
			t.Errorf("inspect --json: no %s in %s", w, out)
		}
	}
}

func TestVerify_offline(t *testing.T) {
	clean, dirty := cleanFile(t), dirtyFile(t)
	before, _ := os.ReadFile(clean)
	runSteps(t, "", []step{
		{"verify " + clean, 0, clean + ": ok, 1,024 slots checked (clean)\n", ""},
		{"verify " + dirty, 0, dirty + ": ok, 1,024 slots checked (dirty: not closed cleanly, and no owner; the next open recovers it)\n", ""},
	})
	if after, _ := os.ReadFile(clean); string(after) != string(before) {
		t.Fatal("verify changed the file")
	}
	i := tear(t, dirty)
	out := runOut(t, 1, "verify", dirty)
	if want := fmt.Sprintf("  slot %d: checksum ", i); !strings.HasPrefix(out, dirty+": damaged (dirty") || !strings.Contains(out, want) ||
		!strings.Contains(out, "sluiced's next open repairs it") {
		t.Errorf("verify of a torn dirty file:\n%s", out)
	}
	i = tear(t, clean)
	out = runOut(t, 1, "verify", clean)
	if want := fmt.Sprintf("  slot %d: checksum ", i); !strings.HasPrefix(out, clean+": damaged (clean)") || !strings.Contains(out, want) ||
		!strings.Contains(out, "damage at rest") {
		t.Errorf("verify of a torn clean file:\n%s", out)
	}
	// Damage in the header: the file cannot even be read.
	b, _ := os.ReadFile(clean)
	b[0x18] ^= 1 // slot count, under the header checksum
	os.WriteFile(clean, b, 0o600)
	out = runOut(t, 1, "verify", clean)
	if !strings.Contains(out, "damaged\n  "+clean+": state file header checksum mismatch: stored ") {
		t.Errorf("verify of a damaged header:\n%s", out)
	}
	text := filepath.Join(t.TempDir(), "notes.txt")
	os.WriteFile(text, []byte("not a state file at all"), 0o600)
	if out := runOut(t, 1, "verify", text); !strings.Contains(out, "not a Sluice state file") {
		t.Errorf("verify of a text file:\n%s", out)
	}
}

// runOut runs the command line and returns its stdout, failing unless it
// exits with code.
func runOut(t *testing.T, code int, args ...string) string {
	t.Helper()
	var stdout, stderr strings.Builder
	if got := run(args, func(string) string { return "" }, &stdout, &stderr); got != code {
		t.Fatalf("sluice %v: exit %d, want %d\nstdout %s\nstderr %s", args, got, code, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// Ensure the README's inspect example is what inspect prints for its file
// (4,096 slots of 64 bytes): its format version, geometry and arena, which
// the code decides (the README showed format 4 and no arena after the
// format moved to 5).
func TestDocs_readmeInspect(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	path := stateFile(t, 4096, 30)
	var stdout bytes.Buffer
	if code := run([]string{"inspect", path}, func(string) string { return "" }, &stdout, io.Discard); code != exitOK {
		t.Fatalf("inspect: exit %d", code)
	}
	for _, line := range strings.Split(stdout.String(), "\n") {
		for _, field := range []string{"format ", "geometry ", "arena ", "load ", "live buckets "} {
			if strings.HasPrefix(line, field) && !strings.Contains(string(readme), "\n"+line+"\n") {
				t.Errorf("the README's inspect example lacks the line %q", line)
			}
		}
	}
}
