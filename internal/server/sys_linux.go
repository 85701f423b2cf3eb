//go:build linux

package server

import (
	"errors"
	"net"

	"golang.org/x/sys/unix"
)

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
