package server

import (
	"fmt"
	"os"
	"testing"

	"github.com/sluicehq/sluice/internal/hugepagetest"
	"github.com/sluicehq/sluice/proto"
	"golang.org/x/sys/unix"
)

// Ensure the socket's mode is what was asked even under a permissive umask.
func TestServer_socketModeUnderUmask(t *testing.T) {
	old := unix.Umask(0)
	defer unix.Umask(old)
	sc := start(t, Config{})
	for _, p := range []string{sc.cfg.SocketPath, sc.cfg.RESPSocket} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != DefaultSocketMode {
			t.Errorf("%s: mode %v %v, want %v", p, fi.Mode().Perm(), err, os.FileMode(DefaultSocketMode))
		}
	}
}

// Ensure Config.HugePages (sluiced --huge-pages) maps the state file with
// huge pages once its buckets are used, and that without it the file gets
// none, wherever the kernel backs an advised file mapping with them (a
// probe file says; elsewhere the test is skipped).
func TestServer_hugePages(t *testing.T) {
	if !hugepagetest.Supported(t, shortDir(t)) {
		t.Skip("this kernel maps no file of this file system with huge pages")
	}
	for _, huge := range []bool{true, false} {
		t.Run(fmt.Sprintf("huge=%v", huge), func(t *testing.T) {
			sc := start(t, Config{HugePages: huge, Slots: 200_000, SlotSize: 64}) // 12.8 MB of slots
			c := dial(t, sc)
			for i := range 2000 { // about one bucket on each 4 KiB page
				if r := c.acquire(fmt.Sprint("k", i), tb10, 1, 0); r.Status != proto.StatusOK {
					t.Fatalf("acquire: %+v", r)
				}
			}
			got := hugepagetest.Mapped(t, sc.cfg.StatePath)
			t.Logf("%d KiB of the state file mapped with huge pages", got>>10)
			switch {
			case huge && got == 0:
				t.Errorf("--huge-pages: no huge pages")
			case !huge && got != 0 && !hugepagetest.Always():
				t.Errorf("without --huge-pages: %d KiB mapped with huge pages", got>>10)
			}
		})
	}
}
