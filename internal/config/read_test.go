package config

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// within runs f and fails the test if it has not returned after d: what
// it checks must never wait (a generous bound, for a busy host).
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not return within %v", what, d)
	}
}

// Ensure only a regular file is read: a FIFO at the path (which a plain
// open waits on for a writer, forever), a directory, a device and a socket
// are refused at once with what they are, by Load and by a reload, which
// keeps the config in force; so is a file above MaxFileSize.
func TestRead_regularFilesOnly(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	device := filepath.Join(dir, "device.yaml")
	if err := os.Symlink("/dev/null", device); err != nil { // a ConfigMap-style symlink to a device
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, make([]byte, MaxFileSize+1), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, want string }{
		{fifo, "not a regular file (it is a FIFO)"},
		{dir, "not a regular file (it is a directory)"},
		{device, "not a regular file (it is a device)"},
		{big, "config file too large"},
	} {
		within(t, 10*time.Second, "Load of "+c.want, func() {
			if _, err := Load(c.path); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Load(%s): %v, want %q", c.path, err, c.want)
			}
		})
	}

	path, h := loaded(t, dir, validFile(3))
	w := &Watcher{Path: path, Holder: h, Interval: -1}
	os.Remove(path)
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
	within(t, 10*time.Second, "a reload of a FIFO", func() {
		if err := w.Reload(t.Context()); !errors.Is(err, ErrNotRegular) {
			t.Errorf("reload of a FIFO: %v", err)
		}
	})
	write(t, path, validFile(9))
	within(t, 10*time.Second, "a reload of the file that replaced the FIFO", func() {
		if err := w.Reload(t.Context()); err != nil {
			t.Error(err)
		}
	})
	if l, _ := w.Holder.Load().Lookup("login"); l.Bucket.Max != 9 {
		t.Errorf("after the FIFO was replaced: login max %d, want 9", l.Bucket.Max)
	}
}

// Ensure a read that does not return (a file system that stopped
// answering) never holds up a reload past ReadTimeout, never piles up
// reads, and never holds up Run or Reload once their context is done; the
// config stays in force throughout, and the next read that answers loads.
func TestRead_stuck(t *testing.T) {
	path, h := loaded(t, t.TempDir(), validFile(3))
	unblock := make(chan struct{})
	calls := make(chan struct{}, 10)
	var stuck atomic.Bool
	stuck.Store(true)
	w := &Watcher{Path: path, Holder: h, Interval: time.Millisecond, ReadTimeout: 50 * time.Millisecond,
		read: func(p string) ([]byte, error) {
			calls <- struct{}{}
			if stuck.Load() {
				<-unblock
			}
			return readFile(p)
		}}
	within(t, 10*time.Second, "a reload of a stuck file", func() {
		if err := w.Reload(t.Context()); !errors.Is(err, ErrReadTimeout) || !strings.Contains(err.Error(), "within 50ms") {
			t.Errorf("reload: %v", err)
		}
	})
	within(t, 10*time.Second, "a second reload", func() {
		if err := w.Reload(t.Context()); !errors.Is(err, ErrReadTimeout) || !strings.Contains(err.Error(), "an earlier read has not returned") {
			t.Errorf("second reload: %v", err)
		}
	})
	if len(calls) != 1 {
		t.Errorf("%d reads started, want 1: a stuck read is not started again", len(calls))
	}
	// Run and a reload waiting for its turn return as soon as their
	// context is done, while the read is still stuck.
	w.ReadTimeout = time.Hour
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	reloaded := make(chan error, 1)
	go func() { reloaded <- w.Reload(ctx) }()
	cancel()
	within(t, 10*time.Second, "Run after its context was cancelled", func() {
		if err := <-ran; err != nil {
			t.Error(err)
		}
	})
	within(t, 10*time.Second, "a reload after its context was cancelled", func() {
		if err := <-reloaded; err == nil {
			t.Error("a cancelled reload reported success")
		}
	})
	if l, _ := w.Holder.Load().Lookup("login"); l.Bucket.Max != 3 {
		t.Fatalf("login max %d, want 3: the config in force changed", l.Bucket.Max)
	}
	stuck.Store(false)
	write(t, path, validFile(5))
	close(unblock)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		err := w.Reload(t.Context())
		if err == nil {
			break
		}
		if !errors.Is(err, ErrReadTimeout) || time.Now().After(deadline) {
			t.Fatalf("reload once the file system answers: %v", err)
		}
	}
	if l, _ := w.Holder.Load().Lookup("login"); l.Bucket.Max != 5 {
		t.Fatalf("login max %d, want 5", l.Bucket.Max)
	}
}
