package server

import (
	"errors"
	"fmt"
	"github.com/sluicehq/sluice/proto"
	"io/fs"
	"net"
	"os"
	"path/filepath"
)

// maxSocketPath is the longest Unix socket path Linux accepts (sun_path is
// 108 bytes including the terminating NUL).
const maxSocketPath = 107

var (
	// ErrSocketInUse is returned when another process serves the socket
	// path; the error names the path.
	ErrSocketInUse = errors.New("server: another sluiced is serving the socket")
	// ErrSocketPath is returned for a socket path that cannot be used.
	ErrSocketPath = errors.New("server: unusable socket path")
)

// listener is one listening socket, the protocol it speaks, and, for a
// Unix socket, the instance lock that guards its path.
type listener struct {
	ln    net.Listener
	path  string      // Unix socket path, "" for TCP
	bound os.FileInfo // the socket file this listener bound at path
	lock  *os.File    // instance lock of path
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

// listen binds a Unix stream socket at path with file mode perm. It first
// takes the instance lock (an flock on path+".lock"), so a live socket is
// never removed; with the lock held, a socket file left at path by a crashed
// instance is stale and is replaced. The socket is bound under a temporary
// name, given its mode, and renamed into place, so it is never reachable
// with the process umask's permissions. The directory is created 0750 if
// missing and must not be writable by others.
func listenUnix(path string, perm fs.FileMode) (*listener, error) {
	if len(path) > maxSocketPath {
		return nil, fmt.Errorf("%w: %q is %d bytes, the limit is %d", ErrSocketPath, path, len(path), maxSocketPath)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSocketPath, err)
	}
	if fi, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSocketPath, err)
	} else if fi.Mode().Perm()&0o002 != 0 && fi.Mode()&fs.ModeSticky == 0 {
		return nil, fmt.Errorf("%w: directory %s is writable by every user", ErrSocketPath, dir)
	}
	lock, err := lockInstance(path + ".lock")
	if errors.Is(err, ErrSocketInUse) {
		return nil, fmt.Errorf("%w %s", err, path)
	} else if err != nil {
		return nil, err
	}
	fail := func(err error) (*listener, error) {
		unlock(lock)
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return fail(fmt.Errorf("%w: %s exists and is not a socket; not removing it", ErrSocketPath, path))
		}
		if err := os.Remove(path); err != nil { // stale: its server is gone
			return fail(err)
		}
	}
	tmp := filepath.Join(dir, fmt.Sprintf(".%s.%d", filepath.Base(path), os.Getpid()))
	if len(tmp) > maxSocketPath {
		tmp = path // no room for a temporary name: bind in place
	}
	os.Remove(tmp)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return fail(fmt.Errorf("server: listen on %s: %w", path, err))
	}
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, perm); err != nil {
		ln.Close()
		os.Remove(tmp)
		return fail(err)
	}
	if tmp != path {
		if err := os.Rename(tmp, path); err != nil {
			ln.Close()
			os.Remove(tmp)
			return fail(err)
		}
	}
	bound, err := os.Lstat(path)
	if err != nil {
		ln.Close()
		return fail(err)
	}
	return &listener{path: path, ln: ln, lock: lock, bound: bound}, nil
}

// close removes a Unix socket's file, if it is still the one this listener
// bound (another sluiced may have replaced it since), then its lock file,
// still holding the lock (lockInstance), and releases the lock; the
// listener itself is closed first, by the caller.
func (l *listener) close() {
	if l.path != "" {
		if fi, err := os.Lstat(l.path); err == nil && os.SameFile(fi, l.bound) {
			os.Remove(l.path)
		}
		unlock(l.lock)
	}
}

// unlock removes the lock file of an instance lock, still holding the lock
// (lockInstance), then releases it.
func unlock(lock *os.File) {
	os.Remove(lock.Name())
	lock.Close()
}
