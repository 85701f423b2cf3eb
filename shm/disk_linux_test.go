package shm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
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
		_, err := Create(filepath.Join(dir, "state"), Options{SlotCount: 100_000}, 0) // 6.4 MB
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

// Ensure a sparse state file on a full file system fails at Open, with an
// error, never later with SIGBUS when a page of the mapping is first
// written (a valid file copied sparse, then the disk filled up). The test
// binary re-executes itself in a mount namespace of its own, on a small
// tmpfs it fills.
func TestOpen_sparseOnFullDisk(t *testing.T) {
	if dir := os.Getenv("SHM_TEST_SPARSE_FULL"); dir != "" {
		sparseOnFullDisk(t, dir)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	tb, path := newFile(t, Options{SlotCount: 16384}) // 1 MiB
	for i := range 20 {
		put(t, tb, fmt.Sprintf("k%d", i), int64(i), math.MaxInt64, 0)
	}
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestOpen_sparseOnFullDisk$", "-test.v")
	cmd.Env = append(os.Environ(), "SHM_TEST_SPARSE_FULL="+path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("refused: ")) {
		t.Fatalf("child did not report the refusal:\n%s", out)
	}
}

// sparseOnFullDisk runs in the child: it copies the file at src, sparse,
// onto a tmpfs of its own, fills the tmpfs, and opens the copy.
func sparseOnFullDisk(t *testing.T, src string) {
	img, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", len(img)/2)); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	defer unix.Unmount(dir, 0)
	path := filepath.Join(dir, "state")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(img); off += 4096 { // only the pages that hold something
		if page := img[off : off+4096]; !allZero(page) {
			if _, err := f.WriteAt(page, int64(off)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := f.Truncate(int64(len(img))); err != nil {
		t.Fatal(err)
	}
	f.Close()
	filler, _ := os.Create(filepath.Join(dir, "filler"))
	for {
		if _, err := filler.Write(make([]byte, 4096)); err != nil {
			break // ENOSPC: the disk is full
		}
	}
	filler.Close()
	tb, err := Open(path)
	if err == nil {
		// Without the check this writes into holes of a full disk: SIGBUS.
		for i := range 15000 {
			if s, _, err := tb.LookupOrInsert(fp(tb, fmt.Sprintf("n%d", i)), 1, nil, 0, nil); err == nil {
				s.Commit(math.MaxInt64)
			}
		}
		t.Fatalf("Open of a sparse file on a full disk succeeded")
	}
	if !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("Open: %v, want ENOSPC", err)
	}
	t.Logf("refused: %v", err)
}
