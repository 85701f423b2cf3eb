package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clients/go/sluice"
)

// Tests of the sluiced binary itself, for what only a process shows: its
// signals, and that it exits.

var (
	buildOnce sync.Once
	builtPath string
	buildErr  error
	buildDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// binary returns the path of a sluiced built from this tree, once per run.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if buildDir, buildErr = os.MkdirTemp("", "sluiced-bin"); buildErr != nil {
			return
		}
		builtPath = filepath.Join(buildDir, "sluiced")
		if out, err := exec.Command("go", "build", "-o", builtPath, ".").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtPath
}

// process is a running sluiced and the lines of its stderr.
type process struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	lines  []string
	exited chan struct{}
	err    error // the exit's, once exited is closed
}

// startBinary runs sluiced with args; the test kills it if it still runs
// at the end.
func startBinary(t *testing.T, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(binary(t), args...), exited: make(chan struct{})}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
		}
	}()
	go func() { <-read; p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("sluiced's log:\n%s", p.log())
		}
	})
	return p
}

func (p *process) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// logged returns the number of log lines that contain s.
func (p *process) logged(s string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, l := range p.lines {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}

// waitFor polls cond until it holds, failing the test after a deadline
// generous enough for a busy host.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// replaceWithFIFO puts a FIFO at path, in place of the file there.
func replaceWithFIFO(t *testing.T, path string) {
	t.Helper()
	os.Remove(path)
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Ensure a FIFO at the config path neither wedges reloads nor shutdown: it
// is refused unread, and the previous limits stay; a valid file then and a
// SIGHUP put its limit in force at once; and SIGTERM with a FIFO at the
// path stops the process promptly. (A plain open of the FIFO waited for a
// writer forever, holding every later reload and the exit behind it.)
func TestBinary_configFIFO(t *testing.T) {
	dir := shortDir(t)
	cfg := filepath.Join(dir, "sluice.yaml")
	writeConfig := func(text string) {
		t.Helper()
		if err := os.WriteFile(cfg+".tmp", []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(cfg+".tmp", cfg); err != nil {
			t.Fatal(err)
		}
	}
	writeConfig("limits:\n  first: \"token_bucket:max=100,refill_time=1h\"\n")
	p := startBinary(t, "--state", filepath.Join(dir, "state"), "--socket", filepath.Join(dir, "s"),
		"--resp-socket", "-", "--slots", "64", "--config", cfg)
	var c *sluice.Client
	var err error
	waitFor(t, "sluiced to serve", func() bool {
		c, err = sluice.Dial(filepath.Join(dir, "s"), sluice.WithFailurePolicy(sluice.FailError))
		return err == nil
	})
	defer c.Close()
	acquire := func(name string) error {
		l, err := sluice.ParseLimit(name)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Acquire(context.Background(), l, "k", 1)
		return err
	}
	if err := acquire("first"); err != nil {
		t.Fatal(err)
	}

	const refused = "not a regular file (it is a FIFO)"
	replaceWithFIFO(t, cfg)
	waitFor(t, "the watcher to refuse the FIFO", func() bool { return p.logged(refused) == 1 })
	if err := acquire("first"); err != nil {
		t.Fatalf("with a FIFO at the path: %v", err)
	}
	writeConfig("limits:\n  second: \"token_bucket:max=100,refill_time=1h\"\n")
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new limit to be in force after SIGHUP", func() bool { return acquire("second") == nil })

	replaceWithFIFO(t, cfg)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "SIGHUP to refuse the FIFO", func() bool { return p.logged(refused) == 2 })
	c.Close()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
		if p.err != nil {
			t.Fatalf("sluiced exited with %v", p.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("sluiced still runs 30 s after SIGTERM, with a FIFO at its config path")
	}
}
