//go:build linux

package sockfile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// Ensure the instance lock stays exclusive although its holder removes the
// lock file at a clean stop: a process that opened the file before it was
// removed gets a lock on a file no longer at the path (flock succeeds on
// it), sees so, and a lock taken afresh is the only one on the path.
func TestLockInstance_removedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sock.lock")
	a, err := lockInstance(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockInstance(path); !errors.Is(err, ErrInUse) {
		t.Fatalf("a second lock while the first is held: %v", err)
	}
	late, err := os.OpenFile(path, os.O_RDWR, 0) // opened before the holder removes the file
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	unlock(a)
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the lock file is still there after unlock: %v", err)
	}
	if err := unix.Flock(int(late.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	if stillAt(late, path) {
		t.Fatal("a lock on the removed file counts as the lock on the path")
	}
	b, err := lockInstance(path)
	if err != nil {
		t.Fatalf("a lock after the holder left: %v", err)
	}
	defer unlock(b)
	if !stillAt(b, path) {
		t.Error("the new lock is not on the file at the path")
	}
}
