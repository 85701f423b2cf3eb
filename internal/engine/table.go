package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/shm"
)

// The table's life: open or create, recover, sync, scan, statistics and
// close. The decisions are in engine.go and multi.go.

// Limits on a state file's geometry.
const (
	MaxSlots        = shm.MaxSlotCount  // the most slots a state file may have
	DefaultSlots    = 1 << 21           // 2,097,152 slots: about 1.57M buckets at a load of 0.75
	DefaultSlotSize = shm.MinSlotSize   // 64 bytes: 128 MiB for DefaultSlots
	MaxArenaCells   = shm.MaxArenaCells // the most arena cells a state file may have
)

// ValidSlotSize reports whether n bytes is a slot size a state file may have:
// 64, 128 or 256.
func ValidSlotSize(n int) bool { return shm.ValidSlotSize(n) }

// Options is the geometry asked of a state file. A zero field asks for
// nothing: an existing file keeps its own, a new one takes the default.
type Options struct {
	Slots    uint64 // slot count (DefaultSlots)
	SlotSize int    // 64, 128 or 256 bytes (DefaultSlotSize); above 64, keys are kept inline
	// ArenaCells is the number of 64-byte cells of the arena, where
	// sliding_log, window_counters and concurrency buckets keep their
	// blocks (shm.DefaultArenaCells of the slot count).
	ArenaCells uint64
	// HugePages maps the file with huge pages where the kernel can
	// (shm.Options.HugePages): a decision on one of many buckets misses
	// the TLB less, and each sync writes 2 MiB for every huge page with a
	// changed bucket. It is not stored in the file.
	HugePages bool
}

// Geometry is a table's fixed shape, and Stats its counters (kept in the
// state file, so they survive restarts): the table's own, which the layers
// above read through the engine.
type (
	Geometry = shm.Geometry
	Stats    = shm.Stats
)

// Opened says what Open found and did, for the owner's log.
type Opened struct {
	Created      bool   // the file was created, not opened
	UpgradedFrom uint32 // the format version the file was upgraded from; 0 if none
	Recovered    bool   // the file was not closed cleanly and was scanned
	Torn         uint64 // slots the scan found torn and made conservative
	Dropped      uint64 // buckets the scan dropped: unreachable after a power loss
	Released     uint64 // claims and reservations whose holder died, released
	// HighTime is the highest server time the file recorded (Unix ns), and
	// HighTimeOK whether its record passed its checksum: a server clock
	// must never start below it.
	HighTime   int64
	HighTimeOK bool
}

// Open opens the state file at path, recovering it if it was not closed
// cleanly, or creates it (and its directory) if it does not exist, with o's
// geometry and now as its creation time. The engine is the file's owner: it
// alone syncs it and marks it clean on Close.
//
// An existing file keeps its geometry: a field of o set to another value is
// ErrGeometryMismatch with what the file has, never a silent choice.
func Open(path string, o Options, now int64) (*Engine, error) {
	t, err := shm.OpenWith(path, shm.Options{HugePages: o.HugePages})
	if errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			return nil, err
		}
		c := shm.Options{SlotCount: o.Slots, SlotSize: o.SlotSize, ArenaCells: o.ArenaCells, HugePages: o.HugePages}
		if c.SlotCount == 0 {
			c.SlotCount = DefaultSlots
		}
		t, err = shm.Create(path, c, now)
		if err != nil {
			return nil, err
		}
		return New(t), nil
	}
	if err != nil {
		return nil, err
	}
	g := t.Geometry()
	if o.Slots != 0 && g.SlotCount != o.Slots || o.SlotSize != 0 && g.SlotSize != o.SlotSize || o.ArenaCells != 0 && g.ArenaCells != o.ArenaCells {
		t.Close()
		return nil, fmt.Errorf("%w: %s has %d slots of %d bytes and %d arena cells; leave --slots, --slot-size and --arena-cells unset to use it, or move it away to create another",
			ErrGeometryMismatch, path, g.SlotCount, g.SlotSize, g.ArenaCells)
	}
	return New(t), nil
}

// Attach maps the state file at path, which its owner (a running sidecar)
// holds open, and decides on its buckets beside the owner, under the same
// slot locks. An attached engine never syncs, recovers or marks the file
// clean: those stay the owner's.
func Attach(path string) (*Engine, error) {
	t, err := shm.Attach(path)
	if errors.Is(err, shm.ErrNoOwner) {
		return nil, fmt.Errorf("%w: %w", ErrNoOwner, err)
	}
	if err != nil {
		return nil, err
	}
	return New(t), nil
}

// OwnerAlive reports whether the owner an attached engine decides beside
// still serves the file (always true for the owner's own engine). It reads
// /proc: ask about once a second, not per decision.
func (e *Engine) OwnerAlive() bool { return e.t.Owner() || e.t.OwnerAlive() }

// Opened returns what Open found and did.
func (e *Engine) Opened() Opened {
	r := e.t.Opened()
	high, ok := e.t.HighTime()
	return Opened{
		Created: r.Created, UpgradedFrom: r.UpgradedFrom, Recovered: r.Recovered,
		Torn: r.Torn, Dropped: r.Dropped, Released: r.Released,
		HighTime: high, HighTimeOK: ok,
	}
}

// Geometry returns the table's fixed shape.
func (e *Engine) Geometry() Geometry { return e.t.Geometry() }

// Stats returns the table's counters.
func (e *Engine) Stats() Stats { return e.t.Stats() }

// Entry is a live bucket as Scan reports it. Key is the bucket's key, valid
// only during the call it is passed to.
type Entry struct {
	Index     uint64           // the bucket's slot: a Scan from Index reports it again
	Algorithm bucket.Algorithm // the algorithm whose state the bucket holds
	FreshAt   int64            // when the bucket is fresh again (Unix ns)
	Key       []byte
}

// Scan calls fn for each live bucket with its key inline among at most span
// slots from cursor, in slot order, until fn returns false. It returns the
// cursor of the next slot to examine, 0 when the table has been covered.
// fn runs with no lock held. A table whose slots keep no keys (64-byte
// slots) returns ErrNoInlineKeys. t's clocks are not read, only its waits:
// a slot locked past them ends the scan with a *LockedError (and the
// cursor of that slot).
func (e *Engine) Scan(cursor, span uint64, t Time, fn func(*Entry) bool) (next uint64, err error) {
	if !e.t.InlineKeys() {
		return 0, ErrNoInlineKeys
	}
	if err := e.enter(); err != nil {
		return 0, err
	}
	defer e.t.Exit()
	w := t.wait()
	var out Entry
	next, err = e.t.Scan(cursor, span, &w, func(se *shm.Entry) bool {
		if se.Key == nil {
			return true
		}
		out = Entry{Index: se.Index, Algorithm: se.Kind, FreshAt: se.FreshAt, Key: se.Key}
		return fn(&out)
	})
	return next, tableErr(err)
}

// Maintain keeps the owner's state file: every interval it records the
// server time now() in the file (a restart never starts its clock below
// it) and syncs the table. A failed sync is logged and counted
// (Stats.SyncErrors); the file stays marked dirty until a sync succeeds.
// A file that was closed cleanly was not scanned when opened: Maintain
// checks every slot in the background meanwhile. It returns when ctx is
// done, after recording the time once more; Close then syncs a last time.
// synced, if not nil, is told how long each sync took and how it ended.
func (e *Engine) Maintain(ctx context.Context, every time.Duration, now func() int64, log *slog.Logger, synced func(time.Duration, error)) {
	scrubbed := make(chan struct{})
	go func() {
		defer close(scrubbed)
		if e.t.Scrub(ctx.Done()) {
			log.Debug("state file scrubbed", "torn_slots", e.t.Stats().Torn)
		}
	}()
	defer func() { <-scrubbed }()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			e.t.RecordTime(now())
			return
		case <-tick.C:
			e.t.RecordTime(now())
			start := time.Now()
			err := e.Sync()
			if synced != nil {
				synced(time.Since(start), err)
			}
			if err != nil {
				log.Error("sync failed; the file stays marked dirty", "err", err)
			}
		}
	}
}

// Sync writes the table to its file; only the owner may.
func (e *Engine) Sync() error { return tableErr(e.t.Sync()) }

// Verify checks every slot's checksum and the table's probe invariants.
// It is for tests and offline tools: it examines every slot.
func (e *Engine) Verify() error { return e.t.Verify() }

// Close syncs the table, marks the file clean if this engine owns it, and
// unmaps it. No operation may run concurrently with or after Close.
func (e *Engine) Close() error { return e.t.Close() }

// Retire gives up an attached engine's registration once its owner has been
// replaced, keeping the mapping until Close (see shm.Table.Retire).
func (e *Engine) Retire() { e.t.Retire() }

// Live counts the buckets that hold information at t.Now: live, and not
// yet back to their fresh state. It visits every slot, locking each live
// one only while it is read: milliseconds for millions of slots. A slot
// locked past t's waits ends the count with a *LockedError.
func (e *Engine) Live(t Time) (uint64, error) {
	w := t.wait()
	var n uint64
	_, err := e.t.Scan(0, e.t.Geometry().SlotCount, &w, func(se *shm.Entry) bool {
		if se.FreshAt > t.Now {
			n++
		}
		return true
	})
	return n, tableErr(err)
}
