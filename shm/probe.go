package shm

import (
	"encoding/binary"
	"math"
	"math/bits"
	"runtime"
	"sync/atomic"
	"unsafe"

	"github.com/cespare/xxhash/v2"
)

// Fingerprint identifies a bucket: two seeded xxhash64 values over its key,
// keyed by the bucket's identity. The zero Fingerprint marks an empty slot
// and is never returned by Table.Fingerprint.
type Fingerprint struct{ Lo, Hi uint64 }

// shortKey is the longest key hashed from a stack buffer; longer keys are
// streamed through a Digest, with the same result.
const shortKey = 120

// Fingerprint returns the fingerprint of key in the bucket identity ident (a
// 64-bit digest, chosen by the caller, of whatever besides the key
// identifies the bucket; see format.go): Lo is xxhash64 (seed 0) of
// seed0^ident (8 bytes, little-endian) followed by key, Hi the same with
// seed1, and an all-zero result is replaced by {0, 1}. It does not allocate.
func (t *Table) Fingerprint(key []byte, ident uint64) Fingerprint {
	var lo, hi uint64
	if len(key) <= shortKey {
		var buf [8 + shortKey]byte
		n := 8 + copy(buf[8:], key)
		binary.LittleEndian.PutUint64(buf[:8], t.seed0^ident)
		lo = xxhash.Sum64(buf[:n])
		binary.LittleEndian.PutUint64(buf[:8], t.seed1^ident)
		hi = xxhash.Sum64(buf[:n])
	} else {
		lo, hi = streamHash(t.seed0^ident, key), streamHash(t.seed1^ident, key)
	}
	if lo == 0 && hi == 0 {
		hi = 1
	}
	return Fingerprint{lo, hi}
}

func streamHash(prefix uint64, key []byte) uint64 {
	var d xxhash.Digest
	var p [8]byte
	binary.LittleEndian.PutUint64(p[:], prefix)
	d.Reset()
	d.Write(p[:])
	d.Write(key)
	return d.Sum64()
}

// home is the first slot of fp's probe sequence (Lemire's multiply-shift
// reduction: uniform over [0, n) for any n).
func (t *Table) home(fp Fingerprint) uint64 {
	hi, _ := bits.Mul64(fp.Lo, t.n)
	return hi
}

func (t *Table) next(i uint64) uint64 {
	if i++; i == t.n {
		return 0
	}
	return i
}

// spinLock takes the lock bit of the lock word at l, spinning and then
// yielding the processor. Lock holders never block or allocate, so waits are
// short. The reach bits of the word are left as they are.
func spinLock(l *uint32) {
	for i := 0; ; i++ {
		if v := atomic.LoadUint32(l); v&lockHeld == 0 && atomic.CompareAndSwapUint32(l, v, v|lockHeld) {
			return
		}
		if i >= 16 {
			runtime.Gosched()
		}
	}
}

func spinUnlock(l *uint32) { atomic.AndUint32(l, ^uint32(lockHeld|genMask)) }

// lockSlot takes the lock of the slot at p, tagging it with this open's
// generation, and checks the slot before handing it out:
//
//   - A lock held under another generation belongs to no goroutine of this
//     process: its holder died, or the word was damaged on disk. It is taken
//     over, and the slot, which may be half-written, is repaired.
//   - In a table opened from a clean file, until Scrub has checked every
//     slot, a slot whose checksum does not match (bit rot since the file was
//     closed) is repaired. A created table needs no check, and a dirty file
//     was scanned when opened.
//
// Repairing counts the slot as torn and marks it conservative (or, if it
// holds no fingerprint, empties it).
func (t *Table) lockSlot(p unsafe.Pointer) {
	l := u32at(p, slotLock)
	tag := t.gen<<genShift | lockHeld
	for i := 0; ; i++ {
		v := atomic.LoadUint32(l)
		if v&lockHeld == 0 {
			if atomic.CompareAndSwapUint32(l, v, v&^genMask|tag) {
				break
			}
		} else if v&genMask != t.gen<<genShift {
			if atomic.CompareAndSwapUint32(l, v, v&^genMask|tag) {
				t.repair(p, true)
				return
			}
		}
		if i >= 16 {
			runtime.Gosched()
		}
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
// while the table is open, and recover recomputes it. The caller must hold no
// other slot lock.
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
	spinUnlock(u32at(p, slotLock))
}

// setReach stores reach d into the lock word at l, keeping its lock bits;
// the caller holds the lock (or the table is not shared yet).
func setReach(l *uint32, d uint64) {
	atomic.StoreUint32(l, atomic.LoadUint32(l)&(1<<reachShift-1)|uint32(d)<<reachShift)
}

func (t *Table) insertLock(fp Fingerprint) *uint32 {
	return u32at(t.base, offInsertLocks+uintptr(fp.Hi%numInsertLocks)*4)
}

// Slot is a locked slot. Between Lookup (or LookupOrInsert, or LockIndex) and
// one of Commit, Release or Clear, its holder alone may read and write it.
// The holder must not block, allocate, make syscalls or take another lock
// except as Multi-style callers do (LockIndex in ascending index order).
type Slot struct {
	p   unsafe.Pointer
	idx uint64
	t   *Table
}

// Index is the slot's position in the table.
func (s Slot) Index() uint64 { return s.idx }

// Fingerprint is the fingerprint the slot holds (zero if empty).
func (s Slot) Fingerprint() Fingerprint {
	return Fingerprint{*u64at(s.p, slotFP0), *u64at(s.p, slotFP1)}
}

// Live reports whether the state words hold the bucket's state. A slot that
// LookupOrInsert has just claimed, or that Clear has reset, is not live: its
// owner must initialise the state.
func (s Slot) Live() bool { return *u8at(s.p, slotFlags)&flagLive != 0 }

// Conservative reports whether the slot was found torn when the file was
// opened. Its state words cannot be trusted; the owner must replace them with
// a state that grants no burst before deciding anything.
func (s Slot) Conservative() bool { return *u8at(s.p, slotFlags)&flagConservative != 0 }

// Kind is the algorithm id stored with the bucket (opaque to this package).
func (s Slot) Kind() uint8 { return *u8at(s.p, slotKind) }

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
func (s Slot) Commit(freshAt int64) {
	*u8at(s.p, slotFlags) = flagLive
	atomic.StoreInt64(i64at(s.p, slotFreshAt), freshAt)
	s.unlock()
}

// Release unlocks the slot. The holder must not have modified it.
func (s Slot) Release() { spinUnlock(u32at(s.p, slotLock)) }

// Reserve unlocks a slot that is not live while keeping other buckets from
// reclaiming it, for a caller that must release a claimed slot and lock it
// again later (Multi locks its slots in index order). The caller must later
// Commit or Clear it. A crash in between is repaired by Open.
func (s Slot) Reserve() {
	atomic.StoreInt64(i64at(s.p, slotFreshAt), math.MaxInt64)
	s.unlock()
}

// Clear forgets the bucket: the slot keeps its fingerprint (so probe
// sequences through it stay intact) but is no longer live and is
// reclaimable at once. It unlocks the slot.
func (s Slot) Clear() {
	*u8at(s.p, slotFlags) = 0
	*stateAt(s.p) = [StateWords]int64{}
	atomic.StoreInt64(i64at(s.p, slotFreshAt), math.MinInt64)
	s.unlock()
}

func (s Slot) unlock() {
	*u32at(s.p, slotSum) = checksumOf(s.p)
	spinUnlock(u32at(s.p, slotLock))
}

// reclaimable reports whether the non-empty slot at p may be taken over by
// another bucket at time now: its bucket is back to fresh, or it holds none
// (a slot that is not live always has FreshAt math.MinInt64). Without the
// slot's lock the answer is only a hint.
func reclaimable(p unsafe.Pointer, now int64) bool {
	return atomic.LoadInt64(i64at(p, slotFreshAt)) <= now
}

// find returns the slot in fp's probe sequence that holds fp, without
// locking. ok is false if the sequence reaches an empty slot or passes the
// home slot's reach.
func (t *Table) find(fp Fingerprint) (p unsafe.Pointer, idx uint64, ok bool) {
	i := t.home(fp)
	for range t.reach(i) + 1 {
		p := t.slotPtr(i)
		got := loadFP(p)
		if got == fp {
			return p, i, true
		}
		if got == (Fingerprint{}) {
			return nil, 0, false
		}
		i = t.next(i)
	}
	return nil, 0, false
}

// Lookup finds the slot holding fp and returns it locked. ok is false if no
// slot holds fp; that answer is not confirmed under the insert lock, so a
// bucket being created at the same moment may be missed.
func (t *Table) Lookup(fp Fingerprint) (s Slot, ok bool) {
	for {
		p, i, ok := t.find(fp)
		if !ok {
			return Slot{}, false
		}
		t.lockSlot(p)
		if (Slot{p, i, t}).Fingerprint() == fp {
			return Slot{p, i, t}, true
		}
		// Reclaimed by another bucket between the probe and the lock.
		spinUnlock(u32at(p, slotLock))
	}
}

// LookupOrInsert returns the slot holding fp, locked; if there is none it
// claims one for fp (found is false), storing kind and, when the slot size
// has room, key. A claimed slot is not live: its holder initialises the state
// and calls Commit, or calls Release to leave it reclaimable. now decides
// which slots are reclaimable (their FreshAt <= now): it must be the
// server's clock, never a time a client sent, because it decides whether
// other buckets may be forgotten.
//
// Creation is serialised per fingerprint stripe, so a bucket never occupies
// two slots however many goroutines insert it at once. It returns
// ErrTableFull if no slot within the probe cap is free or reclaimable.
func (t *Table) LookupOrInsert(fp Fingerprint, kind uint8, key []byte, now int64) (s Slot, found bool, err error) {
	if s, ok := t.Lookup(fp); ok {
		return s, true, nil
	}
	il := t.insertLock(fp)
	spinLock(il)
	defer spinUnlock(il)
	for {
		// With the stripe held no other goroutine can create fp, so a probe
		// that does not find it is final.
		p, i, ok := t.find(fp)
		if ok {
			t.lockSlot(p)
			if (Slot{p, i, t}).Fingerprint() == fp {
				return Slot{p, i, t}, true, nil
			}
			// Another bucket reclaimed it; fp is absent now. Probe again.
			spinUnlock(u32at(p, slotLock))
			continue
		}
		if s, ok := t.claim(fp, kind, key, now); ok {
			return s, false, nil
		}
		atomic.AddUint64(t.counter(counterTableFull), 1)
		return Slot{}, false, ErrTableFull
	}
}

// claim takes the first free or reclaimable slot of fp's probe sequence for
// fp and returns it locked. The caller holds fp's insert lock and has
// established that no slot holds fp.
func (t *Table) claim(fp Fingerprint, kind uint8, key []byte, now int64) (Slot, bool) {
	h := t.home(fp)
	i := h
	for d := range t.probeCap {
		p := t.slotPtr(i)
		if loadFP(p) == (Fingerprint{}) || reclaimable(p, now) {
			// Lookups must probe this far before the fingerprint appears.
			// The home slot is locked for that before the candidate, so no
			// two slot locks are held at once.
			t.raiseReach(h, d)
			t.lockSlot(p)
			if loadFP(p) == (Fingerprint{}) {
				atomic.AddUint64(t.counter(counterUsed), 1)
			} else if reclaimable(p, now) {
				if *u8at(p, slotFlags)&flagLive != 0 {
					atomic.AddUint64(t.counter(counterReclaims), 1)
				}
			} else {
				spinUnlock(u32at(p, slotLock))
				i = t.next(i)
				continue
			}
			return t.fill(p, i, fp, kind, key), true
		}
		i = t.next(i)
	}
	return Slot{}, false
}

// fill writes a new, not yet live bucket for fp into the locked slot at p.
func (t *Table) fill(p unsafe.Pointer, i uint64, fp Fingerprint, kind uint8, key []byte) Slot {
	atomic.AddUint64(t.counter(counterInserts), 1)
	*u8at(p, slotKind) = kind
	*u8at(p, slotFlags) = 0
	*stateAt(p) = [StateWords]int64{}
	atomic.StoreInt64(i64at(p, slotFreshAt), math.MinInt64)
	if n := len(key); n > 0 && n <= t.room {
		*u16at(p, slotKeyLen) = uint16(n)
		*u32at(p, slotKeySum) = uint32(xxhash.Sum64(key))
		copy(keyBytes(p, n), key)
	} else {
		*u16at(p, slotKeyLen) = 0
		*u32at(p, slotKeySum) = 0
	}
	atomic.StoreUint64(u64at(p, slotFP0), fp.Lo)
	atomic.StoreUint64(u64at(p, slotFP1), fp.Hi)
	*u32at(p, slotSum) = checksumOf(p) // so Release leaves a consistent slot
	return Slot{p, i, t}
}

// LockIndex locks slot i and returns it, whatever it holds. Callers that hold
// several slots at once must lock them in ascending index order and hold no
// insert lock: that order is what makes multi-slot operations deadlock-free.
func (t *Table) LockIndex(i uint64) Slot {
	p := t.slotPtr(i)
	t.lockSlot(p)
	return Slot{p, i, t}
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
	a := w[0]*0x9E3779B97F4A7C15 + w[1]*0xC2B2AE3D27D4EB4F + w[2]*0x165667B19E3779F9 + w[3]*0xD6E8FEB86659FD93 + r*0x2545F4914F6CDD1D
	b := w[4]*0xFF51AFD7ED558CCD + w[5]*0xC4CEB9FE1A85EC53 + w[6]*0x94D049BB133111EB
	h := a ^ bits.RotateLeft64(b, 29)
	h ^= h >> 32
	h *= 0xBF58476D1CE4E5B9
	h ^= h >> 29
	return uint32(h >> 32)
}

// Scan visits the slots from index cursor on, at most span of them, and
// calls fn for each one that holds a live bucket, with that slot locked (fn
// must be quick and must not take other locks). It stops early when fn
// returns false. It returns the cursor to continue from, or 0 once the end
// of the table is reached. Scan never holds more than one slot lock, so it
// does not block the table; buckets created or moved during a scan may be
// missed or seen twice.
func (t *Table) Scan(cursor, span uint64, fn func(Slot) bool) (next uint64) {
	for i := cursor; i < t.n && i-cursor < span; i++ {
		p := t.slotPtr(i)
		if loadFP(p) == (Fingerprint{}) {
			continue
		}
		t.lockSlot(p)
		s := Slot{p, i, t}
		more := true
		if s.Live() {
			more = fn(s)
		}
		spinUnlock(u32at(p, slotLock))
		if !more {
			return i + 1
		}
	}
	if end := cursor + span; end < t.n && end > cursor {
		return end
	}
	return 0
}

// InlineKeys reports whether the table's slots keep keys inline (slot sizes
// above 64 bytes), which Scan's callers need to list keys.
func (t *Table) InlineKeys() bool { return t.room > 0 }
