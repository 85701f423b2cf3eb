package engine

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/shm"
)

// The files in testdata were written by earlier releases: v1-* by the first
// (state file format version 1), v4-* by the last release of format version
// 4, the one before the arena, v5-* by the last release of format version
// 5, the one whose holders registry had 64 entries, v6-* by the last
// release of format version 6, the one before the tags. Each is a table of
// 64 slots of 128 bytes holding three buckets of each limit below (v5-* and
// v6-*: and of each of fixtureExtLimits, in the arena), created at t0 with
// costs 1 to 4; *-clean.state was closed cleanly, *-dirty.state copied while its owner
// still had it open.
var fixtureLimits = []bucket.Limit{
	{Algorithm: bucket.TokenBucket, Max: 5, RefillTime: 3600e9, RefillAmount: 1},
	{Algorithm: bucket.GCRA, Burst: 4, Count: 1, Period: 1e9},
	{Algorithm: bucket.FixedWindow, Max: 10, Window: 60e9},
	{Algorithm: bucket.SlidingWindow, Max: 10, Window: 60e9},
	{Algorithm: bucket.Pacer, Count: 4, Period: 1e9, MaxDelay: 2e9},
}

// fixtureOps replays on e what the first release did to the fixtures.
func fixtureOps(t *testing.T, e *Engine) { replay(t, e, fixtureLimits) }

// replay takes from three buckets of each of limits, with costs 1 to 4, at
// t0.
func replay(t *testing.T, e *Engine, limits []bucket.Limit) {
	for i, b := range limits {
		for k := range 3 {
			if _, err := acquire(e, fixtureKey(b, k), lim(b), int64(k+i%2+1), t0, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// fixtureExtLimits are the extended algorithms of the v5-* fixtures.
var fixtureExtLimits = []bucket.Limit{
	{Algorithm: bucket.SlidingLog, Max: 5, Window: 60e9},
	{Algorithm: bucket.WindowCounters, Max: 10, Window: 60e9, Counters: 6},
}

// fixtureExtOps replays on e what the last release of version 5 did to
// the v5-* fixtures besides fixtureOps.
func fixtureExtOps(t *testing.T, e *Engine) { replay(t, e, fixtureExtLimits) }

func fixtureKey(b bucket.Limit, k int) []byte { return fmt.Appendf(nil, "%s-%d", b.Algorithm, k) }

// sameBuckets reports every bucket of limits that e answers otherwise than
// model at the given times.
func sameBuckets(t *testing.T, e, model *Engine, limits []bucket.Limit, at ...int64) {
	t.Helper()
	for _, at := range at {
		for _, bl := range limits {
			for k := range 3 {
				got, _ := peek(e, fixtureKey(bl, k), lim(bl), at)
				want, _ := peek(model, fixtureKey(bl, k), lim(bl), at)
				if got != want {
					t.Errorf("%s at t0%+d: %+v, want %+v", fixtureKey(bl, k), at-t0, got, want)
				}
			}
		}
	}
}

// Ensure a state file written by an earlier release opens, is upgraded in
// place to the current format, and keeps every bucket: each answers as the
// same bucket built by this release does. From version 4 the file grows an
// arena, in which the new bucket of an algorithm that keeps a block fits;
// from version 5 a holders registry of shm.NumHolders entries, of which
// the new owner is the only one taken (the version-5 fixture's dirty copy
// had its owner registered in the old registry).
func TestUpgrade(t *testing.T) {
	model := newEngine(t, 64)
	fixtureOps(t, model)
	fixtureExtOps(t, model)
	for _, fx := range []struct {
		name    string
		version uint32
	}{
		{"v1-clean.state", 1}, {"v1-dirty.state", 1}, {"v4-clean.state", 4}, {"v4-dirty.state", 4},
		{"v5-clean.state", 5}, {"v5-dirty.state", 5}, {"v6-clean.state", 6}, {"v6-dirty.state", 6},
	} {
		name := fx.name
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", name))
			if err != nil {
				t.Fatal(err)
			}
			if v := binary.LittleEndian.Uint32(b[8:]); v != fx.version {
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
			if o := tb.Opened(); o.UpgradedFrom != fx.version || o.Torn != 0 || o.Dropped != 0 {
				t.Errorf("opened: %+v, want upgraded from %d, nothing torn or dropped", o, fx.version)
			}
			// The slots (rounded up to a page), the arena's bitmap page and
			// cells, the holders registry, the tags' page.
			if g := tb.Geometry(); g.ArenaCells != shm.DefaultArenaCells(64) || g.FileSize != int64(12288+4096+1024*64+0x14000+4096) {
				t.Errorf("geometry after the upgrade: %+v", g)
			}
			if h, ok := tb.HighTime(); h != 0 || !ok {
				t.Errorf("HighTime = %d, %v: the unchecksummed version-1 high time must be dropped", h, ok)
			}
			if h := tb.Holders(); len(h) != 1 || h[0] != os.Getpid() {
				t.Errorf("holders after the upgrade: %v, want this process alone", h)
			}
			e := New(tb)
			at := []int64{t0, t0 + 500e6, t0 + 30*sec, t0 + 2*3600*sec}
			sameBuckets(t, e, model, fixtureLimits, at...)
			if fx.version >= 5 {
				sameBuckets(t, e, model, fixtureExtLimits, at...)
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
	tb := openBytes(t, b)
	if o := tb.Opened(); o.UpgradedFrom != 1 {
		t.Errorf("opened: %+v, want upgraded from 1", o)
	}
	if err := tb.Verify(); err != nil {
		t.Error(err)
	}
}

// Ensure the upgrade to the arena's version, interrupted after Open
// extended the file (and perhaps after the arena geometry or the version
// were written), is redone and keeps the buckets.
func TestUpgrade_arenaInterrupted(t *testing.T) {
	model := newEngine(t, 64)
	fixtureOps(t, model)
	for _, step := range []string{"extended", "arena written", "version written"} {
		t.Run(step, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", "v4-clean.state"))
			if err != nil {
				t.Fatal(err)
			}
			b = append(b, make([]byte, 4096+1024*64)...) // the default arena of 64 slots
			le := binary.LittleEndian
			if step != "extended" {
				le.PutUint64(b[0x600:], 1024)
				le.PutUint64(b[0x608:], arenaSumForTest(1024))
			}
			if step == "version written" {
				le.PutUint32(b[8:], 5) // under the version-4 checksum
			}
			tb := openBytes(t, b)
			if o := tb.Opened(); o.UpgradedFrom != 4 {
				t.Errorf("opened: %+v, want upgraded from 4", o)
			}
			e := New(tb)
			for _, bl := range fixtureLimits {
				for k := range 3 {
					got, _ := peek(e, fixtureKey(bl, k), lim(bl), t0)
					want, _ := peek(model, fixtureKey(bl, k), lim(bl), t0)
					if got != want {
						t.Errorf("%s: %+v, want %+v", fixtureKey(bl, k), got, want)
					}
				}
			}
			if err := tb.Verify(); err != nil {
				t.Error(err)
			}
		})
	}
}

// arenaSumForTest is format.go's arenaSum: xxhash64 of the cell count.
func arenaSumForTest(cells uint64) uint64 {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], cells)
	return xxhash.Sum64(b[:])
}

// openBytes writes a state file holding b and opens it; it is closed after
// the test.
func openBytes(t *testing.T, b []byte) *shm.Table {
	tb, _ := openBytesAt(t, b)
	return tb
}

// openBytesAt is openBytes that also returns the file's path.
func openBytesAt(t *testing.T, b []byte) (*shm.Table, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	tb, err := shm.Open(path)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { tb.Close() })
	return tb, path
}

// Ensure the upgrade to the holders registry's version, interrupted after
// Open extended the file (and perhaps after the file was marked dirty, or
// the version written), is redone and keeps the buckets.
func TestUpgrade_registryInterrupted(t *testing.T) {
	model := newEngine(t, 64)
	fixtureOps(t, model)
	fixtureExtOps(t, model)
	for _, step := range []string{"extended", "marked dirty", "version written"} {
		t.Run(step, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", "v5-clean.state"))
			if err != nil {
				t.Fatal(err)
			}
			b = append(b, make([]byte, 0x14000)...) // the registry
			le := binary.LittleEndian
			if step != "extended" {
				le.PutUint32(b[0x48:], 0) // cleanFlag: anything but clean
			}
			if step == "version written" {
				le.PutUint32(b[8:], 6) // under the version-5 checksum
			}
			tb := openBytes(t, b)
			if o := tb.Opened(); o.UpgradedFrom != 5 || !o.Recovered || o.Torn != 0 || o.Dropped != 0 {
				t.Errorf("opened: %+v, want upgraded from 5 and recovered, nothing torn or dropped", o)
			}
			e := New(tb)
			sameBuckets(t, e, model, append(fixtureLimits[:len(fixtureLimits):len(fixtureLimits)], fixtureExtLimits...), t0, t0+30*sec)
			if err := tb.Verify(); err != nil {
				t.Error(err)
			}
		})
	}
}

// Ensure the upgrade to the tags' version, interrupted after Open extended
// the file (and perhaps after the version was written, with whatever the
// tags then held), is redone and keeps the buckets; so is a version-5 file
// this build extended by the registry and the tags at once.
func TestUpgrade_tagsInterrupted(t *testing.T) {
	model := newEngine(t, 64)
	fixtureOps(t, model)
	fixtureExtOps(t, model)
	garbage := make([]byte, 4096)
	for i := range garbage {
		garbage[i] = byte(i*7 + 1)
	}
	for _, c := range []struct {
		step    string
		fixture string
		from    uint32
		grow    []byte
		version uint32 // written under the old checksum; 0: none
	}{
		{"extended", "v6-clean.state", 6, make([]byte, 4096), 0},
		{"extended, dirty", "v6-dirty.state", 6, make([]byte, 4096), 0},
		{"version written", "v6-clean.state", 6, make([]byte, 4096), 7},
		{"version written, tags damaged", "v6-clean.state", 6, garbage, 7},
		{"from version 5", "v5-clean.state", 5, append(make([]byte, 0x14000), garbage...), 0},
	} {
		t.Run(c.step, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", c.fixture))
			if err != nil {
				t.Fatal(err)
			}
			b = append(b, c.grow...)
			if c.version != 0 {
				binary.LittleEndian.PutUint32(b[8:], c.version)
			}
			tb := openBytes(t, b)
			if o := tb.Opened(); o.UpgradedFrom != c.from || o.Torn != 0 || o.Dropped != 0 {
				t.Errorf("opened: %+v, want upgraded from %d, nothing torn or dropped", o, c.from)
			}
			e := New(tb)
			sameBuckets(t, e, model, append(fixtureLimits[:len(fixtureLimits):len(fixtureLimits)], fixtureExtLimits...), t0, t0+30*sec)
			if err := tb.Verify(); err != nil {
				t.Error(err)
			}
		})
	}
}

// Ensure a lock word that a process killed while deciding left held in a
// version-5 file closed cleanly (its tag one of the old registry's, which
// a holder of the new one may draw again) is freed by the upgrade, and its
// slot repaired, instead of being waited for.
func TestUpgrade_staleLockOfTheOldRegistry(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "v5-clean.state"))
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	held := -1
	for i := range 64 {
		off := 4096 + 128*i
		if le.Uint64(b[off+8:]) != 0 || le.Uint64(b[off+16:]) != 0 { // a bucket
			le.PutUint32(b[off:], le.Uint32(b[off:])|1|(1|1<<6)<<1) // held by entry 1's first tag
			held = i
			break
		}
	}
	if held < 0 {
		t.Fatal("no bucket in the fixture")
	}
	tb := openBytes(t, b)
	if o := tb.Opened(); !o.Recovered || o.Torn != 1 {
		t.Errorf("opened: %+v, want recovered with the held slot repaired", o)
	}
	if st := tb.Stats(); st.LockedOnOpen != 1 {
		t.Errorf("locked on open: %d, want 1", st.LockedOnOpen)
	}
	sl, err := tb.LockIndex(uint64(held), &shm.Wait{Budget: time.Second})
	if err != nil {
		t.Fatalf("the slot a version-5 holder left locked: %v", err)
	}
	if !sl.Conservative() {
		t.Error("the slot is not marked conservative")
	}
	sl.Release()
}
