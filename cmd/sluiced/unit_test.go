package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clients/go/sluice"
	"github.com/sluicehq/sluice/internal/config"
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

// Ensure the unit's command line and environment start sluiced with the
// example config as the unit installs it: every flag and SLUICE_ variable
// it sets exists and is valid (with the directories systemd would make, a
// small table and an ephemeral metrics port), sluiced tells systemd it is
// ready, and every limit of the example decides (a global limit in it,
// without the Redis the unit does not give, made sluiced refuse it).
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
	example := filepath.Join("..", "..", "deploy", "sluice.example.yaml")
	env["SLUICE_CONFIG"] = example
	env["SLUICE_METRICS"] = "127.0.0.1:0"
	env["SLUICE_SLOTS"] = "1024"
	notify := filepath.Join(dir, "notify")
	nc, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notify, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	env["NOTIFY_SOCKET"] = notify

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, args, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, io.Discard, &stderr)
	}()
	ready := make(chan string, 1)
	go func() {
		buf := make([]byte, 4096)
		n, _ := nc.Read(buf)
		ready <- string(buf[:n])
	}()
	select {
	case code := <-done:
		t.Fatalf("sluiced %v exited %d before it was ready:\n%s", args, code, stderr.String())
	case got := <-ready:
		if !strings.HasPrefix(got, "READY=1") {
			t.Fatalf("first notification %q", got)
		}
	}
	limits, err := config.Load(example)
	if err != nil {
		t.Fatal(err)
	}
	c, err := sluice.Dial(filepath.Join(dir, "sluice.sock"), sluice.WithFailurePolicy(sluice.FailError), sluice.WithTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, name := range limits.Names() {
		l, err := sluice.ParseLimit(name)
		if err != nil {
			t.Fatal(err)
		}
		if d, err := c.Acquire(context.Background(), l, "unit-test", 1); err != nil || !d.Allowed {
			t.Errorf("acquire under %s: %+v, %v", name, d, err)
		}
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("sluiced %v: exit %d\n%s", args, code, stderr.String())
	}
}
