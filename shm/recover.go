package shm

import (
	"math"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cespare/xxhash/v2"
)

// Recovery: the scan of a file that was not closed cleanly, the repair of a
// slot found damaged while serving, and the background scrub of a file that
// was.

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
		// A stopped holder is waited for as long as it lives, unless Scrub
		// is stopped meanwhile.
		for t.lockSlot(t.slotPtr(i), &Wait{Budget: scrubWait}) != nil {
			select {
			case <-stop:
				return false
			default:
			}
		}
		unlockWord(u32at(t.slotPtr(i), slotLock))
	}
	t.checkOnUse.Store(false)
	return true
}

// scrubWait is how long Scrub waits for a slot's lock before it looks
// whether it was stopped.
const scrubWait = 100 * time.Millisecond

// recover repairs a file that was not closed cleanly. It runs on Open before
// the table is shared:
//
//   - A power loss can write the page of a displaced bucket without the
//     pages of the slots before it in its probe sequence: it then lies past
//     an empty slot, where no lookup finds it. Such a bucket was created
//     after the last sync (slots are never emptied, so a synced bucket's
//     sequence was full when it was synced): it is dropped, and so on until
//     no bucket is unreachable, since a dropped bucket may have been in
//     another's sequence.
//   - Every home slot's reach is recomputed from where the buckets are.
//   - A slot whose lock word is held (its holder died mid-update) or whose
//     checksum is wrong (a write torn by a crash, or a bit flip) is
//     repaired (resetSlot) and counted.
//   - A claim or a reservation whose holder died is released.
//
// Recovery can itself be interrupted (the process killed) and is then
// redone by the next Open with the same outcome: the first two steps only
// read the file; every slot is then brought to its final form in an order
// that a second scan recognises. A sound slot whose reach or FreshAt
// changes gets its new checksum first, and a second scan accepts a slot
// whose checksum matches either its words or the words this recovery gives
// it. A torn slot keeps its lock bit until it is repaired. A dropped slot
// loses its fingerprint first.
func (t *Table) recover() {
	t.opened.Recovered = true
	keep, reach := t.survivors()
	for i := range t.n {
		p := t.slotPtr(i)
		switch {
		case loadFP(p) == (Fingerprint{}):
			// Empty: all zero, its reach included (a bucket whose home is an
			// empty slot is unreachable, so none survives). A claim that
			// died before writing the fingerprint leaves other bytes.
			if !allZero(t.slotBytes(i)) {
				clear(t.slotBytes(i))
				t.opened.Released++
			}
		case keep[i/64]&(1<<(i%64)) == 0:
			atomic.StoreUint64(u64at(p, slotFP0), 0)
			atomic.StoreUint64(u64at(p, slotFP1), 0)
			crashPoint()
			clear(t.slotBytes(i))
			atomic.AddUint64(t.counter(counterTorn), 1)
			t.opened.Dropped++
		default:
			t.recoverSlot(p, uint64(reach[i]))
		}
	}
}

// recoverSlot brings the slot at p, which holds a bucket that survives, to
// its final form with reach r.
func (t *Table) recoverSlot(p unsafe.Pointer, r uint64) {
	l := u32at(p, slotLock)
	locked := atomic.LoadUint32(l)&lockHeld != 0
	live := *u8at(p, slotFlags)&flagLive != 0
	freshAt := *i64at(p, slotFreshAt)
	if !live {
		freshAt = math.MinInt64 // a claim or reservation whose holder died
	}
	sum := *u32at(p, slotSum)
	if !locked && t.keySound(p) && (sum == checksumOf(p) || sum == checksumAs(p, r, freshAt)) {
		if l := atomic.LoadUint32(l); uint64(l>>reachShift) != r || *i64at(p, slotFreshAt) != freshAt {
			*u32at(p, slotSum) = checksumAs(p, r, freshAt)
			crashPoint()
			if *i64at(p, slotFreshAt) != freshAt {
				*i64at(p, slotFreshAt) = freshAt
				t.opened.Released++
				crashPoint()
			}
			atomic.StoreUint32(u32at(p, slotLock), uint32(r)<<reachShift)
		}
		return
	}
	if locked {
		atomic.AddUint64(t.counter(counterLockedOnOpen), 1)
	}
	atomic.AddUint64(t.counter(counterTorn), 1)
	t.opened.Torn++
	atomic.StoreUint32(l, lockHeld|uint32(r)<<reachShift) // held until repaired
	crashPoint()
	t.resetSlot(p)
	crashPoint()
	atomic.StoreUint32(l, uint32(r)<<reachShift)
}

// crashPoint is called between the writes of a recovery. It does nothing;
// tests that interrupt a recovery at each of these points replace it.
var crashPoint = func() {}

// keySound reports whether the inline key of the slot at p, if it has one,
// fits the slot and matches its checksum.
func (t *Table) keySound(p unsafe.Pointer) bool {
	n := int(*u16at(p, slotKeyLen))
	return n == 0 || n <= t.room && *u32at(p, slotKeySum) == uint32(xxhash.Sum64(keyBytes(p, n)))
}

// survivors returns which slots hold a bucket that lookups can reach (a
// bitset) and the reach each home slot must have for them, without writing
// anything.
func (t *Table) survivors() (keep []uint64, reach []uint16) {
	keep = make([]uint64, (t.n+63)/64)
	for i := range t.n {
		if loadFP(t.slotPtr(i)) != (Fingerprint{}) {
			keep[i/64] |= 1 << (i % 64)
		}
	}
	kept := func(i uint64) bool { return keep[i/64]&(1<<(i%64)) != 0 }
	run := make([]uint16, t.n)
	for {
		t.runs(run, kept)
		dropped := false
		for i := range t.n {
			if kept(i) {
				if d := (i + t.n - t.home(loadFP(t.slotPtr(i)))) % t.n; d >= t.probeCap || d >= uint64(run[i]) {
					keep[i/64] &^= 1 << (i % 64)
					dropped = true
				}
			}
		}
		if !dropped {
			break
		}
	}
	reach = run
	clear(reach)
	for i := range t.n {
		if kept(i) {
			h := t.home(loadFP(t.slotPtr(i)))
			reach[h] = max(reach[h], uint16((i+t.n-h)%t.n))
		}
	}
	return keep, reach
}

// runs fills run with, for each slot i, the number of consecutive slots
// ending at i that are used (used(i)), capped at probeCap+1 (and at 65535):
// a bucket at i whose home is d slots back is reachable iff d < run[i] and d
// < probeCap.
func (t *Table) runs(run []uint16, used func(uint64) bool) {
	limit := uint16(min(t.probeCap+1, math.MaxUint16))
	for pass := 0; pass < 2; pass++ { // the second pass settles runs that wrap around
		for i := range t.n {
			if !used(i) {
				run[i] = 0
				continue
			}
			run[i] = uint16(min(uint32(run[(i+t.n-1)%t.n])+1, uint32(limit)))
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
	t.resetSlot(p)
}

// resetSlot repairs one damaged slot that holds a fingerprint, locked by the
// caller (or during recovery, before the table is shared), leaving its lock
// word alone, and writes its checksum last:
//
//   - A slot that is not live holds no decision (a claim or a reservation
//     whose holder died): it is released, reclaimable at once.
//   - A live one is marked conservative: its owner replaces the state with
//     the algorithm's drained one before deciding anything. Its FreshAt
//     becomes math.MaxInt64, so it is not reclaimed before its owner has
//     written that state: the table does not know when a drained bucket of
//     an unknown limit is fresh again. (A bucket that is never asked for
//     again keeps its slot until it is Reset.)
//
// An inline key that fails its checksum is dropped.
func (t *Table) resetSlot(p unsafe.Pointer) {
	if !t.keySound(p) {
		*u16at(p, slotKeyLen), *u32at(p, slotKeySum) = 0, 0
	}
	if *u8at(p, slotFlags)&flagLive == 0 {
		*u8at(p, slotFlags) = 0
		crashPoint()
		*stateAt(p) = [StateWords]int64{}
		atomic.StoreInt64(i64at(p, slotFreshAt), math.MinInt64)
	} else {
		*u8at(p, slotFlags) = flagLive | flagConservative
		crashPoint()
		atomic.StoreInt64(i64at(p, slotFreshAt), math.MaxInt64)
	}
	crashPoint()
	*u32at(p, slotSum) = checksumOf(p)
}

// allZero reports whether b holds only zero bytes.
func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
