package shm

import (
	"sync/atomic"
	"unsafe"
)

// The tags (version 7, format.go): a byte per slot, 64 slots to a cache
// line, so that a lookup reads the tags of its probe sequence from one
// line and touches a slot only where the tag matches. They are read and
// written 4 at a time, with atomics on the aligned 32-bit word that holds
// them, so that a tag is never seen half-written and a write to one tag
// never clears another's for an instant.

// tagOf is the tag of a slot that holds fp (never 0).
func tagOf(fp Fingerprint) uint8 { return uint8(tagUsed | fp.Hi>>tagShift) }

// tagWord returns the word holding slot i's tag, and the tag's shift in it.
func (t *Table) tagWord(i uint64) (*uint32, uint32) {
	return (*uint32)(unsafe.Add(t.tags, uintptr(i&^3))), uint32(i&3) * 8
}

// tagAt returns slot i's tag.
func (t *Table) tagAt(i uint64) uint8 {
	w, s := t.tagWord(i)
	return uint8(atomic.LoadUint32(w) >> s)
}

// setTag makes slot i's tag v.
func (t *Table) setTag(i uint64, v uint8) {
	w, s := t.tagWord(i)
	for {
		old := atomic.LoadUint32(w)
		nw := old&^(0xff<<s) | uint32(v)<<s
		if old == nw || atomic.CompareAndSwapUint32(w, old, nw) {
			return
		}
	}
}

// slotTag is the tag slot i must have: tagOf its fingerprint, or 0 if it
// is empty.
func (t *Table) slotTag(i uint64) uint8 {
	fp := loadFP(t.slotPtr(i))
	if fp == (Fingerprint{}) {
		return 0
	}
	return tagOf(fp)
}

// writeTags writes every slot's tag from its fingerprint. The owner calls
// it on every open, after upgrading and recovering the file and before it
// is shared, so tags left on disk (by a crash, a power loss or damage) are
// never used.
func (t *Table) writeTags() {
	var w uint32
	for i := range t.n {
		w |= uint32(t.slotTag(i)) << (i & 3 * 8)
		if i&3 == 3 || i == t.n-1 {
			*(*uint32)(unsafe.Add(t.tags, uintptr(i&^3))) = w
			w = 0
			if i&255 == 255 {
				crashPoint()
			}
		}
	}
}
