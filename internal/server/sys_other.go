//go:build !linux

package server

import (
	"errors"
	"net"
	"os"
)

// lockInstance needs flock; the sidecar runs on Linux.
func lockInstance(string) (*os.File, error) {
	return nil, errors.New("server: instance locking is supported on Linux only")
}

// peerCred needs SO_PEERCRED; the sidecar runs on Linux.
func peerCred(net.Conn) (uid, gid uint32, err error) {
	return 0, 0, errors.New("server: peer credentials are supported on Linux only")
}
