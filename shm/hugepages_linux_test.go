package shm

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/internal/hugepagetest"
)

// Ensure a table created or opened with HugePages has its mapping backed by
// huge pages once its slots are used, and one without does not, wherever
// the kernel backs an advised shared file mapping with huge pages: a probe
// mapping of a scratch file beside the table says whether it does (THP
// off, an older kernel or another file system: skipped).
func TestHugePages(t *testing.T) {
	dir := t.TempDir()
	if !hugepagetest.Supported(t, dir) {
		t.Skip("this kernel maps no file of this file system with huge pages")
	}
	always := hugepagetest.Always()  // every mapping gets them
	o := Options{SlotCount: 200_000} // 12.8 MB of slots: several huge pages
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
			created := hugepagetest.Mapped(t, path)
			if err := tb.Close(); err != nil {
				t.Fatal(err)
			}
			// Open maps the pages Create's table left in the page cache.
			if tb, err = OpenWith(path, Options{HugePages: huge}); err != nil {
				t.Fatal(err)
			}
			defer tb.Close()
			touch(tb)
			opened := hugepagetest.Mapped(t, path)
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
