package engine

import (
	"errors"
	"fmt"
	"sync"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/shm"
)

// Extended algorithms (sliding_log, window_counters, concurrency) keep words
// beyond the slot's three in a block of the state file's arena (shm.Slot.Ext):
// the slot holds state word 0 (the algorithm's), word 1 (the block's
// checksum, which the algorithm keeps) and word 2 (the block, the table's).
// They go the same ways as the algorithms of fixed size (engine.go: open,
// finish, put): decide on the slot's own words when the bucket is there and
// sound, decide a new bucket before claiming a slot for it, and write a
// repair whatever the outcome; loadExt readies the block on the way.

var (
	// ErrArenaFull is returned when a new bucket of an extended algorithm
	// finds no room for its block in the state file's arena. It is an
	// ErrTableFull.
	ErrArenaFull = fmt.Errorf("%w: the arena has no room for the new bucket's block (sliding_log, window_counters, concurrency); create the state file with more --arena-cells", ErrTableFull)
	// ErrLeaseOnly is returned for an acquire, refund or MULTI item with a
	// concurrency limit: its slots are taken with Lease and given back with
	// Release. It is an ErrInvalidLimit.
	ErrLeaseOnly error = invalidLimit{errors.New("concurrency limits take LEASE and RELEASE")}
	// ErrNotConcurrency is returned by Lease and Release for a limit that is
	// not a concurrency limit. It is an ErrInvalidLimit.
	ErrNotConcurrency error = invalidLimit{errors.New("only concurrency limits take leases")}
)

// extErr translates the table's errors for a block.
func extErr(err error) error {
	if errors.Is(err, shm.ErrArenaFull) || errors.Is(err, shm.ErrNoArena) {
		return ErrArenaFull
	}
	return tableErr(err)
}

// maxExtWords is the longest block of any limit (bucket.Limit.ExtWords).
const maxExtWords = max(bucket.MaxLogLimit, bucket.MaxCounters+1, 2*bucket.MaxConcurrency)

// scratch holds the words of a new bucket decided before a slot is claimed
// for it, and of peeks at buckets that do not exist.
var scratch = sync.Pool{New: func() any { return new([maxExtWords]int64) }}

// loadExt readies the locked slot's block for l's algorithm: the block as it
// stands for a sound bucket of l's algorithm, a new bucket's (at t.At) for a
// slot that holds none, a drained one for a slot found torn or of another
// algorithm. replaced reports that the slot must be written whatever the
// algorithm then does (a repair). On an error the slot is released, or
// cleared if it held no bucket.
func loadExt(t Time, l *Limit, sl shm.Slot, w *shm.Wait) (ext []int64, replaced bool, err error) {
	ext, replaced, err = loadExtHeld(t, l, sl, w)
	if err != nil {
		if sl.Live() {
			sl.Release()
		} else {
			sl.Clear(w)
		}
	}
	return ext, replaced, err
}

// loadExtHeld is loadExt for a slot held among others (Multi): it leaves
// the slot locked on an error. A new bucket's state is written in place
// (the slot is not live: cleared if nothing is committed), a drained one
// too (replaced: it must be committed whatever happens).
func loadExtHeld(t Time, l *Limit, sl shm.Slot, w *shm.Wait) (ext []int64, replaced bool, err error) {
	ext, fresh, err := sl.Ext(l.ext, t.Now, w)
	if err != nil {
		return nil, false, extErr(err)
	}
	s := (*bucket.State)(sl.State())
	switch {
	case !sl.Live():
		l.b.Init(t.At, s, ext)
	case fresh || !inPlace(l, sl):
		l.b.Drained(max(t.Now, t.At), s, ext)
		return ext, true, nil
	}
	return ext, false, nil
}

// Lease takes one of the slots of key's concurrency bucket under l at the
// server's clock t.Now (a lease is about real time: t.At is not read), under
// the id id, which the caller draws at random so that no lease's id can be
// told from another's (bucket.Limit.AcquireLease: 0 or an id the bucket
// holds already is replaced). It writes the decision to *d and returns the
// lease's id, never 0, if it was allowed, else 0.
func (e *Engine) Lease(d *bucket.Decision, key []byte, l *Limit, t Time, id int64) (lease int64, err error) {
	t.At = t.Now
	if err := check(key, l, 1, t); err != nil {
		return 0, err
	}
	if l.b.Algorithm != bucket.Concurrency {
		return 0, ErrNotConcurrency
	}
	if err := e.enter(); err != nil {
		return 0, err
	}
	defer e.t.Exit()
	w := t.wait()
	sl, _, err := e.t.LookupOrInsert(e.fingerprint(key, l), l.b.Algorithm, key, t.Now, &w)
	if err != nil {
		return 0, tableErr(err)
	}
	s, ext, replaced, err := open(t, l, sl, nil, &w)
	if err != nil {
		return 0, err
	}
	lease, changed := l.b.AcquireLease(t.Now, s, ext, id, d)
	finish(sl, l, s, ext, d, t, changed || replaced, &w)
	return lease, nil
}

// Release gives back the lease of key's concurrency bucket under l, at the
// server's clock t.Now. It reports whether the lease was held (false for a
// lease unknown, released already or expired), and writes to *d the bucket
// afterwards, as Peek reports it.
func (e *Engine) Release(d *bucket.Decision, key []byte, l *Limit, lease int64, t Time) (released bool, err error) {
	t.At = t.Now
	if err := check(key, l, 0, t); err != nil {
		return false, err
	}
	if l.b.Algorithm != bucket.Concurrency {
		return false, ErrNotConcurrency
	}
	if err := e.enter(); err != nil {
		return false, err
	}
	defer e.t.Exit()
	w := t.wait()
	sl, ok, err := e.t.Lookup(e.fingerprint(key, l), &w)
	if err != nil {
		return false, tableErr(err)
	}
	if !ok || !sl.Live() {
		if ok {
			sl.Release()
		}
		return false, e.peek(d, key, l, t, false, &w)
	}
	s, ext, replaced, err := open(t, l, sl, nil, &w)
	if err != nil {
		return false, err
	}
	released, changed := l.b.ReleaseLease(t.Now, s, ext, lease, d)
	l.b.Peek(t.Now, s, ext, d)
	finish(sl, l, s, ext, d, t, changed || replaced, &w)
	return released, nil
}
