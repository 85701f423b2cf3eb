//go:build linux

package shm

import (
	"bytes"
	"errors"
	"os"
	"strconv"

	"github.com/edsrzf/mmap-go"
	"golang.org/x/sys/unix"
)

// This file holds every syscall of the package.

// openNoFollow opens an existing file for reading and writing without
// following a symbolic link in its last component.
func openNoFollow(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, ErrNotRegular
		}
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// lockFile takes the exclusive owner lock of f without waiting.
func lockFile(f *os.File) error {
	err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return ErrLocked
	}
	return err
}

// allocate reserves size bytes of disk for f so that later writes through the
// mapping cannot fail for lack of space (which would raise SIGBUS). Where the
// file system cannot fallocate, it writes zeros instead.
func allocate(f *os.File, size int64) error {
	err := unix.Fallocate(int(f.Fd()), 0, 0, size)
	if err == nil || !errors.Is(err, unix.EOPNOTSUPP) {
		return err
	}
	zeros := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(zeros)) {
		n := min(int64(len(zeros)), size-off)
		if _, err := f.WriteAt(zeros[:n], off); err != nil {
			return err
		}
	}
	return nil
}

// allocateHoles makes sure every block of f's first size bytes is allocated
// on disk, so that no write through the mapping can fail for lack of space
// (SIGBUS): a state file copied sparse, or left sparse by other tools. It
// never changes the file's contents: fallocate (mode 0) allocates holes and
// leaves data alone; where the file system cannot fallocate, it writes zeros
// into the holes that SEEK_HOLE finds (holes read as zeros).
func allocateHoles(f *os.File, size int64) error {
	fd := int(f.Fd())
	err := unix.Fallocate(fd, 0, 0, size)
	if err == nil || !errors.Is(err, unix.EOPNOTSUPP) {
		return err
	}
	var zeros []byte
	for off := int64(0); off < size; {
		hole, err := unix.Seek(fd, off, unix.SEEK_HOLE)
		if err != nil || hole >= size {
			return err // no holes left (or SEEK_HOLE unsupported: no holes known)
		}
		data, err := unix.Seek(fd, hole, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			data, err = size, nil // a hole to the end
		}
		if err != nil {
			return err
		}
		if zeros == nil {
			zeros = make([]byte, 1<<20)
		}
		for off = hole; off < min(data, size); {
			n, err := f.WriteAt(zeros[:min(int64(len(zeros)), min(data, size)-off)], off)
			if err != nil {
				return err
			}
			off += int64(n)
		}
	}
	return nil
}

// mapFile maps the whole of f shared, for reading and writing, asking for
// huge pages if huge (Options.HugePages).
func mapFile(f *os.File, huge bool) (mmap.MMap, error) {
	m, err := mmap.Map(f, mmap.RDWR, 0)
	if err != nil {
		return nil, err
	}
	// Access is random: disable read-ahead.
	_ = unix.Madvise(m, unix.MADV_RANDOM)
	if huge {
		// Advice: a kernel without transparent huge pages refuses it
		// (EINVAL), and the table works the same with small pages.
		_ = unix.Madvise(m, unix.MADV_HUGEPAGE)
	}
	return m, nil
}

// syncRange writes b, a page-aligned part of a mapping, to disk and waits.
// It is a variable so tests can make syncs fail.
var syncRange = func(b []byte) error { return unix.Msync(b, unix.MS_SYNC) }

// syncFile flushes f's data and metadata.
func syncFile(f *os.File) error { return f.Sync() }

// processStart returns the start time of process pid (field 22 of
// /proc/PID/stat, in clock ticks since boot), or 0 if it cannot be read.
func processStart(pid int) uint64 {
	_, start, ok := procStat(pid)
	if !ok {
		return 0
	}
	return start
}

// processAlive reports whether process pid exists, is not a zombie, and,
// if started is not 0, started at that time (so a reused pid does not count).
func processAlive(pid int, started uint64) bool {
	state, start, ok := procStat(pid)
	if !ok {
		return !errors.Is(unix.Kill(pid, 0), unix.ESRCH) // no /proc: ask the kernel
	}
	return state != 'Z' && state != 'X' && (started == 0 || start == started)
}

// procStat reads the state (field 3) and start time (field 22) of process
// pid from /proc/PID/stat.
func procStat(pid int) (state byte, start uint64, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, 0, false
	}
	f := bytes.Fields(b[i+2:]) // from field 3 on
	if len(f) < 20 {
		return 0, 0, false
	}
	start, err = strconv.ParseUint(string(f[19]), 10, 64)
	return f[0][0], start, err == nil
}
