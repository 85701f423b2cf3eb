package shm

import (
	"os"
	"sync/atomic"
	"time"
	"unsafe"
)

// The holders registry (format.go, 0x100): every table open on a file, the
// owner's and those attached to it, in any process, registers a tag there.
// A lock word held under a tag is waited for while its holder lives; one
// held under a tag that is not registered, or whose process has died, is
// taken over (lockWord).

// holder returns the address of holders entry i's tag (pid and start time
// follow it).
func (t *Table) holder(i int) unsafe.Pointer {
	return unsafe.Add(t.base, offHolders+uintptr(i)*holderSize)
}

// A holders entry's tag word: 0 for an entry never used; the tag of the
// holder using it; or, once freed, its last tag with entryFree set. Entry
// i's tags are i | g<<6 for a generation g from 1 to 511 that advances each
// time the entry is taken, so a tag names one registration: a lock word
// left held by a holder that died is never mistaken for a later holder's
// until the entry has been taken 511 times more (and by then any waiter on
// that lock has taken it over).
const (
	entryFree = 1 << 31
	tagGens   = genMask>>genShift>>6 + 1 // 512: generations of an entry's tag, 0 unused
)

// nextTag returns the tag entry i takes when its tag word is v.
func nextTag(i int, v uint32) uint32 {
	g := (v&^entryFree)>>6 + 1
	if g >= tagGens {
		g = 1
	}
	return uint32(i) | g<<6
}

// entryLive reports whether tag word v is a holder's (not free, not unused).
func entryLive(v uint32) bool { return v != 0 && v&entryFree == 0 }

// register claims a free holders entry for a new tag of t, with this
// process's pid and start time. When every entry is taken it frees those
// of processes that are gone, once; it fails with ErrHolders if every
// entry is still a live holder's.
func (t *Table) register() error {
	pid := uint32(os.Getpid())
	started := processStart(int(pid))
	for attempt := 0; attempt < 2; attempt++ {
		for i := range numHolders {
			e := t.holder(i)
			v := atomic.LoadUint32(u32at(e, 0))
			if entryLive(v) {
				continue
			}
			tag := nextTag(i, v)
			if atomic.CompareAndSwapUint32(u32at(e, 0), v, tag) {
				atomic.StoreUint32(t.busy(i), 0) // a dead holder's count, if it left one
				atomic.StoreUint32(u32at(e, 4), pid)
				atomic.StoreUint64(u64at(e, 8), started)
				t.gen, t.holderIdx = tag, i
				return nil
			}
		}
		t.pruneHolders(false)
	}
	return ErrHolders
}

// deregister frees t's holders entry.
func (t *Table) deregister() {
	e := t.holder(t.holderIdx)
	if atomic.LoadUint32(u32at(e, 0)) != t.gen {
		return // freed meanwhile: the entry was pruned as dead
	}
	atomic.StoreUint64(u64at(e, 8), 0)
	atomic.StoreUint32(u32at(e, 4), 0)
	atomic.CompareAndSwapUint32(u32at(e, 0), t.gen, t.gen|entryFree)
}

// holderLive reports whether a lock word tagged tag may be held by a live
// holder: t itself, or a registered holder whose process is alive (or is
// registering).
func (t *Table) holderLive(tag uint32) bool {
	if tag == t.gen {
		return true
	}
	if tag == 0 {
		return false
	}
	for i := range numHolders {
		e := t.holder(i)
		if atomic.LoadUint32(u32at(e, 0)) != tag {
			continue
		}
		pid := atomic.LoadUint32(u32at(e, 4))
		return pid == 0 || processAlive(int(pid), atomic.LoadUint64(u64at(e, 8)))
	}
	return false
}

// pruneHolders frees the entries of holders whose process is gone: the
// owner on open, before it registers (then an entry without a pid, whose
// holder died registering, is gone too: no one registers while the owner
// opens), and any table that finds every entry taken.
func (t *Table) pruneHolders(opening bool) {
	for i := range numHolders {
		e := t.holder(i)
		tag := atomic.LoadUint32(u32at(e, 0))
		if !entryLive(tag) {
			continue
		}
		pid := atomic.LoadUint32(u32at(e, 4))
		if pid == 0 && opening || pid != 0 && !processAlive(int(pid), atomic.LoadUint64(u64at(e, 8))) {
			atomic.CompareAndSwapUint32(u32at(e, 0), tag, tag|entryFree)
		}
	}
}

// ownerLive reports whether the file's owner has opened it and its process
// is alive.
func (t *Table) ownerLive() bool {
	tag := atomic.LoadUint32(u32at(t.base, offOwnerTag))
	return tag != 0 && t.holderLive(tag)
}

// Holders returns the pids of the processes registered on the table, the
// owner's and attached ones (for inspection; a snapshot).
func (t *Table) Holders() []int {
	var pids []int
	for i := range numHolders {
		e := t.holder(i)
		if entryLive(atomic.LoadUint32(u32at(e, 0))) {
			pids = append(pids, int(atomic.LoadUint32(u32at(e, 4))))
		}
	}
	return pids
}

// busy returns the address of holders entry i's count of decisions in
// progress.
func (t *Table) busy(i int) *uint32 { return u32at(t.base, offBusy+uintptr(i)*4) }

// Enter counts a decision of an attached table in, and checks that the
// owner it attached to still serves the file: if not (the owner closed it,
// or a new owner is recovering it), it returns ErrNoOwner and the caller
// must not touch the table; Attach again. Every Enter that returns nil is
// followed by one Exit. On the owner's table both do nothing.
//
// The count and the owner's tag form a handshake (both sequentially
// consistent): an owner zeroes the tag, then waits for every count to be 0
// (quiesce), while Enter raises the count, then reads the tag; one of the
// two sees the other's write.
func (t *Table) Enter() error {
	if t.owner {
		return nil
	}
	b := t.busy(t.holderIdx)
	atomic.AddUint32(b, 1)
	if atomic.LoadUint32(u32at(t.base, offOwnerTag)) != t.ownerSeen {
		atomic.AddUint32(b, ^uint32(0))
		return ErrNoOwner
	}
	return nil
}

// Exit ends a decision that Enter counted in.
func (t *Table) Exit() {
	if !t.owner {
		atomic.AddUint32(t.busy(t.holderIdx), ^uint32(0))
	}
}

// OwnerAlive reports whether the owner this table attached to still serves
// the file: its tag is the file's owner tag and its process lives. It reads
// /proc: callers ask now and then (the direct client, about once a second),
// not per decision.
func (t *Table) OwnerAlive() bool {
	tag := atomic.LoadUint32(u32at(t.base, offOwnerTag))
	return tag != 0 && tag == t.ownerSeen && t.holderLive(tag)
}

// quiesce waits until no attached holder is inside a decision. The owner
// calls it with the owner tag zeroed, so no new decision starts. A holder
// whose process is gone is not waited for: a lock it died holding is taken
// over and its slot repaired, as always. A live holder stopped inside a
// decision (SIGSTOP) is waited for until it goes on or dies: its decision
// may still write.
func (t *Table) quiesce() {
	for i := range numHolders {
		e := t.holder(i)
		for n := 0; ; n++ {
			tag := atomic.LoadUint32(u32at(e, 0))
			if !entryLive(tag) || tag == t.gen || atomic.LoadUint32(t.busy(i)) == 0 {
				break
			}
			if n%checkEvery == checkEvery-1 && !t.holderLive(tag) {
				break
			}
			if n < spinsBeforeYield {
				continue
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
}

// Retire gives up an attached table's holders entry, keeping its mapping,
// once its owner has been replaced (Enter fails): a caller that cannot
// know whether other goroutines still hold the table retires it at once
// and closes it later, when none can. Retire on the owner's table does
// nothing.
func (t *Table) Retire() {
	if !t.owner && atomic.LoadUint32(u32at(t.base, offOwnerTag)) != t.ownerSeen {
		t.deregister()
	}
}
