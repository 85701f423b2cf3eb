package config

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync/atomic"
	"syscall"
	"time"
)

// Reading the file. A reload must never wait on something other than a
// file: the path is opened without blocking (a FIFO opened for reading
// would wait for a writer forever), the opened descriptor is checked to be
// a regular file, at most MaxFileSize bytes are read, and the whole read has
// DefaultReadTimeout: a read that does not return (a file system that stopped
// answering) is abandoned, and the previous config stays.

// DefaultReadTimeout is how long one read of the config file may take
// before the reload gives up on it.
const DefaultReadTimeout = 5 * time.Second

// readFile reads the regular file at path, refusing anything else (a FIFO,
// a device, a socket, a directory) without reading or waiting on it, and
// files larger than MaxFileSize.
func readFile(path string) ([]byte, error) {
	// O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
	// writer. It changes nothing for a regular file.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat() // the file opened, whatever the path names now
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, notRegular(path, fi.Mode())
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("%s: %w: more than %d bytes", path, ErrTooLarge, MaxFileSize)
	}
	return data, nil
}

func notRegular(path string, m fs.FileMode) error {
	what := "not a regular file"
	switch t := m.Type(); {
	case t&fs.ModeNamedPipe != 0:
		what = "a FIFO"
	case t&fs.ModeDir != 0:
		what = "a directory"
	case t&fs.ModeSocket != 0:
		what = "a socket"
	case t&fs.ModeDevice != 0:
		what = "a device"
	}
	return fmt.Errorf("%s: %w (it is %s)", path, ErrNotRegular, what)
}

// readWithin runs read(path) and waits at most timeout (0: DefaultReadTimeout)
// for it, or until ctx is done. A read that does not return in time is
// left to finish on its own goroutine; busy, if not nil, is set while one
// runs, so that reads of a file system that stopped answering do not pile
// up: while it is set, readWithin fails at once.
func readWithin(ctx context.Context, path string, timeout time.Duration, busy *atomic.Bool, read func(string) ([]byte, error)) ([]byte, error) {
	if timeout <= 0 {
		timeout = DefaultReadTimeout
	}
	if busy != nil && !busy.CompareAndSwap(false, true) {
		return nil, fmt.Errorf("%s: %w (an earlier read has not returned)", path, ErrReadTimeout)
	}
	type result struct {
		data []byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		data, err := read(path)
		if busy != nil {
			busy.Store(false)
		}
		done <- result{data, err}
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-done:
		return r.data, r.err
	case <-t.C:
		return nil, fmt.Errorf("%s: %w within %v", path, ErrReadTimeout, timeout)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
