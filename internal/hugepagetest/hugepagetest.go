//go:build linux

// Package hugepagetest tells tests whether this kernel maps a file with
// huge pages, and how much of a file the test process maps with them
// (and has resident).
package hugepagetest

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Supported reports whether the kernel backs a shared mapping of a file in
// dir, advised MADV_HUGEPAGE and written, with huge pages (transparent huge
// pages on, and a file system that caches files in large folios).
func Supported(t testing.TB, dir string) bool {
	t.Helper()
	const size = 8 << 20
	path := filepath.Join(dir, "hugepage-probe")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(path)
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
		return false
	}
	m, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	if err := unix.Madvise(m, unix.MADV_HUGEPAGE); err != nil {
		return false
	}
	for i := 0; i < size; i += 4096 {
		m[i] = 1
	}
	return Mapped(t, path) > 0
}

// Always reports whether transparent huge pages are on for every mapping,
// advised or not.
func Always() bool {
	b, _ := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	return strings.Contains(string(b), "[always]")
}

// Mapped returns the bytes of the file at path that this process maps with
// huge pages (FilePmdMapped of its mappings in /proc/self/smaps; see Usage).
func Mapped(t testing.TB, path string) int64 {
	t.Helper()
	_, huge := Usage(t, path)
	return huge
}

// Usage returns the bytes of the file at path that this process has
// resident (Rss) and maps with huge pages (FilePmdMapped), over its
// mappings in /proc/self/smaps. The file is found by its inode, since a
// mapping may name it by another link (a file created under a temporary
// name).
func Usage(t testing.TB, path string) (rss, huge int64) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	ino := strconv.FormatUint(st.Ino, 10)
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skipf("smaps: %v", err)
	}
	defer f.Close()
	in := false
	for sc := bufio.NewScanner(f); sc.Scan(); {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) > 0 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			in = len(fields) >= 5 && fields[4] == ino
			continue
		}
		if !in || len(fields) < 2 {
			continue
		}
		var total *int64
		switch fields[0] {
		case "Rss:":
			total = &rss
		case "FilePmdMapped:":
			total = &huge
		default:
			continue
		}
		kb, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			t.Fatalf("smaps: %q: %v", line, err)
		}
		*total += kb << 10
	}
	return rss, huge
}
