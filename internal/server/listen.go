package server

import (
	"errors"
	"fmt"
	"io/fs"
	"net"

	"github.com/sluicehq/sluice/internal/sockfile"
	"github.com/sluicehq/sluice/proto"
)

var (
	// ErrSocketInUse is returned when another process serves the socket path.
	ErrSocketInUse = sockfile.ErrInUse
	// ErrSocketPath is returned for a socket path that cannot be used.
	ErrSocketPath = sockfile.ErrPath
)

// listener is one listening socket, the protocol it speaks, and, for a
// Unix socket, its file and instance lock.
type listener struct {
	ln   net.Listener
	path string             // Unix socket path, "" for TCP
	sock *sockfile.Listener // ln's file and lock, nil for TCP
	// open makes the connection state of c for this listener's protocol:
	// its stream and the handler that answers what the stream has read.
	open    func(s *server, c net.Conn) (*stream, func())
	native  bool                                     // the native protocol (else the Redis protocol)
	refusal func(st proto.Status, msg string) []byte // the answer to a connection refused before serving
}

// listenAll opens every listener the configuration asks for: the native
// protocol's socket, the Redis protocol's socket and, if set, its TCP
// address.
func listenAll(c Config) ([]*listener, error) {
	var lns []*listener
	fail := func(err error) ([]*listener, error) {
		for _, l := range lns {
			l.ln.Close()
			l.close()
		}
		return nil, err
	}
	native, err := listenUnix(c.SocketPath, c.SocketMode)
	if err != nil {
		return fail(err)
	}
	native.open, native.refusal, native.native = openNative, refuseNative, true
	lns = append(lns, native)
	if c.RESPSocket != "-" {
		l, err := listenUnix(c.RESPSocket, c.SocketMode)
		if err != nil {
			return fail(err)
		}
		l.open, l.refusal = openRESP, refuseRESP
		lns = append(lns, l)
	}
	if c.RESPAddr != "" {
		if err := checkLoopback(c.RESPAddr, c.RESPAllowRemote); err != nil {
			return fail(err)
		}
		ln, err := net.Listen("tcp", c.RESPAddr)
		if err != nil {
			return fail(fmt.Errorf("server: listen on %s: %w", c.RESPAddr, err))
		}
		lns = append(lns, &listener{ln: ln, open: openRESP, refusal: refuseRESP})
	}
	return lns, nil
}

// ErrRemoteAddr is returned for a TCP address that is not on loopback when
// remote clients are not allowed.
var ErrRemoteAddr = errors.New("server: the Redis protocol listens on loopback only (allow remote clients explicitly)")

// checkLoopback refuses a host:port whose host is not a loopback address
// (or "localhost"), unless allow is set.
func checkLoopback(addr string, allow bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("server: address %q: %w", addr, err)
	}
	if allow || host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrRemoteAddr, addr)
}

func openNative(s *server, c net.Conn) (*stream, func()) {
	cn := &conn{stream: stream{s: s, c: c}}
	return &cn.stream, cn.handle
}

// serveNative runs a native-protocol connection on its own goroutine.
func serveNative(s *server, c net.Conn) {
	st, handle := openNative(s, c)
	st.serve(handle)
}

// refuseNative is a response frame with one error result, in the oldest
// version, which every client reads: it is written before the client says
// which it speaks.
func refuseNative(st proto.Status, msg string) []byte {
	b, start := proto.BeginFrameVersion(nil, proto.MinVersion, proto.KindResponse, 0)
	return proto.EndFrame(proto.AppendError(b, 0, st, msg), start, 1)
}

// listenUnix binds a Unix stream socket at path with file mode perm, under
// the rules every socket of sluiced follows (package sockfile): the
// instance lock first, a stale socket replaced, the mode whatever the
// umask, a directory not writable by every user.
func listenUnix(path string, perm fs.FileMode) (*listener, error) {
	sl, err := sockfile.Listen(path, perm)
	if err != nil {
		return nil, err
	}
	return &listener{ln: sl, path: path, sock: sl}, nil
}

// close removes a Unix socket's file, if it is still the one this listener
// bound, and releases its lock; the listener itself is closed first, by the
// caller.
func (l *listener) close() {
	if l.sock != nil {
		l.sock.Remove()
	}
}
