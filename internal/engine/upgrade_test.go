package engine

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/shm"
)

// The files in testdata were written by the first release (state file
// format version 1): a table of 64 slots of 128 bytes holding three buckets
// of each limit below, created at t0 with costs 1 to 4; v1-clean.state was
// closed cleanly, v1-dirty.state copied while its owner still had it open.
var fixtureLimits = []bucket.Limit{
	{Algorithm: bucket.TokenBucket, Max: 5, RefillTime: 3600e9, RefillAmount: 1},
	{Algorithm: bucket.GCRA, Burst: 4, Count: 1, Period: 1e9},
	{Algorithm: bucket.FixedWindow, Max: 10, Window: 60e9},
	{Algorithm: bucket.SlidingWindow, Max: 10, Window: 60e9},
	{Algorithm: bucket.Pacer, Count: 4, Period: 1e9, MaxDelay: 2e9},
}

// fixtureOps replays on e what the first release did to the fixtures.
func fixtureOps(t *testing.T, e *Engine) {
	for i, b := range fixtureLimits {
		for k := range 3 {
			if _, err := acquire(e, fixtureKey(b, k), lim(b), int64(k+i%2+1), t0, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func fixtureKey(b bucket.Limit, k int) []byte { return fmt.Appendf(nil, "%s-%d", b.Algorithm, k) }

// Ensure a state file written by the first release opens, is upgraded in
// place to the current format, and keeps every bucket: each answers as the
// same bucket built by this release does.
func TestUpgrade_version1(t *testing.T) {
	model := newEngine(t, 64)
	fixtureOps(t, model)
	for _, name := range []string{"v1-clean.state", "v1-dirty.state"} {
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", name))
			if err != nil {
				t.Fatal(err)
			}
			if v := binary.LittleEndian.Uint32(b[8:]); v != 1 {
				t.Fatalf("fixture has version %d", v)
			}
			path := filepath.Join(t.TempDir(), name)
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			tb, err := shm.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			if o := tb.Opened(); o.UpgradedFrom != 1 || o.Torn != 0 || o.Dropped != 0 {
				t.Errorf("opened: %+v, want upgraded from 1, nothing torn or dropped", o)
			}
			if h, ok := tb.HighTime(); h != 0 || !ok {
				t.Errorf("HighTime = %d, %v: the unchecksummed version-1 high time must be dropped", h, ok)
			}
			e := New(tb)
			for _, at := range []int64{t0, t0 + 500e6, t0 + 30*sec, t0 + 2*3600*sec} {
				for _, bl := range fixtureLimits {
					for k := range 3 {
						got, _ := peek(e, fixtureKey(bl, k), lim(bl), at)
						want, _ := peek(model, fixtureKey(bl, k), lim(bl), at)
						if got != want {
							t.Errorf("%s at t0%+d: %+v, want %+v", fixtureKey(bl, k), at-t0, got, want)
						}
					}
				}
			}
			if err := tb.Verify(); err != nil {
				t.Error(err)
			}
			if err := tb.Close(); err != nil {
				t.Fatal(err)
			}
			b, _ = os.ReadFile(path)
			if v := binary.LittleEndian.Uint32(b[8:]); v != shm.FormatVersion {
				t.Errorf("version on disk after the upgrade: %d", v)
			}
			tb, err = shm.Open(path) // and it opens again, as a current file
			if err != nil {
				t.Fatal(err)
			}
			if o := tb.Opened(); o.UpgradedFrom != 0 || o.Recovered {
				t.Errorf("second open: %+v", o)
			}
			tb.Close()
		})
	}
}

// Ensure an upgrade interrupted between writing the new version and the
// header checksum is redone, not refused.
func TestUpgrade_interrupted(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "v1-clean.state"))
	if err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint32(b[8:], 2) // the first step's version written, not yet its checksum
	path := filepath.Join(t.TempDir(), "state")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	tb, err := shm.Open(path)
	if err != nil {
		t.Fatalf("an interrupted upgrade was refused: %v", err)
	}
	defer tb.Close()
	if o := tb.Opened(); o.UpgradedFrom != 1 {
		t.Errorf("opened: %+v, want upgraded from 1", o)
	}
	if err := tb.Verify(); err != nil {
		t.Error(err)
	}
}
