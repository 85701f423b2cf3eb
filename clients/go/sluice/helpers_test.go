package sluice_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clients/go/sluice"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/internal/sidecartest"
)

// t0 is the sidecar clock of the tests, Unix ns: 2023-11-14T22:13:20Z.
const t0 = 1_700_000_000 * int64(time.Second)

// exampleSocket is the socket of the sidecar TestMain runs for the
// examples.
var exampleSocket string

func TestMain(m *testing.M) {
	if spec := os.Getenv(workerEnv); spec != "" { // a process of TestLease_processes
		os.Exit(leaseWorker(spec))
	}
	dir, err := os.MkdirTemp("", "sl")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sc := &sidecar{cfg: config(dir), clock: new(atomic.Int64)}
	sc.clock.Store(t0)
	if err := sc.run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	exampleSocket = sc.cfg.SocketPath
	code := m.Run()
	if err := sc.halt(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the example sidecar:", err)
		code = 1
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// sidecar is an in-process sluiced.
type sidecar struct {
	cfg   server.Config
	clock *atomic.Int64 // the server clock, Unix ns
	srv   *sidecartest.Server
}

func config(dir string) server.Config {
	return server.Config{
		StatePath:  filepath.Join(dir, "state"),
		SocketPath: filepath.Join(dir, "sock"),
		RESPSocket: "-", // none
		Slots:      4096,
		SlotSize:   128,
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// shortDir returns a temporary directory with a path short enough for a
// socket name.
var shortDir = sidecartest.ShortDir

// startSidecar runs a sidecar on a fresh state file, its clock at t0 and
// under the test's control, until the test ends. edit, if given, changes
// the configuration first.
func startSidecar(t testing.TB, edit ...func(*server.Config)) *sidecar {
	t.Helper()
	sc := &sidecar{cfg: config(shortDir(t)), clock: new(atomic.Int64)}
	sc.clock.Store(t0)
	for _, e := range edit {
		e(&sc.cfg)
	}
	sc.start(t)
	t.Cleanup(func() { sc.stop(t) })
	return sc
}

func (sc *sidecar) run() error {
	sc.cfg.Now = sc.clock.Load
	cfg := sc.cfg
	srv, err := sidecartest.Start(func(ctx context.Context, ready func()) error {
		cfg.Ready = ready
		return server.Run(ctx, cfg)
	})
	sc.srv = srv
	return err
}

func (sc *sidecar) halt() error {
	if sc.srv == nil {
		return nil
	}
	err := sc.srv.Stop()
	sc.srv = nil
	return err
}

// start (re)starts the sidecar on its state file and socket.
func (sc *sidecar) start(t testing.TB) {
	t.Helper()
	if err := sc.run(); err != nil {
		t.Fatal(err)
	}
}

// stop shuts the sidecar down gracefully.
func (sc *sidecar) stop(t testing.TB) {
	t.Helper()
	if err := sc.halt(); err != nil {
		t.Errorf("sidecar: %v", err)
	}
}

// dial returns a client of sc, closed at the end of the test. Its timeouts,
// and its start check's, are testTimeout unless opts set them: a test that
// is about a timeout says which it wants (DefaultTimeout is 50 ms,
// DefaultDialTimeout 100 ms and DefaultStartTimeout 1 s, which a busy
// machine misses).
func dial(t testing.TB, path string, opts ...sluice.Option) *sluice.Client {
	t.Helper()
	opts = append([]sluice.Option{sluice.WithLogger(quiet), sluice.WithTimeout(testTimeout), sluice.WithDialTimeout(testTimeout)}, opts...)
	start, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, err := sluice.DialContext(start, path, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// testTimeout is the timeout of the tests' clients: far above any answer,
// however busy the machine.
const testTimeout = time.Minute

// quiet is the logger of the clients of the tests that do not look at the
// log.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// ctx returns a context that ends with the test, or after 10 s.
func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

// countingConn counts the writes on a connection.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// eventually polls f until it returns nil or 10 s pass.
func eventually(t testing.TB, f func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still failing after 10s: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
