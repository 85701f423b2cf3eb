package shm

import (
	"math"
	"math/bits"
	"sync/atomic"
	"unsafe"

	"github.com/cespare/xxhash/v2"

	"github.com/sluicehq/sluice/vocab"
)

// Fingerprint identifies a bucket: two seeded xxhash64 values over its key,
// keyed by the bucket's identity. The zero Fingerprint marks an empty slot
// and is never returned by Table.Fingerprint.
type Fingerprint struct{ Lo, Hi uint64 }

// Fingerprint returns the fingerprint of key in the bucket identity ident (a
// 64-bit digest, chosen by the caller, of whatever besides the key
// identifies the bucket; see format.go): Lo is xxhash64 (seed 0) of
// seed0^ident (8 bytes, little-endian) followed by key, Hi the same with
// seed1, and an all-zero result is replaced by {0, 1}. It does not allocate.
func (t *Table) Fingerprint(key []byte, ident uint64) Fingerprint {
	lo, hi := sum64x2(t.seed0^ident, t.seed1^ident, key)
	if lo == 0 && hi == 0 {
		hi = 1
	}
	return Fingerprint{lo, hi}
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

// find returns the slot in fp's probe sequence that holds fp, without
// locking. ok is false if the sequence reaches an empty slot or passes the
// home slot's reach. It reads the sequence's tags, and a slot only where
// its tag is fp's; the home slot's reach only for a sequence longer than
// tagScan, so that looking for an absent bucket usually costs the one
// cache line of tags.
func (t *Table) find(fp Fingerprint) (p unsafe.Pointer, idx uint64, ok bool) {
	h := t.home(fp)
	tag := tagOf(fp)
	limit := t.probeCap // no bucket lies further from its home
	i := h
	for d := uint64(0); d < limit; d++ {
		if d == tagScan {
			if limit = min(limit, t.reach(h)+1); d >= limit {
				break
			}
		}
		switch t.tagAt(i) {
		case 0:
			return nil, 0, false
		case tag:
			if p := t.slotPtr(i); loadFP(p) == fp {
				return p, i, true
			}
		}
		i = t.next(i)
	}
	return nil, 0, false
}

// findByFingerprint is find without the tags: it compares the
// fingerprint of every slot of fp's probe sequence, up to an empty slot or
// the probe cap. Claim uses it after a holder died creating a bucket.
func (t *Table) findByFingerprint(fp Fingerprint) (p unsafe.Pointer, idx uint64, ok bool) {
	i := t.home(fp)
	for range t.probeCap {
		p := t.slotPtr(i)
		switch loadFP(p) {
		case fp:
			return p, i, true
		case Fingerprint{}:
			return nil, 0, false
		}
		i = t.next(i)
	}
	return nil, 0, false
}

// Probe is a look for a bucket that found it absent: its fingerprint, and
// the sequence of its insert stripe when the look began, from which Claim
// can create the bucket without looking again.
type Probe struct {
	FP  Fingerprint
	seq uint32
}

// Find looks for the bucket with fingerprint fp and returns its slot locked
// (ok). If there is none it returns a Probe for Claim; that answer is not
// confirmed under the insert stripe, so a bucket being created at the same
// moment may be missed (Claim then returns it). Its wait for the slot's
// lock is bounded by w (a *LockedError: nothing is locked).
func (t *Table) Find(fp Fingerprint, w *Wait) (s Slot, ok bool, pr Probe, err error) {
	l := t.stripe(fp)
	for {
		seq := stripeSeq(l)
		p, i, found := t.find(fp)
		if !found {
			return Slot{}, false, Probe{FP: fp, seq: seq}, nil
		}
		if err := t.lockSlot(p, w); err != nil {
			return Slot{}, false, Probe{}, err
		}
		if loadFP(p) == fp {
			return Slot{p, i, t}, true, Probe{FP: fp, seq: seq}, nil
		}
		// Reclaimed by another bucket between the look and the lock.
		unlockWord(u32at(p, slotLock))
	}
}

// Claim creates the bucket a Find did not find: it takes the first free or
// reclaimable slot of the bucket's probe sequence, stores kind and, when the
// slot size has room, key, and returns the slot locked and not live
// (created): its holder initialises the state and calls Commit, or calls
// Release to leave it reclaimable. If the bucket was created by another
// caller since the Find, Claim returns that bucket's slot locked instead
// (created is false). now decides which slots are reclaimable (their FreshAt
// <= now): it must be the server's clock, never a time a client sent,
// because it decides whether other buckets may be forgotten.
//
// Creation is serialised per insert stripe, and Claim looks for the bucket
// again only if another bucket of its stripe was created since the Find: a
// bucket never occupies two slots however many callers create it at once.
// It returns ErrTableFull if no slot within the probe cap is free or
// reclaimable. Its waits for locks are bounded by w: a wait that outlives
// it returns a *LockedError, with no bucket created (a home slot's reach
// may have grown).
func (t *Table) Claim(pr *Probe, kind vocab.Algorithm, key []byte, now int64, w *Wait) (s Slot, created bool, err error) {
	l := t.stripe(pr.FP)
	seq, stale, err := t.lockStripe(l, w)
	if err != nil {
		return Slot{}, false, err
	}
	if seq != pr.seq || stale {
		// With the stripe held no other caller can create the bucket, so
		// a look that does not find it now is final. A holder that died
		// holding the stripe may have left the bucket's fingerprint in a
		// slot under another bucket's tag (fill): look by fingerprint.
		look := t.find
		if stale {
			look = t.findByFingerprint
		}
		for {
			p, i, found := look(pr.FP)
			if !found {
				break
			}
			if err := t.lockSlot(p, w); err != nil {
				unlockStripe(l, seq, false)
				return Slot{}, false, err
			}
			if loadFP(p) == pr.FP {
				t.setTag(i, tagOf(pr.FP))
				unlockStripe(l, seq, false)
				return Slot{p, i, t}, false, nil
			}
			unlockWord(u32at(p, slotLock)) // reclaimed: absent
		}
	}
	s, ok, err := t.claim(pr.FP, kind, key, now, w)
	unlockStripe(l, seq, ok)
	if err != nil {
		return Slot{}, false, err
	}
	if !ok {
		atomic.AddUint64(t.counter(counterTableFull), 1)
		return Slot{}, false, ErrTableFull
	}
	return s, true, nil
}

// LookupOrInsert returns the slot holding fp, locked (found), or claims one
// for it: Find, then Claim if it found nothing.
func (t *Table) LookupOrInsert(fp Fingerprint, kind vocab.Algorithm, key []byte, now int64, w *Wait) (s Slot, found bool, err error) {
	s, found, pr, err := t.Find(fp, w)
	if found || err != nil {
		return s, found, err
	}
	s, created, err := t.Claim(&pr, kind, key, now, w)
	return s, !created && err == nil, err
}

// Lookup returns the slot holding fp, locked, if there is one.
func (t *Table) Lookup(fp Fingerprint, w *Wait) (Slot, bool, error) {
	s, ok, _, err := t.Find(fp, w)
	return s, ok, err
}

// claim takes the first free or reclaimable slot of fp's probe sequence for
// fp and returns it locked. The caller holds fp's insert stripe and has
// established that no slot holds fp.
func (t *Table) claim(fp Fingerprint, kind vocab.Algorithm, key []byte, now int64, w *Wait) (Slot, bool, error) {
	h := t.home(fp)
	i := h
	for d := range t.probeCap {
		p := t.slotPtr(i)
		if loadFP(p) == (Fingerprint{}) || reclaimable(p, now) {
			// Lookups must probe this far before the fingerprint appears.
			// The home slot is locked for that before the candidate, so no
			// two slot locks are held at once.
			if err := t.raiseReach(h, d, w); err != nil {
				return Slot{}, false, err
			}
			if err := t.lockSlot(p, w); err != nil {
				return Slot{}, false, err
			}
			if loadFP(p) == (Fingerprint{}) {
				atomic.AddUint64(t.counter(counterUsed), 1)
			} else if reclaimable(p, now) {
				if *u8at(p, slotFlags)&flagLive != 0 {
					atomic.AddUint64(t.counter(counterReclaims), 1)
				}
			} else {
				unlockWord(u32at(p, slotLock))
				i = t.next(i)
				continue
			}
			return t.fill(p, i, fp, kind, key, w), true, nil
		}
		i = t.next(i)
	}
	return Slot{}, false, nil
}

// fill writes a new, not yet live bucket for fp into the locked slot at p.
func (t *Table) fill(p unsafe.Pointer, i uint64, fp Fingerprint, kind vocab.Algorithm, key []byte, w *Wait) Slot {
	atomic.AddUint64(t.counter(counterInserts), 1)
	t.freeBlock(p, w) // a reclaimed bucket's
	*u8at(p, slotKind) = uint8(kind)
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
	// An empty slot gets its tag before its fingerprint, so that a tag of 0
	// always means an empty slot. A reclaimed one gets its fingerprint
	// first: a holder that dies in between leaves the new fingerprint under
	// the old bucket's tag, which the next creator of the new bucket finds
	// by fingerprint, since it takes the insert stripe over from the dead
	// holder (Claim); the old bucket was fresh, so losing it loses nothing.
	empty := loadFP(p) == (Fingerprint{})
	if empty {
		t.setTag(i, tagOf(fp))
	}
	atomic.StoreUint64(u64at(p, slotFP0), fp.Lo)
	atomic.StoreUint64(u64at(p, slotFP1), fp.Hi)
	if !empty {
		t.setTag(i, tagOf(fp))
	}
	*u32at(p, slotSum) = checksumOf(p) // so Release leaves a consistent slot
	return Slot{p, i, t}
}

// LockIndex locks slot i and returns it, whatever it holds. Callers that hold
// several slots at once must lock them in ascending index order and hold no
// insert stripe: that order is what makes multi-slot operations deadlock-free.
// A wait that outlives w returns a *LockedError and locks nothing: the
// caller releases what else it holds.
func (t *Table) LockIndex(i uint64, w *Wait) (Slot, error) {
	p := t.slotPtr(i)
	if err := t.lockSlot(p, w); err != nil {
		return Slot{}, err
	}
	return Slot{p, i, t}, nil
}

// Entry is a live bucket as Scan reports it. Key holds the inline key
// bytes (nil when the slot keeps none) and is valid only during the call it
// is passed to.
type Entry struct {
	Index   uint64
	Kind    vocab.Algorithm
	FreshAt int64
	Key     []byte
}

// Scan visits the slots from index cursor on, at most span of them, and
// calls fn for each one that holds a live bucket. It stops early when fn
// returns false. It returns the cursor to continue from, or 0 once the end
// of the table is reached. Each slot is locked only while its entry is
// copied: fn runs with no lock held, so it may allocate. Buckets created or
// moved during a scan may be missed or seen twice. A wait for a slot's lock
// that outlives w stops the scan with a *LockedError and the cursor of
// that slot.
func (t *Table) Scan(cursor, span uint64, w *Wait, fn func(*Entry) bool) (next uint64, err error) {
	var key [256 - slotKey]byte
	var e Entry
	for i := cursor; i < t.n && i-cursor < span; i++ {
		p := t.slotPtr(i)
		if loadFP(p) == (Fingerprint{}) {
			continue
		}
		if err := t.lockSlot(p, w); err != nil {
			return i, err
		}
		s := Slot{p, i, t}
		live := s.Live()
		if live {
			e = Entry{Index: i, Kind: s.Kind(), FreshAt: s.FreshAt(), Key: key[:copy(key[:], s.Key())]}
			if s.Key() == nil {
				e.Key = nil
			}
		}
		unlockWord(u32at(p, slotLock))
		if live && !fn(&e) {
			return i + 1, nil
		}
	}
	if end := cursor + span; end < t.n && end > cursor {
		return end, nil
	}
	return 0, nil
}

// InlineKeys reports whether the table's slots keep keys inline (slot sizes
// above 64 bytes), which Scan's callers need to list keys.
func (t *Table) InlineKeys() bool { return t.room > 0 }
