//go:build linux

package sockfile

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// lockInstance opens (creating) the lock file at path and takes an exclusive
// flock on it without waiting. The lock is released when the file is closed
// or the process dies. Its holder removes the file before it lets go of the
// lock (unlock): a process that opened the file before it was removed then
// holds a lock on a file no longer at path, so it checks, once it has the
// lock, that the file is still the one at path, and starts again if not.
func lockInstance(path string) (*os.File, error) {
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, err
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, ErrInUse
			}
			return nil, err
		}
		if stillAt(f, path) {
			return f, nil
		}
		f.Close() // removed by its last holder as this process opened it
	}
}

// stillAt reports whether the open file f is the file at path.
func stillAt(f *os.File, path string) bool {
	held, err := f.Stat()
	if err != nil {
		return false
	}
	at, err := os.Stat(path)
	return err == nil && os.SameFile(held, at)
}
