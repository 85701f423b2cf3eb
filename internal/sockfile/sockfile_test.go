package sockfile

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Ensure the rules: the mode whatever the umask, a live socket of sluiced
// (the lock held) or of another program (it answers) left alone, a stale
// one replaced, anything else at the path left alone, a directory writable
// by every user and a path too long for sun_path refused, and Remove
// removing only the file it bound.
func TestListen_rules(t *testing.T) {
	dir := t.TempDir() // 0700, made before the umask changes
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	path := filepath.Join(dir, "s")
	ln, err := Listen(path, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o640 {
		t.Fatalf("under umask 000: %v %v, want a socket of mode 0640", fi.Mode(), err)
	}
	if _, err := Listen(path, 0o640); !errors.Is(err, ErrInUse) {
		t.Errorf("a second Listen while the first holds the lock: %v", err)
	}
	ln.Close()
	ln.Remove()
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Remove left the file: %v", err)
	}

	other, err := net.Listen("unix", path) // another program's live socket, no lock
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(path, 0o640); !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "not sluiced's") {
		t.Errorf("on another program's live socket: %v", err)
	}
	if c, err := net.Dial("unix", path); err != nil {
		t.Errorf("the other program's socket was harmed: %v", err)
	} else {
		c.Close()
	}
	other.(*net.UnixListener).SetUnlinkOnClose(false)
	other.Close() // now stale
	ln, err = Listen(path, 0o640)
	if err != nil {
		t.Fatalf("on a stale socket: %v", err)
	}
	ln.Close()
	// Another instance replaced the file since: Remove leaves it.
	os.Remove(path)
	os.WriteFile(path, []byte("keep"), 0o600)
	ln.Remove()
	if b, _ := os.ReadFile(path); string(b) != "keep" {
		t.Error("Remove removed a file it did not bind")
	}
	if _, err := Listen(path, 0o640); !errors.Is(err, ErrPath) {
		t.Errorf("a regular file at the path: %v", err)
	}

	open := filepath.Join(dir, "open")
	os.Mkdir(open, 0o777)
	if _, err := Listen(filepath.Join(open, "s"), 0o640); !errors.Is(err, ErrPath) || !strings.Contains(err.Error(), "writable by every user") {
		t.Errorf("in a directory writable by every user: %v", err)
	}
	if _, err := Listen(filepath.Join(dir, strings.Repeat("x", MaxPath)), 0o640); !errors.Is(err, ErrPath) {
		t.Errorf("a path too long: %v", err)
	}
}
