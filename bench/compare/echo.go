package compare

import (
	"context"
	"fmt"
	"io"
	"net"

	"github.com/sluicehq/sluice/internal/echo"
	"github.com/sluicehq/sluice/proto"
)

// The echo is the physical floor of the socket path: a bare Unix-socket
// server that answers every native request frame with a frame of a
// decision's size, and a raw client that sends the same frames the Go
// client would. Whatever a target spends above it is protocol, client
// and decision work.

// ServeEcho answers frames on ln's connections until ln is closed (see
// package echo, which the sidecar's own benchmarks share).
func ServeEcho(ln net.Listener) error { return echo.Serve(ln) }

// echoTarget is the floor. start runs the echo server and returns its
// socket path and a stop function.
type echoTarget struct {
	start  func(ctx context.Context) (path string, stop func() error, err error)
	limits Limits
	path   string
	stop   func() error
}

func (t *echoTarget) Name() string            { return "echo (floor)" }
func (t *echoTarget) Family() string          { return "echo" }
func (t *echoTarget) Supports(LimitKind) bool { return true }
func (t *echoTarget) Multiplexed() bool       { return false }

func (t *echoTarget) Reset(ctx context.Context) error {
	if t.stop != nil {
		return nil // stateless: one server serves every cell
	}
	path, stop, err := t.start(ctx)
	if err != nil {
		return fmt.Errorf("echo server: %w", err)
	}
	t.path, t.stop = path, stop
	return nil
}

func (t *echoTarget) Close() error {
	if t.stop == nil {
		return nil
	}
	err := t.stop()
	t.stop = nil
	return err
}

func (t *echoTarget) Dial(ctx context.Context, k LimitKind) (Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", t.path)
	if err != nil {
		return nil, err
	}
	l := t.limits
	return &echoConn{c: c, l: proto.TokenBucketLimit(l.TBMax, l.TBRefill, l.TBAmount), answer: echo.AnswerLen}, nil
}

type echoConn struct {
	c      net.Conn
	l      proto.Limit
	answer int
	id     uint32
	out    []byte
	in     []byte
}

// Do sends one acquire frame per key, as the Go client encodes them, and
// reads as many answers.
func (c *echoConn) Do(ctx context.Context, keys []string) (int, error) {
	c.out = c.out[:0]
	for _, k := range keys {
		c.id++
		b, start := proto.BeginFrame(c.out, proto.KindRequest, c.id)
		b = proto.AppendItem(b, proto.OpAcquire, 0, c.l, 1, 0, []byte(k))
		c.out = proto.EndFrame(b, start, 1)
	}
	if _, err := c.c.Write(c.out); err != nil {
		return 0, err
	}
	want := c.answer * len(keys)
	if cap(c.in) < want {
		c.in = make([]byte, want)
	}
	if _, err := io.ReadFull(c.c, c.in[:want]); err != nil {
		return 0, err
	}
	return len(keys), nil
}

func (c *echoConn) Close() error { return c.c.Close() }
