//go:build !linux

package server

import (
	"errors"
	"os"
)

// lockInstance needs flock; the sidecar runs on Linux.
func lockInstance(string) (*os.File, error) {
	return nil, errors.New("server: instance locking is supported on Linux only")
}
