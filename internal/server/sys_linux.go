//go:build linux

package server

import (
	"errors"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// lockInstance opens (creating) the lock file at path and takes an exclusive
// flock on it without waiting. The lock is released when the file is closed
// or the process dies. Its holder removes the file at a clean stop, before
// it lets go of the lock (listener.close): a process that opened the file
// before it was removed then holds a lock on a file no longer at path, so
// it checks, once it has the lock, that the file is still the one at path,
// and starts again if not.
func lockInstance(path string) (*os.File, error) {
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, err
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, ErrSocketInUse
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

// peerCred returns the uid and gid of the process at the other end of a
// Unix socket connection (SO_PEERCRED: its credentials when it connected).
func peerCred(c net.Conn) (uid, gid uint32, err error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0, 0, errors.New("server: peer credentials need a Unix socket")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, 0, err
	}
	if credErr != nil {
		return 0, 0, credErr
	}
	return cred.Uid, cred.Gid, nil
}
