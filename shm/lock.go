package shm

import (
	"runtime"
	"sync/atomic"
	"unsafe"
)

// Lock words: the spinlock of every slot (its high bits the home slot's
// reach) and of every insert stripe (its high bits a sequence of inserts).
// Both are taken with compare-and-swap and tagged with the holder's tag, a
// random 15-bit number drawn when a table is opened or attached and
// registered among the file's holders (holders.go).

// Spinning: a holder never blocks, allocates or makes a syscall, so waits
// are short. A waiter spins, then yields the processor; every checkEvery
// rounds it asks whether the holder is still alive, and takes a lock whose
// holder is gone over.
const (
	spinsBeforeYield = 16
	checkEvery       = 256
)

// lockWord takes the lock bit of the word at l, tagging it with t's tag,
// and leaves its high bits as they are. It reports whether it took the lock
// over from a holder that is gone (a process that died holding it, or a
// word damaged on disk): the data it guards may be half-written.
func (t *Table) lockWord(l *uint32) (stale bool) {
	tag := t.gen<<genShift | lockHeld
	for i := 1; ; i++ {
		v := atomic.LoadUint32(l)
		if v&lockHeld == 0 {
			if atomic.CompareAndSwapUint32(l, v, v&^genMask|tag) {
				return false
			}
		} else if i%checkEvery == 0 && !t.holderLive((v&genMask)>>genShift) {
			if atomic.CompareAndSwapUint32(l, v, v&^genMask|tag) {
				return true
			}
		}
		if i >= spinsBeforeYield {
			runtime.Gosched()
		}
	}
}

// unlockWord releases the lock of the word at l, leaving its high bits.
func unlockWord(l *uint32) { atomic.AndUint32(l, ^uint32(lockHeld|genMask)) }

// lockSlot takes the lock of the slot at p and checks the slot before
// handing it out:
//
//   - A lock taken over from a holder that is gone may guard a half-written
//     slot: it is repaired.
//   - In a table opened from a clean file, until Scrub has checked every
//     slot, a slot whose checksum does not match (bit rot since the file was
//     closed) is repaired. A created table needs no check, and a dirty file
//     was scanned when opened.
//
// Repairing counts the slot as torn and marks it conservative (or releases
// it, if it holds no decision).
func (t *Table) lockSlot(p unsafe.Pointer) {
	if t.lockWord(u32at(p, slotLock)) {
		t.repair(p, true)
		return
	}
	if t.checkOnUse.Load() && *u32at(p, slotSum) != checksumOf(p) {
		t.repair(p, false)
	}
}

// reach returns how far past home slot i lookups must probe.
func (t *Table) reach(i uint64) uint64 {
	return uint64(atomic.LoadUint32(u32at(t.slotPtr(i), slotLock)) >> reachShift)
}

// raiseReach makes home slot i's reach at least d. The reach is part of the
// slot's checksum, so it changes only under the slot's lock; it only grows
// while the table is open, and recovery recomputes it. The caller must hold
// no other slot lock.
func (t *Table) raiseReach(i, d uint64) {
	p := t.slotPtr(i)
	if t.reach(i) >= d {
		return
	}
	t.lockSlot(p)
	if l := u32at(p, slotLock); uint64(atomic.LoadUint32(l)>>reachShift) < d {
		setReach(l, d)
		*u32at(p, slotSum) = checksumOf(p)
	}
	unlockWord(u32at(p, slotLock))
}

// setReach stores reach d into the lock word at l, keeping its lock bits;
// the caller holds the lock (or the table is not shared yet).
func setReach(l *uint32, d uint64) {
	atomic.StoreUint32(l, atomic.LoadUint32(l)&(1<<reachShift-1)|uint32(d)<<reachShift)
}

// stripe returns the lock word of fp's insert stripe: creating a bucket is
// serialised per stripe, and the stripe's sequence (its high bits) counts
// the buckets created in it, so that a look that found a bucket absent can
// tell, under the stripe's lock, whether that still holds.
func (t *Table) stripe(fp Fingerprint) *uint32 {
	return u32at(t.base, offInsertLocks+uintptr(fp.Hi%numInsertLocks)*4)
}

// stripeSeq returns the sequence of the stripe lock word at l.
func stripeSeq(l *uint32) uint32 { return atomic.LoadUint32(l) >> seqShift }

// lockStripe takes the stripe lock at l and returns its sequence.
func (t *Table) lockStripe(l *uint32) uint32 {
	t.lockWord(l) // a stripe guards no data: taking it over needs no repair
	return atomic.LoadUint32(l) >> seqShift
}

// unlockStripe releases the stripe lock at l, whose sequence was seq,
// advancing the sequence if a bucket was created under it.
func unlockStripe(l *uint32, seq uint32, created bool) {
	if created {
		seq++
	}
	atomic.StoreUint32(l, seq<<seqShift)
}
