package shm

import (
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"
)

// Lock words: the spinlock of every slot (its high bits the home slot's
// reach) and of every insert stripe (its high bits a sequence of inserts).
// Both are taken with compare-and-swap and tagged with the holder's tag, a
// 15-bit number drawn when a table is opened or attached and registered
// among the file's holders (holders.go).

// Waiting: a holder never blocks, allocates or makes a syscall, so a lock
// is nearly always free within a few rounds. A waiter spins spinRounds
// rounds, then yields the processor yieldRounds times, then sleeps, from
// minSleep doubling up to maxSleep between looks; after that it parks
// (park.go): one goroutine of the table looks at every parked waiter's
// lock word each maxSleep and wakes those whose lock is free, whose Wait
// is spent, or whose holder is gone. Waiting on a holder that is stopped
// costs no processor, however many wait. A waiter asks, when it starts
// sleeping and then every checkInterval, whether the holder is still
// alive, and takes a lock whose holder is gone over. A Wait bounds how long
// it waits.
const (
	spinRounds    = 64
	yieldRounds   = 64
	minSleep      = 10 * time.Microsecond
	maxSleep      = time.Millisecond
	checkInterval = 10 * time.Millisecond
)

// Wait bounds how long a caller waits for the locks it needs when other
// holders keep them: a slot's, an insert stripe's, the arena's. One Wait
// serves one operation, however many locks it takes: its Budget bounds
// them all together. The zero Wait, like a nil *Wait, waits as long as
// the holder lives.
type Wait struct {
	// Budget is how long the operation's waits may last in all; 0 is no
	// bound. A wait past it fails with a *LockedError (ErrLockWait), and
	// the operation must undo what it did and return it.
	Budget time.Duration
	// Blocking, if not nil, is called once, the first time a lock is still
	// held after the first spin: the caller is about to yield and sleep.
	// An event loop that must not sleep hands its other work over there.
	Blocking func()

	waited  time.Duration // spent in earlier waits
	blocked bool          // Blocking was called
}

// lockWord takes the lock bit of the word at l, tagging it with t's tag,
// and leaves its high bits as they are. It reports whether it took the lock
// over from a holder that is gone (a process that died holding it, or a
// word damaged on disk): the data it guards may be half-written. A wait
// that outlives w's budget returns a *LockedError and takes nothing.
func (t *Table) lockWord(l *uint32, w *Wait) (stale bool, err error) {
	v := atomic.LoadUint32(l)
	if v&lockHeld == 0 && atomic.CompareAndSwapUint32(l, v, v&^genMask|t.gen<<genShift|lockHeld) {
		return false, nil
	}
	return t.waitWord(l, w)
}

// waitWord is lockWord's wait for a lock that was not free at once.
func (t *Table) waitWord(l *uint32, w *Wait) (stale bool, err error) {
	mine := t.gen<<genShift | lockHeld
	var (
		start, since, checked time.Time // when the wait began to count; when its holder was first seen; last asked about
		holder                = ^uint32(0)
		sleep                 = minSleep
	)
	for i := 1; ; i++ {
		v := atomic.LoadUint32(l)
		tag := (v & genMask) >> genShift
		if v&lockHeld == 0 {
			if atomic.CompareAndSwapUint32(l, v, v&^genMask|mine) {
				w.spend(start)
				return false, nil
			}
			continue
		}
		if i <= spinRounds {
			continue
		}
		if start.IsZero() {
			start = time.Now()
			if w != nil && w.Blocking != nil && !w.blocked {
				w.blocked = true
				w.Blocking()
			}
		}
		if i <= spinRounds+yieldRounds {
			runtime.Gosched()
			continue
		}
		now := time.Now()
		if tag != holder {
			holder, since, checked = tag, now, time.Time{}
		}
		if checked.IsZero() || now.Sub(checked) >= checkInterval {
			checked = now
			if !t.holderAlive(tag, now) {
				if atomic.CompareAndSwapUint32(l, v, v&^genMask|mine) {
					w.spend(start)
					return true, nil
				}
				continue
			}
		}
		var until time.Time // when the budget is spent; zero for none
		if w != nil && w.Budget > 0 {
			left := w.Budget - w.waited - now.Sub(start)
			if left <= 0 {
				w.spend(start)
				return false, &LockedError{Pid: t.holderPid(tag), Held: now.Sub(since)}
			}
			until = now.Add(left)
		}
		if sleep < maxSleep {
			time.Sleep(sleep)
			sleep *= 2
			continue
		}
		t.park(l, until)
		// Woken: the lock was free (others may be after it too: spin
		// again), the budget is spent, or the holder may be gone.
		i, checked = 0, time.Time{}
	}
}

// spend adds a wait that began at start (zero: it did not count) to w.
func (w *Wait) spend(start time.Time) {
	if w != nil && !start.IsZero() {
		w.waited += time.Since(start)
	}
}

// aliveFor is how long a holder found alive is taken to be: waiters on the
// same stopped holder ask /proc about it once between them, not each.
const aliveFor = checkInterval

// holderAlive is holderLive for a waiter at now, through a one-entry cache
// of the holder last found alive.
func (t *Table) holderAlive(tag uint32, now time.Time) bool {
	ms := uint64(now.Sub(processStartTime) / time.Millisecond)
	if c := t.alive.Load(); c>>48 == uint64(tag) && ms-c&(1<<48-1) < uint64(aliveFor/time.Millisecond) {
		return true
	}
	if !t.holderLive(tag) {
		return false
	}
	t.alive.Store(uint64(tag)<<48 | ms&(1<<48-1))
	return true
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
func (t *Table) lockSlot(p unsafe.Pointer, w *Wait) error {
	stale, err := t.lockWord(u32at(p, slotLock), w)
	switch {
	case err != nil:
		return err
	case stale:
		t.repair(p, true)
	case t.checkOnUse.Load() && *u32at(p, slotSum) != checksumOf(p):
		t.repair(p, false)
	}
	return nil
}

// reach returns how far past home slot i lookups must probe.
func (t *Table) reach(i uint64) uint64 {
	return uint64(atomic.LoadUint32(u32at(t.slotPtr(i), slotLock)) >> reachShift)
}

// raiseReach makes home slot i's reach at least d. The reach is part of the
// slot's checksum, so it changes only under the slot's lock; it only grows
// while the table is open, and recovery recomputes it. The caller must hold
// no other slot lock.
func (t *Table) raiseReach(i, d uint64, w *Wait) error {
	p := t.slotPtr(i)
	if t.reach(i) >= d {
		return nil
	}
	if err := t.lockSlot(p, w); err != nil {
		return err
	}
	if l := u32at(p, slotLock); uint64(atomic.LoadUint32(l)>>reachShift) < d {
		setReach(l, d)
		*u32at(p, slotSum) = checksumOf(p)
	}
	unlockWord(u32at(p, slotLock))
	return nil
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

// lockStripe takes the stripe lock at l and returns its sequence, and
// whether it took the lock over from a holder that is gone (which may have
// died creating a bucket: see Claim).
func (t *Table) lockStripe(l *uint32, w *Wait) (seq uint32, stale bool, err error) {
	if stale, err = t.lockWord(l, w); err != nil {
		return 0, false, err
	}
	return atomic.LoadUint32(l) >> seqShift, stale, nil
}

// unlockStripe releases the stripe lock at l, whose sequence was seq,
// advancing the sequence if a bucket was created under it.
func unlockStripe(l *uint32, seq uint32, created bool) {
	if created {
		seq++
	}
	atomic.StoreUint32(l, seq<<seqShift)
}
