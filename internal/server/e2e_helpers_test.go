package server

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/sidecartest"
	"github.com/sluicehq/sluice/proto"
)

// sidecar is a server started for a test.
type sidecar struct {
	cfg   Config
	srv   *sidecartest.Server
	clock *atomic.Int64 // the server clock, Unix ns
}

// shortDir returns a temporary directory with a path short enough for
// socket names.
var shortDir = sidecartest.ShortDir

// testTransport is the transport the tests' servers use unless a test
// names one: SLUICE_TEST_TRANSPORT (auto, the default, goroutines or
// epoll), which CI sets to run the suite over more than one.
func testTransport() string {
	switch t := os.Getenv("SLUICE_TEST_TRANSPORT"); t {
	case "", TransportAuto:
		return TransportAuto
	case TransportGoroutines, TransportEpoll:
		return t
	default:
		panic("SLUICE_TEST_TRANSPORT=" + t + ": want auto, goroutines or epoll")
	}
}

// start runs a server on a fresh state file in dir (or a new directory) and
// stops it at the end of the test.
func start(t testing.TB, cfg Config) *sidecar {
	t.Helper()
	if cfg.StatePath == "" {
		dir := shortDir(t)
		cfg.StatePath = filepath.Join(dir, "state")
		cfg.SocketPath = filepath.Join(dir, "sock")
	}
	if cfg.RESPSocket == "" {
		cfg.RESPSocket = filepath.Join(filepath.Dir(cfg.SocketPath), filepath.Base(cfg.SocketPath)+".resp")
	}
	if cfg.Slots == 0 {
		cfg.Slots = 4096
		cfg.SlotSize = 128
	}
	if cfg.Transport == "" {
		cfg.Transport = testTransport()
	}
	sc := &sidecar{clock: new(atomic.Int64)}
	sc.clock.Store(1_700_000_000 * 1e9)
	if cfg.Now == nil {
		cfg.Now = sc.clock.Load
	}
	cfg.Logger = quiet()
	sc.cfg = cfg
	srv, err := sidecartest.Start(func(ctx context.Context, ready func()) error {
		cfg.Ready = ready
		return Run(ctx, cfg)
	})
	if err != nil {
		t.Fatal(err)
	}
	sc.srv = srv
	t.Cleanup(func() { sc.stop(t) })
	return sc
}

// stop shuts the server down and checks it returned cleanly.
func (sc *sidecar) stop(t testing.TB) {
	t.Helper()
	if err := sc.srv.Stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
}

// client is a raw protocol client for tests.
type client struct {
	t    testing.TB
	c    net.Conn
	buf  []byte
	next uint32
}

func dial(t testing.TB, sc *sidecar) *client {
	t.Helper()
	c, err := net.Dial("unix", sc.cfg.SocketPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{t: t, c: c}
}

// send writes one request frame holding the operations that ops appends,
// and returns its id.
func (c *client) send(n int, ops func(b []byte) []byte) uint32 {
	c.t.Helper()
	c.next++
	b, start := proto.BeginFrame(nil, proto.KindRequest, c.next)
	b = proto.EndFrame(ops(b), start, n)
	if _, err := c.c.Write(b); err != nil {
		c.t.Fatal(err)
	}
	return c.next
}

// recv reads one response frame and decodes its results.
func (c *client) recv() (proto.Header, []proto.Result) {
	c.t.Helper()
	h, rs, err := c.tryRecv()
	if err != nil {
		c.t.Fatal(err)
	}
	return h, rs
}

func (c *client) tryRecv() (proto.Header, []proto.Result, error) {
	c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		frame, rest, h, err := proto.SplitFrame(c.buf)
		if err != nil {
			return h, nil, err
		}
		if frame != nil {
			body := frame[proto.HeaderLen:]
			rs := make([]proto.Result, h.Count)
			for i := range rs {
				if body, err = proto.DecodeResult(body, &rs[i]); err != nil {
					return h, nil, err
				}
				// Results alias the buffer: copy what tests keep.
				rs[i].Message = append([]byte(nil), rs[i].Message...)
			}
			c.buf = append([]byte(nil), rest...)
			return h, rs, nil
		}
		tmp := make([]byte, 64<<10)
		n, err := c.c.Read(tmp)
		c.buf = append(c.buf, tmp[:n]...)
		if err != nil {
			return h, nil, err
		}
	}
}

// do sends one operation and returns its result.
func (c *client) do(op func(b []byte) []byte) proto.Result {
	c.t.Helper()
	id := c.send(1, op)
	h, rs := c.recv()
	if h.ID != id || len(rs) != 1 {
		c.t.Fatalf("response id %d with %d results, want id %d with 1", h.ID, len(rs), id)
	}
	return rs[0]
}

// acquire sends an ACQUIRE at server time (or at, if at != 0).
func (c *client) acquire(key string, l proto.Limit, cost, at int64) proto.Result {
	c.t.Helper()
	f := proto.Flags(0)
	if at != 0 {
		f = proto.FlagAt
	}
	return c.do(func(b []byte) []byte { return proto.AppendItem(b, proto.OpAcquire, f, l, cost, at, []byte(key)) })
}

// closed reports whether the server closed the connection.
func (c *client) closed() bool {
	_, _, err := c.tryRecv()
	return errors.Is(err, net.ErrClosed) || err != nil
}
