//go:build unix

package global

import (
	"os"
	"syscall"
)

// mapFile maps the first size bytes of f, shared: a store is in the page
// cache, where the next process finds it, as soon as it is made.
func mapFile(f *os.File, size int) ([]byte, error) {
	return syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
}

func unmapFile(b []byte) error { return syscall.Munmap(b) }
