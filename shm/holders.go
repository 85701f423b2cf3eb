package shm

import (
	"fmt"
	"os"
	"sync/atomic"
	"time"
	"unsafe"
)

// The holders registry (format.go; at the end of the file from version 6,
// at 0x100 before): every table open on a file, the owner's and those
// attached to it, in any process, registers a tag there. A lock word held
// under a tag is waited for while its holder lives; one held under a tag
// that is not registered, or whose process has died, is taken over
// (lockWord).

// loadHolders finds the registry of t's format version.
func (t *Table) loadHolders() {
	if t.version >= holdersVersion {
		off := registryOffset(t.n, int(t.slotSize), t.cells)
		t.holders = unsafe.Add(t.base, off)
		t.busyBase = unsafe.Add(t.base, off+offBusy)
		t.busyStep, t.nHolders = busyStride, NumHolders
		return
	}
	t.holders = unsafe.Add(t.base, offV5Holders)
	t.busyBase = unsafe.Add(t.base, offV5Busy)
	t.busyStep, t.nHolders = 4, v5Holders
	if t.version < 3 {
		t.nHolders = 0 // no registry; its bytes are zero
	}
}

// holder returns the address of holders entry i's tag (pid and start time
// follow it).
func (t *Table) holder(i int) unsafe.Pointer {
	return unsafe.Add(t.holders, uintptr(i)*holderSize)
}

// busy returns the address of holders entry i's count of decisions in
// progress.
func (t *Table) busy(i int) *uint32 {
	return (*uint32)(unsafe.Add(t.busyBase, uintptr(i)*t.busyStep))
}

// A holders entry's tag word: 0 for an entry never used; the tag of the
// holder using it; or, once freed, its last tag with entryFree set.
const entryFree = 1 << 31

// entryLive reports whether tag word v is a holder's (not free, not unused).
func entryLive(v uint32) bool { return v != 0 && v&entryFree == 0 }

// entryOf returns the live holders entry whose tag is tag, or nil.
func (t *Table) entryOf(tag uint32) unsafe.Pointer {
	if tag == 0 {
		return nil
	}
	for i := range t.nHolders {
		if e := t.holder(i); atomic.LoadUint32(u32at(e, 0)) == tag {
			return e
		}
	}
	return nil
}

// drawTag returns a tag that no live holder has: the next after the file's
// last tag drawn (1 to maxTag, in turn). Two tables that register at once
// draw two tags.
func (t *Table) drawTag() uint32 {
	for {
		tag := atomic.AddUint32(u32at(t.base, offLastTag), 1)%maxTag + 1
		if t.entryOf(tag) == nil {
			return tag
		}
	}
}

// register claims a free holders entry for a new tag of t, with this
// process's pid and start time. When every entry is taken it frees those
// of processes that are gone, once; it fails with ErrHolders if every
// entry is still a live holder's.
func (t *Table) register() error {
	pid := uint32(os.Getpid())
	started := processStart(int(pid))
	for attempt := 0; attempt < 2; attempt++ {
		for i := range t.nHolders {
			e := t.holder(i)
			v := atomic.LoadUint32(u32at(e, 0))
			if entryLive(v) {
				continue
			}
			tag := t.drawTag()
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
	return fmt.Errorf("%w: %d processes have it open, the most a state file takes", ErrHolders, t.nHolders)
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
// registering). It reads /proc.
func (t *Table) holderLive(tag uint32) bool {
	if tag == t.gen {
		return true
	}
	e := t.entryOf(tag)
	if e == nil {
		return false
	}
	pid := atomic.LoadUint32(u32at(e, 4))
	return pid == 0 || processAlive(int(pid), atomic.LoadUint64(u64at(e, 8)))
}

// holderPid returns the pid of the holder whose tag is tag, 0 if none is
// registered (or it is registering).
func (t *Table) holderPid(tag uint32) int {
	if tag == t.gen {
		return os.Getpid()
	}
	if e := t.entryOf(tag); e != nil {
		return int(atomic.LoadUint32(u32at(e, 4)))
	}
	return 0
}

// pruneHolders frees the entries of holders whose process is gone: the
// owner on open, before it registers (then an entry without a pid, whose
// holder died registering, is gone too: no one registers while the owner
// opens), and any table that finds every entry taken.
func (t *Table) pruneHolders(opening bool) {
	for i := range t.nHolders {
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
	for i := range t.nHolders {
		e := t.holder(i)
		if entryLive(atomic.LoadUint32(u32at(e, 0))) {
			pids = append(pids, int(atomic.LoadUint32(u32at(e, 4))))
		}
	}
	return pids
}

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

// quiesce's pace: it sleeps this long between looks, and asks whether the
// holder lives every so many looks.
const (
	quiesceSleep      = 50 * time.Microsecond
	quiesceCheckEvery = 256
)

// quiesce waits until no attached holder is inside a decision. The owner
// calls it with the owner tag zeroed, so no new decision starts. A holder
// whose process is gone is not waited for: a lock it died holding is taken
// over and its slot repaired, as always. A live holder stopped inside a
// decision (SIGSTOP) is waited for until it goes on or dies: its decision
// may still write.
func (t *Table) quiesce() {
	for i := range t.nHolders {
		e := t.holder(i)
		for n := 0; ; n++ {
			tag := atomic.LoadUint32(u32at(e, 0))
			if !entryLive(tag) || tag == t.gen || atomic.LoadUint32(t.busy(i)) == 0 {
				break
			}
			if n%quiesceCheckEvery == quiesceCheckEvery-1 && !t.holderLive(tag) {
				break
			}
			if n < spinRounds {
				continue
			}
			time.Sleep(quiesceSleep)
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
