package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// unitPath is the systemd unit shipped in deploy/.
var unitPath = filepath.Join("..", "..", "deploy", "sluiced.service")

// Ensure systemd-analyze verify accepts the unit, with ExecStart pointing at
// a sluiced built from this tree, and says nothing: a warning (a
// misspelt directive, a bad value systemd would ignore) fails the test.
func TestUnit_verify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze is not installed (apt-get install systemd): the unit file cannot be checked")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "sluiced")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	unit, err := os.ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(unit), "ExecStart=/usr/bin/sluiced ") {
		t.Fatal("the unit's ExecStart does not start /usr/bin/sluiced")
	}
	copyPath := filepath.Join(dir, "sluiced.service")
	os.WriteFile(copyPath, []byte(strings.ReplaceAll(string(unit), "/usr/bin/sluiced", bin)), 0o644)
	out, err := exec.Command(analyze, "verify", "--man=no", copyPath).CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// Ensure the unit's command line and environment start sluiced: every flag
// and SLUICE_ variable it sets exists and is valid (with the directories
// systemd would make, the example config and an ephemeral metrics port).
func TestUnit_commandLine(t *testing.T) {
	f, err := os.Open(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cmdline string
	env := map[string]string{}
	cont := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "ExecStart=") || cont {
			cont = strings.HasSuffix(line, "\\")
			cmdline += " " + strings.TrimSuffix(strings.TrimPrefix(line, "ExecStart="), "\\")
		}
		if kv, ok := strings.CutPrefix(line, "Environment="); ok {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
	}
	dir := shortDir(t)
	cmdline = strings.NewReplacer("${STATE_DIRECTORY}", dir, "${RUNTIME_DIRECTORY}", dir).Replace(cmdline)
	args := strings.Fields(cmdline)[1:] // without the program
	if env["SLUICE_CONFIG"] != "/etc/sluice/sluice.yaml" || env["SLUICE_METRICS"] == "" {
		t.Fatalf("the unit's environment is %v", env)
	}
	env["SLUICE_CONFIG"] = filepath.Join("..", "..", "deploy", "sluice.example.yaml")
	env["SLUICE_METRICS"] = "127.0.0.1:0"
	env["SLUICE_SLOTS"] = "1024"
	code, stderr := runFor(t, 500*time.Millisecond, args, env)
	if code != exitOK {
		t.Fatalf("sluiced %v: exit %d\n%s", args, code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "sluice.state")); err != nil {
		t.Fatalf("no state file: %v", err)
	}
}
