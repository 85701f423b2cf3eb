package sluice

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/proto"
)

// A caller takes the roles that are free rather than wake the goroutines
// that would take them: both when nothing else is going on, the writing
// role while someone else reads; none while someone writes (the writer
// takes its call along). Without take (the RELEASE of an orphaned lease,
// queued from the reading role) the writer goroutine is woken.
func TestEnqueue_roles(t *testing.T) {
	newConn := func(writing, reading bool) *conn {
		cn := &conn{wake: make(chan struct{}, 1), readWake: make(chan struct{}, 1)}
		cn.writing, cn.reading = writing, reading
		if reading {
			cn.inflight.push(&call{}) // the reader's call
		}
		return cn
	}
	for _, tc := range []struct {
		name             string
		writing, reading bool
		take             bool
		want             role
		woken            bool // the writer goroutine
	}{
		{name: "idle", take: true, want: roleDirect},
		{name: "someone reads", reading: true, take: true, want: roleWrite},
		{name: "someone writes", writing: true, take: true, want: roleNone},
		{name: "someone writes and reads", writing: true, reading: true, take: true, want: roleNone},
		{name: "someone reads, not taking", reading: true, want: roleNone, woken: true},
		{name: "idle, not taking", want: roleNone, woken: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cn := newConn(tc.writing, tc.reading)
			got, err := cn.enqueue(tc.take, &call{})
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("role %d, want %d", got, tc.want)
			}
			if !cn.writing {
				t.Error("nobody holds the writing role with a call queued")
			}
			if got == roleDirect && !cn.reading {
				t.Error("a direct round trip without the reading role")
			}
			if woken := len(cn.wake) == 1; woken != tc.woken {
				t.Errorf("writer goroutine woken: %v, want %v", woken, tc.woken)
			}
			if len(cn.readWake) != 0 {
				t.Error("the reader goroutine was woken")
			}
		})
	}
}

// brokenConn is a connection whose writes fail as a socket's do once the
// sidecar has closed it, and whose reads wait until it is closed.
type brokenConn struct {
	net.Conn // nil: only what the connection uses is implemented
	closed   chan struct{}
	once     sync.Once
}

func (b *brokenConn) Write([]byte) (int, error) {
	return 0, &net.OpError{Op: "write", Net: "unix", Err: os.NewSyscallError("write", syscall.EPIPE)}
}

func (b *brokenConn) Read([]byte) (int, error) {
	<-b.closed
	return 0, net.ErrClosed
}

func (b *brokenConn) Close() error                     { b.once.Do(func() { close(b.closed) }); return nil }
func (b *brokenConn) SetReadDeadline(time.Time) error  { return nil }
func (b *brokenConn) SetWriteDeadline(time.Time) error { return nil }

// A caller that writes for the others while someone else reads, and whose
// write fails, hands the failure to the writer goroutine, which fails the
// connection (after giving the reader the time to read a refusal): the
// calls fail rather than wait for ever with the writing role held.
func TestConn_callerWriteFails(t *testing.T) {
	cn := newConn(&Client{}, &brokenConn{closed: make(chan struct{})})
	defer func() { cn.fail(errors.New("the test is over")); cn.wait() }()
	cn.mu.Lock()
	cn.reading = true // another caller reads
	cn.mu.Unlock()
	cl := getCall(proto.OpAcquire)
	cl.req = append(cl.req[:0], make([]byte, proto.HeaderLen)...)
	r, err := cn.enqueue(true, cl)
	if err != nil || r != roleWrite {
		t.Fatalf("enqueue: role %d, %v; want the writing role", r, err)
	}
	cn.writeAsCaller(false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = cl.wait(ctx, 0)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "cannot send the request") {
		t.Fatalf("the call's error: %v, want the failed write's", err)
	}
}
