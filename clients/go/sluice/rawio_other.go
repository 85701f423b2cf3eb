//go:build !linux

package sluice

import (
	"errors"
	"net"
)

// rawIO is Linux's (rawio_linux.go); elsewhere connections use net.Conn.
type rawIO struct{}

func newRawIO(net.Conn) *rawIO { return nil }

var errNoRawIO = errors.New("no raw reads and writes on this system")

func (*rawIO) read([]byte) (int, error) { return 0, errNoRawIO }

func (*rawIO) write([]byte) error { return errNoRawIO }
