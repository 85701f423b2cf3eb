package sluice

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// rawIO reads and writes a Unix socket's descriptor with raw system calls
// (the descriptor is non-blocking, so they never block), through the
// connection's poller, which waits for readiness and keeps the deadlines.
// A system call through the Go runtime's usual path wakes its monitor
// thread when the process was idle: a client whose goroutines all wait
// for the sidecar is idle before every round trip, and that wake-up cost
// more than the write.
type rawIO struct {
	rc syscall.RawConn
	// The reading role's and the writing role's calls, which run at once:
	// the buffer, what was done and the error.
	rd, wr          rawCall
	readFn, writeFn func(fd uintptr) bool
}

// rawCall is a read's or a write's arguments and results.
type rawCall struct {
	buf   []byte
	n     int
	errno syscall.Errno
}

// newRawIO returns the raw reads and writes of nc, or nil if nc has no
// descriptor (a connection a test made, say).
func newRawIO(nc net.Conn) *rawIO {
	sc, ok := nc.(*net.UnixConn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	r := &rawIO{rc: rc}
	r.readFn = func(fd uintptr) bool {
		c := &r.rd
		for {
			n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&c.buf[0])), uintptr(len(c.buf)))
			switch e {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false // wait until it is readable
			}
			c.n, c.errno = int(n), e
			return true
		}
	}
	r.writeFn = func(fd uintptr) bool {
		c := &r.wr
		for c.n < len(c.buf) {
			n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&c.buf[c.n])), uintptr(len(c.buf)-c.n))
			switch e {
			case 0:
				c.n += int(n)
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false // wait until it is writable
			default:
				c.errno = e
				return true
			}
		}
		return true
	}
	return r
}

// read reads into b as net.Conn's Read does. The caller holds the reading
// role.
func (r *rawIO) read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	r.rd = rawCall{buf: b}
	err := r.rc.Read(r.readFn)
	n, errno := r.rd.n, r.rd.errno
	r.rd.buf = nil
	switch {
	case err != nil:
		return 0, err
	case errno != 0:
		return 0, os.NewSyscallError("read", errno)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// write writes all of b, as net.Conn's Write does. The caller holds the
// writing role.
func (r *rawIO) write(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	r.wr = rawCall{buf: b}
	err := r.rc.Write(r.writeFn)
	errno := r.wr.errno
	r.wr.buf = nil
	switch {
	case err != nil:
		return err
	case errno != 0:
		return os.NewSyscallError("write", errno)
	}
	return nil
}
