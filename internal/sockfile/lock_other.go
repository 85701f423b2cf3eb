//go:build !linux

package sockfile

import (
	"errors"
	"os"
)

// lockInstance needs flock; the sidecar runs on Linux.
func lockInstance(string) (*os.File, error) {
	return nil, errors.New("instance locking is supported on Linux only")
}
