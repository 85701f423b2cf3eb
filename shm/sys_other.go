//go:build !linux

package shm

import (
	"os"

	"github.com/edsrzf/mmap-go"
)

// State files need Linux (flock, fallocate, msync semantics); heap tables work
// everywhere.

func openNoFollow(string) (*os.File, error)     { return nil, ErrUnsupported }
func lockFile(*os.File) error                   { return ErrUnsupported }
func allocate(*os.File, int64) error            { return ErrUnsupported }
func allocateHoles(*os.File, int64) error       { return ErrUnsupported }
func mapFile(*os.File, bool) (mmap.MMap, error) { return nil, ErrUnsupported }
func syncRange([]byte) error                    { return ErrUnsupported }
func syncFile(*os.File) error                   { return ErrUnsupported }

func processStart(int) uint64       { return 0 }
func processAlive(int, uint64) bool { return true }
