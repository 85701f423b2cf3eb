package server

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
)

// maxSocketPath is the longest Unix socket path Linux accepts (sun_path is
// 108 bytes including the terminating NUL).
const maxSocketPath = 107

var (
	// ErrSocketInUse is returned when another process serves the socket path.
	ErrSocketInUse = errors.New("server: another sluiced is serving this socket")
	// ErrSocketPath is returned for a socket path that cannot be used.
	ErrSocketPath = errors.New("server: unusable socket path")
)

// socket is a listening Unix socket and the instance lock that guards its
// path.
type socket struct {
	path string
	ln   *net.UnixListener
	lock *os.File
}

// listen binds a Unix stream socket at path with file mode perm. It first
// takes the instance lock (an flock on path+".lock"), so a live socket is
// never removed; with the lock held, a socket file left at path by a crashed
// instance is stale and is replaced. The socket is bound under a temporary
// name, given its mode, and renamed into place, so it is never reachable
// with the process umask's permissions. The directory is created 0750 if
// missing and must not be writable by others.
func listen(path string, perm fs.FileMode) (*socket, error) {
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
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*socket, error) {
		lock.Close()
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
	return &socket{path: path, ln: ln, lock: lock}, nil
}

// close stops listening, removes the socket file and releases the lock.
func (s *socket) close() {
	s.ln.Close()
	os.Remove(s.path)
	s.lock.Close()
}
