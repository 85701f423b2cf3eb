package shm

import (
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Ensure a disk too small for the table fails at creation, with an error and
// no file left behind, never later with SIGBUS: the space is allocated up
// front. The disk is made "full" with RLIMIT_FSIZE in a child process (the
// test binary, re-executed), so nothing else is affected.
func TestCreate_diskFull(t *testing.T) {
	if dir := os.Getenv("SHM_TEST_DISK_FULL"); dir != "" {
		signal.Ignore(syscall.SIGXFSZ) // get EFBIG instead of the signal
		lim := unix.Rlimit{Cur: 1 << 20, Max: 1 << 20}
		if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &lim); err != nil {
			t.Fatal(err)
		}
		_, err := Create(filepath.Join(dir, "state"), Options{SlotCount: 100_000}) // 6.4 MB
		if err == nil {
			t.Fatal("Create succeeded on a full disk")
		}
		t.Log(err)
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCreate_diskFull$", "-test.v")
	cmd.Env = append(os.Environ(), "SHM_TEST_DISK_FULL="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("a failed Create left %d files behind", len(ents))
	}
}

// Ensure a failed sync is an error and counted, and that a table whose last
// sync failed is not marked clean: the next open scans it.
func TestSync_failure(t *testing.T) {
	tb, path := newFile(t, Options{SlotCount: 16})
	put(t, tb, "k", 1, 1<<62, 0)
	real := syncRange
	syncRange = func([]byte) error { return unix.EIO }
	defer func() { syncRange = real }()
	if err := tb.Sync(); !errors.Is(err, unix.EIO) {
		t.Errorf("Sync: %v, want EIO", err)
	}
	if st := tb.Stats(); st.SyncErrors != 1 || st.Syncs != 0 {
		t.Errorf("stats %+v", st)
	}
	if err := tb.Close(); err == nil {
		t.Errorf("Close after a failed final sync returned nil")
	}
	syncRange = real
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if flag := binary.LittleEndian.Uint32(b[offCleanFlag:]); flag == cleanMagic {
		t.Errorf("file marked clean although its last sync failed")
	}
}
