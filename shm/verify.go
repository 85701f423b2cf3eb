package shm

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"unsafe"

	"github.com/cespare/xxhash/v2"
)

// Stats are the table's counters. They are kept in the file's header, so they
// survive restarts; they are statistics, updated without ordering guarantees.
type Stats struct {
	SlotCount    uint64 // slots in the table
	Used         uint64 // slots that ever held a bucket (never decreases)
	Inserts      uint64 // buckets created
	Reclaims     uint64 // slots taken over from another key's fresh bucket
	TableFull    uint64 // creations refused with ErrTableFull
	Torn         uint64 // slots found torn on open and reset conservatively
	LockedOnOpen uint64 // slots whose lock was held when the file was opened
	Syncs        uint64 // successful Syncs
	SyncErrors   uint64 // failed Syncs
}

// Stats returns the table's counters.
func (t *Table) Stats() Stats {
	c := func(i int) uint64 { return atomic.LoadUint64(t.counter(i)) }
	return Stats{
		SlotCount:    t.n,
		Used:         c(counterUsed),
		Inserts:      c(counterInserts),
		Reclaims:     c(counterReclaims),
		TableFull:    c(counterTableFull),
		Torn:         c(counterTorn),
		LockedOnOpen: c(counterLockedOnOpen),
		Syncs:        c(counterSyncs),
		SyncErrors:   c(counterSyncErrors),
	}
}

// HighTime is the highest server time recorded with RecordTime, Unix ns (0
// for a new file).
func (t *Table) HighTime() int64 { return atomic.LoadInt64(i64at(t.base, offHighTime)) }

// RecordTime raises the recorded highest server time to now, if it is
// higher. It is written with the header, so it survives restarts once synced.
func (t *Table) RecordTime(now int64) {
	p := i64at(t.base, offHighTime)
	for {
		old := atomic.LoadInt64(p)
		if now <= old || atomic.CompareAndSwapInt64(p, old, now) {
			return
		}
	}
}

// Scrub checks every slot of a table opened from a clean file (which Open
// did not scan, so that serving starts at once): each slot is locked in
// turn, briefly, and repaired if its checksum does not match. Until it
// completes, every slot is also checked when it is first locked; once it
// completes, those checks stop. It returns early, false, when stop is
// closed, and true once the table is checked (at once for a table that
// needs no scrub). Run it in its own goroutine, and stop it before Close.
func (t *Table) Scrub(stop <-chan struct{}) bool {
	for i := uint64(0); i < t.n && t.checkOnUse.Load(); i++ {
		if i%4096 == 0 {
			select {
			case <-stop:
				return false
			default:
			}
		}
		t.lockSlot(t.slotPtr(i))
		spinUnlock(u32at(t.slotPtr(i), slotLock))
	}
	t.checkOnUse.Store(false)
	return true
}

// recover repairs a file that was not closed cleanly. It runs on Open before
// the table is shared. A slot whose lock word is held (its holder died
// mid-update) or whose checksum is wrong (a write torn by a crash, or a bit
// flip) is repaired: an empty one is zeroed; any other keeps its fingerprint
// and is marked live and conservative, so its owner replaces the state with
// one that grants no burst. Its FreshAt is kept if it lies ahead, else set to
// now, so the slot is not reclaimed before its owner can see it.
//
// It then recomputes every home slot's reach from where the buckets are:
// after a power loss the page holding a bucket may have reached the disk
// without the page holding its home slot's reach.
func (t *Table) recover() {
	now := nowNanos()
	for i := range t.n {
		p := t.slotPtr(i)
		locked := *u32at(p, slotLock)&lockHeld != 0
		torn := locked || *u32at(p, slotSum) != checksumOf(p)
		if n := int(*u16at(p, slotKeyLen)); n > 0 && (n > t.room || *u32at(p, slotKeySum) != uint32(xxhash.Sum64(keyBytes(p, n)))) {
			torn = true
		}
		*u32at(p, slotLock) = 0 // clears the reach too; recomputed below
		if !torn {
			if loadFP(p) != (Fingerprint{}) && *u8at(p, slotFlags)&flagLive == 0 && *i64at(p, slotFreshAt) != math.MinInt64 {
				// A reservation whose holder died: release it.
				*i64at(p, slotFreshAt) = math.MinInt64
			}
			continue
		}
		if locked {
			atomic.AddUint64(t.counter(counterLockedOnOpen), 1)
		}
		atomic.AddUint64(t.counter(counterTorn), 1)
		t.resetSlot(p, now)
	}
	// A power loss can write the page of a displaced bucket without the
	// pages of the slots before it in its probe sequence: it then lies past
	// an empty slot, where no lookup finds it. Such a bucket was created
	// after the last sync (slots are never emptied, so a synced bucket's
	// sequence was full when it was synced): drop it, and repeat, since a
	// dropped bucket may have been in another's sequence.
	for {
		run, dropped := t.runs(), 0
		for i := range t.n {
			p := t.slotPtr(i)
			if fp := loadFP(p); fp != (Fingerprint{}) {
				if d := (i + t.n - t.home(fp)) % t.n; d >= t.probeCap || d >= uint64(run[i]) {
					clear(t.slotBytes(i))
					dropped++
				}
			}
		}
		if dropped == 0 {
			break
		}
		atomic.AddUint64(t.counter(counterTorn), uint64(dropped))
	}
	for i := range t.n {
		if fp := loadFP(t.slotPtr(i)); fp != (Fingerprint{}) {
			h := t.home(fp)
			if d := (i + t.n - h) % t.n; d > t.reach(h) {
				setReach(u32at(t.slotPtr(h), slotLock), d)
			}
		}
	}
	// The reach is under the checksum: reseal what changed.
	for i := range t.n {
		p := t.slotPtr(i)
		if sum := checksumOf(p); *u32at(p, slotSum) != sum {
			*u32at(p, slotSum) = sum
		}
	}
}

// repair resets a locked slot found damaged while serving, and counts it.
// stale says the slot's lock was taken over from a holder that is gone.
func (t *Table) repair(p unsafe.Pointer, stale bool) {
	if stale {
		atomic.AddUint64(t.counter(counterLockedOnOpen), 1)
	}
	atomic.AddUint64(t.counter(counterTorn), 1)
	t.resetSlot(p, nowNanos())
}

// resetSlot repairs one damaged slot, locked by the caller (or during
// recovery, before the table is shared), leaving its lock word alone: a slot
// without a fingerprint is emptied; any other is marked live and
// conservative (its owner replaces the state with one that grants no
// burst), keeps a FreshAt no earlier than now, so it is not reclaimed before
// its owner sees it, and drops an inline key that fails its checksum.
func (t *Table) resetSlot(p unsafe.Pointer, now int64) {
	if loadFP(p) == (Fingerprint{}) {
		// An empty slot is all zero, its reach included: no bucket was ever
		// displaced past a slot while it was empty.
		setReach(u32at(p, slotLock), 0)
		clear(unsafe.Slice((*byte)(unsafe.Add(p, slotSum)), t.slotSize-slotSum))
		return
	}
	if n := int(*u16at(p, slotKeyLen)); n > 0 && (n > t.room || *u32at(p, slotKeySum) != uint32(xxhash.Sum64(keyBytes(p, n)))) {
		*u16at(p, slotKeyLen), *u32at(p, slotKeySum) = 0, 0
	}
	*u8at(p, slotFlags) = flagLive | flagConservative
	if fa := i64at(p, slotFreshAt); *fa < now {
		*fa = now
	}
	*u32at(p, slotSum) = checksumOf(p)
}

// runs returns, for each slot i, the number of consecutive non-empty slots
// ending at i, capped at probeCap+1 (and at 65535): a bucket at i whose home
// is d slots back is reachable iff d < run[i] and d < probeCap.
func (t *Table) runs() []uint16 {
	limit := uint16(min(t.probeCap+1, math.MaxUint16))
	run := make([]uint16, t.n)
	for pass := 0; pass < 2; pass++ { // the second pass settles runs that wrap around
		for i := range t.n {
			if loadFP(t.slotPtr(i)) == (Fingerprint{}) {
				run[i] = 0
				continue
			}
			run[i] = uint16(min(uint32(run[(i+t.n-1)%t.n])+1, uint32(limit)))
		}
	}
	return run
}

// maxProblems bounds the problems Verify reports.
const maxProblems = 10

// Verify checks the table's invariants and returns ErrCorrupt, joined with a
// description of each problem found (at most ten), or nil. It must not run
// concurrently with any other method. The invariants:
//
//   - the header validates as Open would;
//   - no slot's lock is held and no lock word has stray bits;
//   - every slot's checksum matches; an empty slot is all zero;
//   - inline keys fit the slot and match their checksum;
//   - a slot that is not live has no state and FreshAt math.MinInt64;
//   - no fingerprint occupies two slots;
//   - every bucket is reachable: it lies within the probe cap and the reach
//     of its home slot, with no empty slot in between.
func (t *Table) Verify() error {
	var problems []error
	report := func(format string, args ...any) {
		if len(problems) < maxProblems {
			problems = append(problems, fmt.Errorf(format, args...))
		}
	}
	if err := validateHeader(t.headerBytes(), HeaderSize+int64(t.n)*int64(t.slotSize)); err != nil {
		report("header: %w", err)
	}
	run := t.runs()
	seen := make(map[Fingerprint]uint64)
	for i := range t.n {
		p := t.slotPtr(i)
		s := Slot{p, i, t}
		if w := *u32at(p, slotLock); w&lockHeld != 0 || w&(1<<reachShift-1) != 0 {
			report("slot %d: lock word %#08x is held or has stray bits", i, w)
		}
		if got, want := *u32at(p, slotSum), checksumOf(p); got != want {
			report("slot %d: checksum %#08x, want %#08x", i, got, want)
		}
		fp := s.Fingerprint()
		if fp == (Fingerprint{}) {
			for _, b := range t.slotBytes(i) {
				if b != 0 {
					report("slot %d: empty slot is not zero", i)
					break
				}
			}
			continue
		}
		if n := int(*u16at(p, slotKeyLen)); n > 0 {
			if n > t.room {
				report("slot %d: inline key of %d bytes in a slot with room for %d", i, n, t.room)
			} else if *u32at(p, slotKeySum) != uint32(xxhash.Sum64(keyBytes(p, n))) {
				report("slot %d: inline key checksum mismatch", i)
			}
		}
		if f := *u8at(p, slotFlags); f&^(flagLive|flagConservative) != 0 || f == flagConservative {
			report("slot %d: invalid flags %#02x", i, f)
		}
		if !s.Live() && (s.FreshAt() != math.MinInt64 || *s.State() != [StateWords]int64{}) {
			report("slot %d: slot that is not live holds state", i)
		}
		if j, dup := seen[fp]; dup {
			report("slot %d: fingerprint also in slot %d", i, j)
		}
		seen[fp] = i
		h := t.home(fp)
		d := (i + t.n - h) % t.n
		if d >= t.probeCap || d >= uint64(run[i]) || d > t.reach(h) {
			report("slot %d: unreachable from its home slot %d (displacement %d, reach %d)", i, h, d, t.reach(h))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return errors.Join(append([]error{ErrCorrupt}, problems...)...)
}
