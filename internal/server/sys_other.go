//go:build !linux

package server

import (
	"errors"
	"net"
)

// peerCred needs SO_PEERCRED; the sidecar runs on Linux.
func peerCred(net.Conn) (uid, gid uint32, err error) {
	return 0, 0, errors.New("server: peer credentials are supported on Linux only")
}
