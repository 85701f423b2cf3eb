package shm

import (
	"encoding/binary"
	"math"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cespare/xxhash/v2"

	"github.com/sluicehq/sluice/vocab"
)

// The arena: blocks of 64-byte cells that slots own for state beyond their
// three words (format.go gives the layout). A slot's block is read and
// written only under the slot's lock, like the slot; the bitmap of
// allocated cells only under the arena lock, which is taken with a slot
// lock held (never the reverse), so it never waits for a slot.

// DefaultArenaCells is the arena of a new file of slotCount slots, and of a
// file upgraded from a version without one: a quarter of the slot count, at
// least 1,024 cells (64 KiB). For the default 2,097,152 slots, 524,288 cells
// (32 MiB).
func DefaultArenaCells(slotCount uint64) uint64 { return max(slotCount/4, 1024) }

// alignPage rounds n up to a multiple of arenaAlign.
func alignPage(n int64) int64 { return (n + arenaAlign - 1) &^ (arenaAlign - 1) }

// arenaOffset is the offset of the arena's bitmap in a file of n slots of
// size slotSize.
func arenaOffset(n uint64, slotSize int) int64 {
	return alignPage(HeaderSize + int64(n)*int64(slotSize))
}

// bitmapBytes is the size of the bitmap of an arena of cells cells.
func bitmapBytes(cells uint64) int64 { return alignPage(int64((cells+63)/64) * 8) }

// arenaEnd is the end of the arena (of the slots, without one) in a file of
// n slots of size slotSize and an arena of cells cells: the size of such a
// file of version 5.
func arenaEnd(n uint64, slotSize int, cells uint64) int64 {
	if cells == 0 {
		return HeaderSize + int64(n)*int64(slotSize)
	}
	return arenaOffset(n, slotSize) + bitmapBytes(cells) + int64(cells)*CellSize
}

// registryOffset is the offset of the holders registry (version 6) in a
// file of n slots of size slotSize and an arena of cells cells.
func registryOffset(n uint64, slotSize int, cells uint64) int64 {
	return alignPage(arenaEnd(n, slotSize, cells))
}

// tagsOffset is the offset of the tags (version 7) in a file of n slots of
// size slotSize and an arena of cells cells.
func tagsOffset(n uint64, slotSize int, cells uint64) int64 {
	return registryOffset(n, slotSize, cells) + registrySize
}

// fileSize is the size of a file of FormatVersion with n slots of size
// slotSize and an arena of cells cells.
func fileSize(n uint64, slotSize int, cells uint64) int64 {
	return tagsOffset(n, slotSize, cells) + alignPage(int64(n))
}

// versionSize is fileSize for a file of format version v (whose cells are
// 0 before version 5).
func versionSize(v uint32, n uint64, slotSize int, cells uint64) int64 {
	switch {
	case v < holdersVersion:
		return arenaEnd(n, slotSize, cells)
	case v < tagsVersion:
		return tagsOffset(n, slotSize, cells)
	}
	return fileSize(n, slotSize, cells)
}

// arenaSum is the checksum of the arena's cell count.
func arenaSum(cells uint64) uint64 {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], cells)
	return xxhash.Sum64(b[:])
}

// putArena writes the arena geometry into a header.
func putArena(hdr []byte, cells uint64) {
	binary.LittleEndian.PutUint64(hdr[offArenaCells:], cells)
	binary.LittleEndian.PutUint64(hdr[offArenaSum:], arenaSum(cells))
}

// loadArena sets up t's view of the arena of cells cells.
func (t *Table) loadArena(cells uint64) {
	t.cells = cells
	if cells == 0 {
		return
	}
	off := arenaOffset(t.n, int(t.slotSize))
	t.bitmap = unsafe.Add(t.base, off)
	t.cellBase = unsafe.Add(t.base, off+bitmapBytes(cells))
}

// ArenaCells is the number of cells of the table's arena.
func (t *Table) ArenaCells() uint64 { return t.cells }

// cellsFor is the number of cells a block of words words spans.
func cellsFor(words uint64) uint64 { return (words + wordsPerCell - 1) / wordsPerCell }

// blockRef encodes a block of words words from cell start.
func blockRef(start, words uint64) int64 { return int64(start | words<<blockLenShift) }

// blockOf decodes a block reference: its first cell and its length in words.
func blockOf(ref int64) (start, words uint64) {
	return uint64(ref) & blockStart, uint64(ref) >> blockLenShift & MaxBlockWords
}

// inArena reports whether a block lies within the arena.
func (t *Table) inArena(start, words uint64) bool {
	return words >= 1 && start < t.cells && cellsFor(words) <= t.cells-start
}

// blockWords returns the words of a block.
func (t *Table) blockWords(start, words uint64) []int64 {
	return unsafe.Slice((*int64)(unsafe.Add(t.cellBase, uintptr(start)*CellSize)), words)
}

func (t *Table) bitmapWord(i uint64) *uint64 { return (*uint64)(unsafe.Add(t.bitmap, uintptr(i)*8)) }

// cellUsed reports whether cell i is allocated.
func (t *Table) cellUsed(i uint64) bool { return *t.bitmapWord(i / 64)&(1<<(i%64)) != 0 }

// markCells sets (used) or clears the bitmap bits of cells [start, start+n).
func (t *Table) markCells(start, n uint64, used bool) {
	for i := start; i < start+n; {
		w := t.bitmapWord(i / 64)
		lo := i % 64
		k := min(64-lo, start+n-i)
		mask := uint64(math.MaxUint64)
		if k < 64 {
			mask = (1<<k - 1) << lo
		}
		if used {
			*w |= mask
		} else {
			*w &^= mask
		}
		i += k
	}
}

// findRun returns the first run of n free cells starting in [from, to), if
// any; the run may extend past to but not past the arena.
func (t *Table) findRun(from, to, n uint64) (uint64, bool) {
	run, start := uint64(0), from
	for i := from; i < t.cells && (run > 0 || i < to); {
		if i%64 == 0 && i+64 <= t.cells {
			switch *t.bitmapWord(i / 64) {
			case math.MaxUint64:
				run, i = 0, i+64
				start = i
				continue
			case 0:
				if run+64 >= n {
					return start, true
				}
				run, i = run+64, i+64
				continue
			}
		}
		if t.cellUsed(i) {
			run, i = 0, i+1
			start = i
			continue
		}
		run++
		i++
		if run == n {
			return start, true
		}
	}
	return 0, false
}

// lockArena takes the allocation lock, waiting as w says. A lock taken over
// from a holder that died may leave cells marked that no slot owns: they
// are lost until the owner's next recovery, never handed out twice.
func (t *Table) lockArena(w *Wait) error {
	_, err := t.lockWord(u32at(t.base, offArenaLock), w)
	return err
}

func (t *Table) unlockArena() { unlockWord(u32at(t.base, offArenaLock)) }

// alloc allocates a block of n cells, next fit from the hint.
func (t *Table) alloc(n uint64, w *Wait) (uint64, bool, error) {
	if err := t.lockArena(w); err != nil {
		return 0, false, err
	}
	defer t.unlockArena()
	hint := atomic.LoadUint64(u64at(t.base, offArenaHint))
	if hint >= t.cells {
		hint = 0
	}
	start, ok := t.findRun(hint, t.cells, n)
	if !ok {
		start, ok = t.findRun(0, hint, n)
	}
	if !ok {
		return 0, false, nil
	}
	t.markCells(start, n, true)
	atomic.StoreUint64(u64at(t.base, offArenaHint), start+n)
	atomic.AddUint64(u64at(t.base, offArenaUsed), n)
	return start, true, nil
}

// freeBlock returns the block of the locked slot at p, if it has one, to
// the arena and forgets it. If the arena's lock stays held past w (a
// process stopped while it allocates), the slot forgets the block all the
// same and its cells stay marked, unused, until the owner next opens the
// file: recovery rebuilds the bitmap from the slots.
func (t *Table) freeBlock(p unsafe.Pointer, w *Wait) {
	f := u8at(p, slotFlags)
	if *f&flagBlock == 0 {
		return
	}
	*f &^= flagBlock
	start, words := blockOf(stateAt(p)[stateBlock])
	stateAt(p)[stateBlock] = 0
	if !t.inArena(start, words) {
		return
	}
	n := cellsFor(words)
	if t.lockArena(w) != nil {
		return
	}
	t.markCells(start, n, false)
	atomic.AddUint64(u64at(t.base, offArenaUsed), -n)
	t.unlockArena()
}

// Ext returns the block of words int64 words that the locked slot keeps
// beside its state words, allocating it if the slot has none of that
// length (a block of another length is freed first). fresh reports a new
// block: its words are unspecified and the caller must write them all, and
// the slot's state word 1 (the block's checksum) with them, before
// committing. Word 2 of the state words is the block's: the caller must
// not write it.
//
// If the arena has no run of free cells long enough, Ext frees the blocks
// of buckets that are fresh again at now (see Sweep) and tries once more;
// then it fails with ErrArenaFull. A words outside [1, MaxBlockWords], or a
// table without an arena, is ErrNoArena. A wait for the arena's lock that
// outlives w is a *LockedError, with no block allocated.
func (s Slot) Ext(words int, now int64, w *Wait) (ext []int64, fresh bool, err error) {
	t := s.t
	if words < 1 || words > MaxBlockWords || t.cells == 0 {
		return nil, false, ErrNoArena
	}
	nw := uint64(words)
	if *u8at(s.p, slotFlags)&flagBlock != 0 {
		start, have := blockOf(stateAt(s.p)[stateBlock])
		if have == nw && t.inArena(start, have) {
			return t.blockWords(start, nw), false, nil
		}
		t.freeBlock(s.p, w)
	}
	n := cellsFor(nw)
	start, ok, err := t.alloc(n, w)
	if err == nil && !ok {
		t.sweepIfDue(now, w)
		if start, ok, err = t.alloc(n, w); err == nil && !ok {
			atomic.AddUint64(t.counter(counterArenaFull), 1)
			return nil, false, ErrArenaFull
		}
	}
	if err != nil {
		return nil, false, err
	}
	stateAt(s.p)[stateBlock] = blockRef(start, nw)
	*u8at(s.p, slotFlags) |= flagBlock
	return t.blockWords(start, nw), true, nil
}

// minSweepGap is the least time between two sweeps that allocation
// failures start: a full arena of live blocks must not cost every new
// bucket a pass over the table.
const minSweepGap = 100 * time.Millisecond

// sweepIfDue sweeps at now unless a sweep started less than minSweepGap
// ago (by this process's clock).
func (t *Table) sweepIfDue(now int64, w *Wait) {
	last := t.lastSweep.Load()
	mono := time.Since(processStartTime).Nanoseconds() + 1
	if last != 0 && mono-last < int64(minSweepGap) || !t.lastSweep.CompareAndSwap(last, mono) {
		return
	}
	t.sweep(now, w)
}

// processStartTime anchors the monotonic clocks of sweepIfDue and
// holderAlive.
var processStartTime = time.Now()

// Sweep frees the blocks of buckets that are fresh again at now (FreshAt <=
// now, or not live): such a bucket decides as a new one would, so it is
// cleared, as Clear does, and its block returns to the arena. A slot that is
// locked (by the caller, among others) is skipped rather than waited for,
// so Sweep may run with a slot lock held. It returns the cells freed.
func (t *Table) Sweep(now int64) (freed uint64) { return t.sweep(now, nil) }

// sweep is Sweep waiting for the arena's lock as w says.
func (t *Table) sweep(now int64, w *Wait) (freed uint64) {
	if t.cells == 0 {
		return 0
	}
	for i := range t.n {
		p := t.slotPtr(i)
		if *u8at(p, slotFlags)&flagBlock == 0 || !reclaimable(p, now) {
			continue
		}
		l := u32at(p, slotLock)
		v := atomic.LoadUint32(l)
		if v&lockHeld != 0 || !atomic.CompareAndSwapUint32(l, v, v|t.gen<<genShift|lockHeld) {
			continue
		}
		// Under the lock: check again, and trust the block only in a sound slot.
		if *u8at(p, slotFlags)&flagBlock != 0 && reclaimable(p, now) && *u32at(p, slotSum) == checksumOf(p) {
			_, words := blockOf(stateAt(p)[stateBlock])
			freed += cellsFor(words)
			Slot{p, i, t}.Clear(w)
			continue
		}
		unlockWord(l)
	}
	return freed
}

// recoverArena rebuilds the bitmap from the slots that own a sound block,
// when the owner opens the file: after recovery has brought every slot to
// its final form, or, for a file closed cleanly, trusting only slots whose
// checksum matches (the others are repaired when first used, and lose
// their block then). So a bitmap damaged on disk never hands out a cell
// twice, and cells a crashed process left marked are freed. A live slot
// whose block lies outside the arena, overlaps a block already counted, or
// fails its checksum loses it and becomes conservative (counted as torn); a
// slot that is not live, or already conservative, loses its block. Like
// the rest of recovery it can be interrupted and redone: it starts from an
// empty bitmap, and a slot it changes gets its flags before its checksum.
func (t *Table) recoverArena() {
	if t.cells == 0 {
		return
	}
	clear(unsafe.Slice((*byte)(t.bitmap), bitmapBytes(t.cells)))
	var used uint64
	for i := range t.n {
		p := t.slotPtr(i)
		f := u8at(p, slotFlags)
		if *f&flagBlock == 0 || loadFP(p) == (Fingerprint{}) || *u32at(p, slotSum) != checksumOf(p) {
			continue
		}
		start, words := blockOf(stateAt(p)[stateBlock])
		sound := *f&flagLive != 0 && *f&flagConservative == 0 && t.inArena(start, words)
		if sound {
			n := cellsFor(words)
			if _, ok := t.findRun(start, start+1, n); !ok || t.cellUsed(start) {
				sound = false // overlaps a block already counted
			} else if vocab.BlockSum(t.blockWords(start, words)) != stateAt(p)[stateSum] {
				sound = false
			} else {
				t.markCells(start, n, true)
				used += n
				continue
			}
		}
		if *f&flagLive != 0 && *f&flagConservative == 0 {
			*f = flagLive | flagConservative
			atomic.StoreInt64(i64at(p, slotFreshAt), math.MaxInt64)
			atomic.AddUint64(t.counter(counterTorn), 1)
			t.opened.Torn++
		} else {
			*f &^= flagBlock
		}
		crashPoint()
		*u32at(p, slotSum) = checksumOf(p)
	}
	atomic.StoreUint64(u64at(t.base, offArenaUsed), used)
	atomic.StoreUint64(u64at(t.base, offArenaHint), 0)
}
