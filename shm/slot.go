package shm

import (
	"math"
	"math/bits"
	"sync/atomic"
	"unsafe"

	"github.com/sluicehq/sluice/vocab"
)

// Slot is a locked slot. Between Find (or Claim, or LockIndex) and one of
// Commit, Release, Reserve or Clear, its holder alone may read and write it.
// The holder must not block, allocate, make syscalls or take another lock
// except as multi-slot callers do (LockIndex in ascending index order).
type Slot struct {
	p   unsafe.Pointer
	idx uint64
	t   *Table
}

// Index is the slot's position in the table.
func (s Slot) Index() uint64 { return s.idx }

// Displacement returns how far the slot is from its bucket's home slot,
// in slots: the length of the probe that found or placed it.
func (s Slot) Displacement() int {
	i, h := s.idx, s.t.home(s.Fingerprint())
	if i < h {
		i += s.t.n
	}
	return int(i - h)
}

// Fingerprint is the fingerprint the slot holds (zero if empty).
func (s Slot) Fingerprint() Fingerprint {
	return Fingerprint{*u64at(s.p, slotFP0), *u64at(s.p, slotFP1)}
}

// HasExt reports whether the slot owns a block (see Ext).
func (s Slot) HasExt() bool { return *u8at(s.p, slotFlags)&flagBlock != 0 }

// Live reports whether the state words hold the bucket's state. A slot that
// Claim has just taken, or that Clear has reset, is not live: its holder
// must initialise the state.
func (s Slot) Live() bool { return *u8at(s.p, slotFlags)&flagLive != 0 }

// Conservative reports whether the slot was found torn (when the file was
// opened, or when the slot was first used). Its state words cannot be
// trusted; the holder must replace them with a state that grants no burst
// before deciding anything.
func (s Slot) Conservative() bool { return *u8at(s.p, slotFlags)&flagConservative != 0 }

// Kind is the algorithm id stored with the bucket (opaque to this package).
func (s Slot) Kind() vocab.Algorithm { return vocab.Algorithm(*u8at(s.p, slotKind)) }

// FreshAt is the time, Unix ns, from which the bucket is back to its new state.
func (s Slot) FreshAt() int64 { return *i64at(s.p, slotFreshAt) }

// State returns the slot's state words. The pointer is valid only while the
// slot is locked.
func (s Slot) State() *[StateWords]int64 { return stateAt(s.p) }

// Key returns the inline key bytes, or nil when the slot size keeps none or
// the key did not fit. The slice aliases the table and is valid only while
// the slot is locked.
func (s Slot) Key() []byte {
	n := int(*u16at(s.p, slotKeyLen))
	if n == 0 || n > s.t.room {
		return nil
	}
	return keyBytes(s.p, n)
}

// Commit marks the slot live with the state words as its holder left them,
// records when the bucket will be fresh again, and unlocks it.
//
// The checksum is computed from the words as they will be, before they are
// written, each read as the word it was written as: reading back the word
// that holds the flags byte just stored, or the state words in wider loads,
// would wait for those stores to reach the cache (stores the loads cannot
// be forwarded from), on every decision.
func (s Slot) Commit(freshAt int64) {
	w := summedWords(s.p)
	meta := w[metaWord] // kind, flags, key length and sum, as they stand
	flags := flagLive | uint8(meta>>flagsBit)&flagBlock
	meta = meta&^(0xff<<flagsBit) | uint64(flags)<<flagsBit
	sum := checksumMix(w[0], w[1], meta, uint64(freshAt), w[4], w[5], w[6],
		uint64(atomic.LoadUint32(u32at(s.p, slotLock))>>reachShift))
	*u8at(s.p, slotFlags) = flags
	atomic.StoreInt64(i64at(s.p, slotFreshAt), freshAt)
	*u32at(s.p, slotSum) = sum
	unlockWord(u32at(s.p, slotLock))
}

// The word of the summed words that holds kind, flags, key length and key
// sum, and the flags byte's shift in it.
const (
	metaWord = (slotKind - summedFrom) / 8
	flagsBit = (slotFlags - slotKind) * 8
)

// Release unlocks the slot. The holder must not have modified it.
func (s Slot) Release() { unlockWord(u32at(s.p, slotLock)) }

// Reserve unlocks a slot that is not live while keeping other buckets from
// reclaiming it, for a caller that must release a claimed slot and lock it
// again later (multi-slot callers lock their slots in index order). The
// caller must later Commit or Clear it. A crash in between is repaired by
// the next Open.
func (s Slot) Reserve() {
	atomic.StoreInt64(i64at(s.p, slotFreshAt), math.MaxInt64)
	s.unlock()
}

// Clear forgets the bucket: the slot keeps its fingerprint (so probe
// sequences through it stay intact) but is no longer live and is
// reclaimable at once. Its block, if it has one, returns to the arena,
// whose lock is waited for as w says (see freeBlock). It unlocks the slot.
func (s Slot) Clear(w *Wait) {
	s.t.freeBlock(s.p, w)
	*u8at(s.p, slotFlags) = 0
	*stateAt(s.p) = [StateWords]int64{}
	atomic.StoreInt64(i64at(s.p, slotFreshAt), math.MinInt64)
	s.unlock()
}

func (s Slot) unlock() {
	*u32at(s.p, slotSum) = checksumOf(s.p)
	unlockWord(u32at(s.p, slotLock))
}

// reclaimable reports whether the non-empty slot at p may be taken over by
// another bucket at time now: its bucket is back to fresh, or it holds none
// (a slot that is not live always has FreshAt math.MinInt64). Without the
// slot's lock the answer is only a hint.
func reclaimable(p unsafe.Pointer, now int64) bool {
	return atomic.LoadInt64(i64at(p, slotFreshAt)) <= now
}

// checksumOf is the checksum of the slot at p: a multiply-xor mix of the words
// in [summedFrom, summedTo) and of the reach in the lock word. Independent
// products keep it a few cycles long; it detects torn writes and bit flips,
// not adversaries.
func checksumOf(p unsafe.Pointer) uint32 {
	return checksumWords(summedWords(p), uint64(atomic.LoadUint32(u32at(p, slotLock))>>reachShift))
}

// checksumAs is the checksum the slot at p would have with reach r and
// FreshAt freshAt.
func checksumAs(p unsafe.Pointer, r uint64, freshAt int64) uint32 {
	w := *summedWords(p)
	w[(slotFreshAt-summedFrom)/8] = uint64(freshAt)
	return checksumWords(&w, r)
}

func checksumWords(w *[(summedTo - summedFrom) / 8]uint64, r uint64) uint32 {
	return checksumMix(w[0], w[1], w[2], w[3], w[4], w[5], w[6], r)
}

// checksumMix is checksumWords of the words w0 to w6 and reach r.
func checksumMix(w0, w1, w2, w3, w4, w5, w6, r uint64) uint32 {
	a := w0*0x9E3779B97F4A7C15 + w1*0xC2B2AE3D27D4EB4F + w2*0x165667B19E3779F9 + w3*0xD6E8FEB86659FD93 + r*0x2545F4914F6CDD1D
	b := w4*0xFF51AFD7ED558CCD + w5*0xC4CEB9FE1A85EC53 + w6*0x94D049BB133111EB
	h := a ^ bits.RotateLeft64(b, 29)
	h ^= h >> 32
	h *= 0xBF58476D1CE4E5B9
	h ^= h >> 29
	return uint32(h >> 32)
}
