package sockfile

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"time"
)

// MaxPath is the longest Unix socket path Linux accepts (sun_path is 108
// bytes including the terminating NUL).
const MaxPath = 107

var (
	// ErrInUse is returned when another process serves the path.
	ErrInUse = errors.New("another sluiced is serving this socket")
	// ErrPath is returned for a socket path that cannot be used.
	ErrPath = errors.New("unusable socket path")
)

// Listener is a Unix socket bound at a path by Listen, and the instance
// lock that guards the path.
type Listener struct {
	*net.UnixListener
	path  string
	bound os.FileInfo // the socket file bound at path
	lock  *os.File    // instance lock of path
}

// Listen binds a Unix stream socket at path with file mode perm, under the
// rules of the package doc. Closing the Listener leaves the file: Remove
// removes it.
func Listen(path string, perm fs.FileMode) (*Listener, error) {
	if len(path) > MaxPath {
		return nil, fmt.Errorf("%w: %q is %d bytes, the limit is %d", ErrPath, path, len(path), MaxPath)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPath, err)
	}
	if fi, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPath, err)
	} else if fi.Mode().Perm()&0o002 != 0 && fi.Mode()&fs.ModeSticky == 0 {
		return nil, fmt.Errorf("%w: directory %s is writable by every user", ErrPath, dir)
	}
	lock, err := lockInstance(path + ".lock")
	if errors.Is(err, ErrInUse) {
		return nil, fmt.Errorf("%w: %s", err, path) // which socket
	} else if err != nil {
		return nil, err
	}
	fail := func(err error) (*Listener, error) {
		unlock(lock)
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return fail(fmt.Errorf("%w: %s exists and is not a socket; not removing it", ErrPath, path))
		}
		// Without the lock's holder, a socket that answers is another
		// program's: leave it.
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return fail(fmt.Errorf("%w: %s answers, and is not sluiced's; not removing it", ErrInUse, path))
		}
		if err := os.Remove(path); err != nil { // stale: its server is gone
			return fail(err)
		}
	}
	tmp := filepath.Join(dir, fmt.Sprintf(".%s.%d", filepath.Base(path), os.Getpid()))
	if len(tmp) > MaxPath {
		tmp = path // no room for a temporary name: bind in place
	}
	os.Remove(tmp)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return fail(fmt.Errorf("listen on %s: %w", path, err))
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
	return &Listener{UnixListener: ln, path: path, bound: bound, lock: lock}, nil
}

// Path returns the path the socket is bound at.
func (l *Listener) Path() string { return l.path }

// Remove removes the socket file, if it is still the one l bound (it may
// have been replaced since: a socket is not removed unless it is the same
// file, nor anything else, even a file that reuses its inode number), and
// the instance lock's file, and releases the lock. Call it once, after
// Close.
func (l *Listener) Remove() {
	if fi, err := os.Lstat(l.path); err == nil && fi.Mode().Type() == fs.ModeSocket && os.SameFile(fi, l.bound) {
		os.Remove(l.path)
	}
	unlock(l.lock)
}

// unlock removes the file of an instance lock, still holding the lock (see
// lockInstance), then releases it: a clean stop leaves no PATH.lock.
func unlock(lock *os.File) {
	os.Remove(lock.Name())
	lock.Close()
}
