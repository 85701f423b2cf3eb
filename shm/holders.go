package shm

import (
	mrand "math/rand/v2"
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

// register claims a free holders entry for a new tag of t, with this
// process's pid and start time. It fails with ErrHolders when every entry
// is taken.
func (t *Table) register() error {
	pid := uint32(os.Getpid())
	started := processStart(int(pid))
	for i := range numHolders {
		e := t.holder(i)
		tag := t.newTag()
		if atomic.CompareAndSwapUint32(u32at(e, 0), 0, tag) {
			atomic.StoreUint32(t.busy(i), 0) // a dead holder's count, if it left one
			atomic.StoreUint32(u32at(e, 4), pid)
			atomic.StoreUint64(u64at(e, 8), started)
			t.gen, t.holderIdx = tag, i
			return nil
		}
	}
	return ErrHolders
}

// newTag draws a tag (1 to 2^15-1) that no registered holder has.
func (t *Table) newTag() uint32 {
	for {
		tag := uint32(mrand.IntN(genMask>>genShift)) + 1
		taken := false
		for i := range numHolders {
			if atomic.LoadUint32(u32at(t.holder(i), 0)) == tag {
				taken = true
				break
			}
		}
		if !taken {
			return tag
		}
	}
}

// deregister frees t's holders entry.
func (t *Table) deregister() {
	e := t.holder(t.holderIdx)
	if atomic.LoadUint32(u32at(e, 0)) != t.gen {
		return // taken over meanwhile: the entry was pruned as dead
	}
	atomic.StoreUint64(u64at(e, 8), 0)
	atomic.StoreUint32(u32at(e, 4), 0)
	atomic.StoreUint32(u32at(e, 0), 0)
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

// pruneHolders frees the entries of holders whose process is gone. The
// owner calls it on open, before it registers.
func (t *Table) pruneHolders() {
	for i := range numHolders {
		e := t.holder(i)
		tag := atomic.LoadUint32(u32at(e, 0))
		if tag == 0 {
			continue
		}
		if pid := atomic.LoadUint32(u32at(e, 4)); pid == 0 || !processAlive(int(pid), atomic.LoadUint64(u64at(e, 8))) {
			atomic.StoreUint64(u64at(e, 8), 0)
			atomic.StoreUint32(u32at(e, 4), 0)
			atomic.CompareAndSwapUint32(u32at(e, 0), tag, 0)
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
		if atomic.LoadUint32(u32at(e, 0)) != 0 {
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
			if tag == 0 || tag == t.gen || atomic.LoadUint32(t.busy(i)) == 0 {
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
