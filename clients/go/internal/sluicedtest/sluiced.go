package sluicedtest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clients/go/sluice"
	"github.com/sluicehq/sluice/internal/sidecartest"
)

// Patience is how long a test waits for what a loaded host makes slow: the
// sidecar starting, a worker process answering, a call's answer.
const Patience = 2 * time.Minute

// Root returns the directory of this checkout.
func Root() string {
	_, file, _, _ := runtime.Caller(0) // .../clients/go/internal/sluicedtest/sluiced.go
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "..")
}

// built is the sluiced binary and the directory to remove after the tests.
var built struct {
	once sync.Once
	bin  string
	dir  string
	err  error
}

// binary returns $SLUICED, or sluiced built from this checkout once per
// test binary (in the root module, whose requirements it needs).
func binary() (string, error) {
	if bin := os.Getenv("SLUICED"); bin != "" {
		return filepath.Abs(bin)
	}
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "sluiced")
		if built.err != nil {
			return
		}
		built.bin = filepath.Join(built.dir, "sluiced")
		cmd := exec.Command("go", "build", "-o", built.bin, "./cmd/sluiced")
		cmd.Dir = Root()
		if out, err := cmd.CombinedOutput(); err != nil {
			built.err = errors.New("building sluiced: " + err.Error() + ": " + string(out))
		}
	})
	return built.bin, built.err
}

// cleanup removes the binary built for the tests.
func cleanup() {
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
}

// ShortDir returns a temporary directory, removed when the test ends, whose
// path is short enough for a socket's (t.TempDir's can pass the 108 bytes
// of sun_path).
func ShortDir(t testing.TB) string {
	t.Helper()
	return sidecartest.ShortDir(t)
}

// Sidecar is a sluiced process run for a test.
type Sidecar struct {
	Socket string

	cmd    *exec.Cmd
	exited chan error
}

// Start runs sluiced on a fresh state file until the test ends.
func Start(t testing.TB) *Sidecar {
	t.Helper()
	return StartAt(t, filepath.Join(ShortDir(t), "sock"))
}

// StartAt runs sluiced listening at sock, its state file beside it, until
// the test ends, and returns once it accepts connections.
func StartAt(t testing.TB, sock string) *Sidecar {
	t.Helper()
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	sc := &Sidecar{Socket: sock, exited: make(chan error, 1)}
	sc.cmd = exec.Command(bin, "-socket", sock, "-state", filepath.Join(filepath.Dir(sock), "state"),
		"-resp-socket", "-", "-slots", "65536", "-log-level", "error")
	sc.cmd.Stderr = os.Stderr
	if err := sc.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { sc.exited <- sc.cmd.Wait() }()
	t.Cleanup(func() { sc.Stop(t) })
	deadline := time.Now().Add(Patience)
	for {
		nc, err := net.Dial("unix", sock)
		if err == nil {
			nc.Close()
			return sc
		}
		select {
		case err := <-sc.exited:
			sc.exited <- err // for Stop
			t.Fatalf("sluiced exited before it listened: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("sluiced did not listen at %s within %v: %v", sock, Patience, err)
		}
	}
}

// Stop stops the sidecar (SIGTERM) and waits for it to exit; it does
// nothing the second time.
func (sc *Sidecar) Stop(t testing.TB) {
	t.Helper()
	if sc.cmd == nil {
		return
	}
	sc.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-sc.exited:
	case <-time.After(Patience):
		sc.cmd.Process.Kill()
		<-sc.exited
		t.Error("sluiced did not stop on SIGTERM")
	}
	sc.cmd = nil
}

// Options are the client options of the tests: errors rather than a
// failure policy's decisions, and patience for a loaded host.
func Options() []sluice.Option {
	return []sluice.Option{
		sluice.WithFailurePolicy(sluice.FailError), sluice.WithTimeout(Patience),
		sluice.WithDialTimeout(Patience), sluice.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
	}
}

// Dial returns a client of the sidecar with Options (then opts), closed
// when the test ends.
func (sc *Sidecar) Dial(t testing.TB, opts ...sluice.Option) *sluice.Client {
	t.Helper()
	c, err := sluice.Dial(sc.Socket, append(Options(), opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c
}

// QuietWindow returns a window length (about 28 years) whose current
// window, aligned to its multiples since the Unix epoch as the sidecar's
// windows are, began within the last hour: no window boundary passes
// during a test, whose counts are then exact.
func QuietWindow() time.Duration {
	start := time.Now().Truncate(time.Hour).UnixNano() // even: a multiple of an hour in ns
	return time.Duration(start / 2)                    // now is in [2w, 3w)
}

// AwayFromMinuteEnd returns once the current minute has at least margin
// left, so that a test of limits whose windows are whole minutes (or
// hours, or days: every such boundary is a minute's) sees no boundary pass
// if it takes less than margin. It waits at most margin.
func AwayFromMinuteEnd(margin time.Duration) {
	now := time.Now()
	if left := now.Truncate(time.Minute).Add(time.Minute).Sub(now); left < margin {
		time.Sleep(left)
	}
}
