package shm

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Ensure a table created or opened with HugePages has its mapping backed by
// huge pages once its slots are used, and one without does not, wherever
// the kernel backs an advised shared file mapping with huge pages: a probe
// mapping of a scratch file beside the table says whether it does (THP
// off, an older kernel or another file system: skipped).
func TestHugePages(t *testing.T) {
	dir := t.TempDir()
	if !hugePagesProbe(t, filepath.Join(dir, "probe")) {
		t.Skip("this kernel maps no file of this file system with huge pages")
	}
	thp, _ := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	always := bytes.Contains(thp, []byte("[always]")) // every mapping gets them
	o := Options{SlotCount: 200_000}                  // 12.8 MB of slots: several huge pages
	touch := func(tb *Table) {
		for i := uint64(0); i < tb.n; i += 64 { // a slot on each 4 KiB page
			tb.LockIndex(i, nil)
			unlockWord(u32at(tb.slotPtr(i), slotLock))
		}
	}
	for _, huge := range []bool{true, false} {
		t.Run(fmt.Sprintf("huge=%v", huge), func(t *testing.T) {
			path := filepath.Join(dir, fmt.Sprint(huge))
			o.HugePages = huge
			tb, err := Create(path, o, 0)
			if err != nil {
				t.Fatal(err)
			}
			touch(tb)
			created := pmdMapped(t, tb.base)
			if err := tb.Close(); err != nil {
				t.Fatal(err)
			}
			// Open maps the pages Create's table left in the page cache.
			if tb, err = OpenWith(path, Options{HugePages: huge}); err != nil {
				t.Fatal(err)
			}
			defer tb.Close()
			touch(tb)
			opened := pmdMapped(t, tb.base)
			t.Logf("huge-page-mapped: %d KiB created, %d KiB opened", created>>10, opened>>10)
			switch {
			case huge && (created == 0 || opened == 0):
				t.Errorf("the table asked for huge pages and got none")
			case !huge && !always && (created != 0 || opened != 0):
				t.Errorf("the table did not ask for huge pages and got some")
			}
		})
	}
}

// hugePagesProbe reports whether the kernel backs a shared mapping of a
// file at path, advised MADV_HUGEPAGE and written, with huge pages.
func hugePagesProbe(t *testing.T, path string) bool {
	const size = 8 << 20
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
		t.Skipf("fallocate: %v", err)
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
	return pmdMapped(t, unsafe.Pointer(&m[0])) > 0
}

// pmdMapped returns the bytes of the mapping that starts at base that the
// process maps with huge pages (FilePmdMapped in /proc/self/smaps).
func pmdMapped(t *testing.T, base unsafe.Pointer) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skipf("smaps: %v", err)
	}
	defer f.Close()
	start := strconv.FormatUint(uint64(uintptr(base)), 16) + "-"
	in := false
	for sc := bufio.NewScanner(f); sc.Scan(); {
		line := sc.Text()
		if fields := strings.Fields(line); len(fields) > 0 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			in = strings.HasPrefix(line, start)
			continue
		}
		if v, ok := strings.CutPrefix(line, "FilePmdMapped:"); ok && in {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("smaps: %q: %v", line, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("smaps: no mapping at %p", base)
	return 0
}
