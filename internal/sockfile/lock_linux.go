//go:build linux

package sockfile

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// lockInstance opens (creating) the lock file at path and takes an exclusive
// flock on it without waiting. The lock is released when the file is closed
// or the process dies.
func lockInstance(path string) (*os.File, error) {
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
	return f, nil
}
