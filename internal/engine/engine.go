package engine

import (
	"cmp"
	"fmt"
	"math"
	"time"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/shm"
)

// Engine runs limits on the buckets of one table.
type Engine struct {
	t     *shm.Table
	probe func(slots int) // SetProbeHook's; nil without
}

// SetProbeHook has hook told, for each acquire that finds or creates its
// bucket, the bucket's displacement from its home slot (the probe's
// length), as metrics want it. Set it before the engine is shared.
func (e *Engine) SetProbeHook(hook func(slots int)) { e.probe = hook }

// New returns an Engine over t, which it closes on Close. Open and Attach
// are the usual ways to get one; New is for a table made otherwise, such as
// shm.NewHeap's in tests.
func New(t *shm.Table) *Engine { return &Engine{t: t} }

// Table returns the engine's table, for tests and tools that examine it.
func (e *Engine) Table() *shm.Table { return e.t }

// fingerprint identifies the bucket of key under l.
func (e *Engine) fingerprint(key []byte, l *Limit) shm.Fingerprint {
	return e.t.Fingerprint(key, l.ident)
}

// Time is when a request is decided: two clocks, because a client may send
// its own time (smyte/ratelimit's AT) and must not decide more with it than
// its own request; and how long it may wait for its buckets' locks.
type Time struct {
	// Now is the server's clock, Unix ns. It alone decides which slots hold
	// buckets that are fresh again and may be reclaimed by other buckets.
	Now int64
	// At is the request's time, Unix ns: the algorithm decides at it. It is
	// Now unless the client sent a time, and must be within
	// [0, bucket.MaxTime] (ErrTime).
	At int64
	// Wait bounds how long the request waits, in all, for locks that other
	// holders keep (a process stopped while it decides on the same bucket):
	// past it the request fails with a *LockedError and changes nothing.
	// 0 means DefaultLockWait.
	Wait time.Duration
	// Blocking, if set, is called once if the request finds a lock still
	// held after a short spin, before it yields or sleeps waiting: an event
	// loop hands its other connections over there (see shm.Wait).
	Blocking func()
}

// DefaultLockWait is a request's Time.Wait when it sets none.
const DefaultLockWait = time.Second

// At returns the Time of a request decided at the server's clock now.
func At(now int64) Time { return Time{Now: now, At: now} }

// wait returns the Wait of one operation at t: it counts the operation's
// lock waits, on the operation's stack.
func (t *Time) wait() shm.Wait {
	return shm.Wait{Budget: cmp.Or(t.Wait, DefaultLockWait), Blocking: t.Blocking}
}

// check validates a request's key, limit, cost and time.
func check(key []byte, l *Limit, cost int64, t Time) error {
	if passes(key, l, cost, t.At) {
		return nil
	}
	return checkFailed(key, l, cost, t.At)
}

// passes reports whether a request passes check, inline in the caller:
// a limit, a key of 1 to MaxKeyLen bytes, a cost of at least 0 and a
// valid time (bucket.ValidTime: 0 to bucket.MaxTime).
func passes(key []byte, l *Limit, cost int64, at int64) bool {
	return l != nil && l.valid && uint(len(key)-1) < MaxKeyLen && cost >= 0 && uint64(at) <= uint64(bucket.MaxTime)
}

// checkFailed is check's error for a request it does not pass.
func checkFailed(key []byte, l *Limit, cost int64, at int64) error {
	if l == nil || !l.valid {
		return ErrInvalidLimit
	}
	if err := CheckKeyCost(key, cost); err != nil {
		return err
	}
	if !bucket.ValidTime(at) {
		return fmt.Errorf("%w: %d", ErrTime, at)
	}
	return nil
}

// load copies the state of a locked slot into s, as l's algorithm (one of
// fixed size) must see it: a new bucket (at t.At) if the slot is not live,
// a drained one if it was found torn or holds another algorithm. It
// reports whether s replaced the slot's words, so the slot must be written
// even if the algorithm then changes nothing: a repair is written by
// whatever request finds it.
//
// The drained state is anchored when the damage was found: at the server's
// clock, or at the request's time if that is later, so that neither clock
// sees a refill the bucket never had (a drained state anchored at the
// server's clock would look refilled to a request from far ahead).
func load(t Time, l *Limit, sl shm.Slot, s *bucket.State) (replaced bool) {
	switch {
	case !sl.Live():
		l.b.Init(t.At, s, nil)
		return false // a claimed slot stays reclaimable unless the algorithm writes
	case !inPlace(l, sl):
		l.b.Drained(max(t.Now, t.At), s, nil)
		return true
	}
	*s = bucket.State(*sl.State())
	return false
}

// inPlace reports whether a locked slot's state words can be handed to l's
// algorithm as they are: the slot is live, sound, and of l's algorithm.
func inPlace(l *Limit, sl shm.Slot) bool {
	return sl.Live() && !sl.Conservative() && sl.Kind() == l.b.Algorithm
}

// open readies the bucket in the locked slot sl for l's algorithm to decide
// on, every algorithm alike: s is the words of its state (the slot's own,
// or for an algorithm of fixed size whose slot holds no sound bucket of it,
// *tmp, loaded as load says) and ext its block (nil for an algorithm of
// fixed size; an extended one's is readied in place, as loadExt says).
// replaced reports that the slot must be written whatever the algorithm
// then does (a repair). On an error the slot is released, or cleared.
func open(t Time, l *Limit, sl shm.Slot, tmp *bucket.State, w *shm.Wait) (s *bucket.State, ext []int64, replaced bool, err error) {
	if l.ext == 0 && inPlace(l, sl) { // the common case, inlined: the slot's own words
		return (*bucket.State)(sl.State()), nil, false, nil
	}
	return openSlow(t, l, sl, tmp, w)
}

// openSlow is open for a slot whose words are not handed over as they are.
func openSlow(t Time, l *Limit, sl shm.Slot, tmp *bucket.State, w *shm.Wait) (s *bucket.State, ext []int64, replaced bool, err error) {
	if l.ext == 0 {
		return tmp, nil, load(t, l, sl, tmp), nil
	}
	ext, replaced, err = loadExt(t, l, sl, w)
	return (*bucket.State)(sl.State()), ext, replaced, err
}

// finish ends a decision d on the bucket open gave as s and ext in the
// locked slot sl: if write, it writes s to the slot (when s is a copy) and
// commits it; otherwise it releases the slot, or clears it if it holds no
// bucket but was given a block (a new bucket that nothing was consumed
// from stays absent).
func finish(sl shm.Slot, l *Limit, s *bucket.State, ext []int64, d *bucket.Decision, t Time, write bool, w *shm.Wait) {
	if write {
		if st := (*bucket.State)(sl.State()); s != st {
			*st = *s
		}
		commit(sl, l, ext, d, t)
		return
	}
	if l.ext > 0 && !sl.Live() {
		sl.Clear(w)
		return
	}
	sl.Release()
}

// put writes the state s and the block words (nil for an algorithm of
// fixed size) of a bucket into the locked slot sl, whose block is ext, and
// commits it. An extended algorithm's state word 2 is the table's (the
// block's reference): it is not written.
func put(sl shm.Slot, l *Limit, s *bucket.State, ext, words []int64, d *bucket.Decision, t Time) {
	st := sl.State()
	if l.ext > 0 {
		copy(ext, words)
		st[0], st[1] = s[0], s[1]
	} else {
		*st = [shm.StateWords]int64(*s)
	}
	commit(sl, l, ext, d, t)
}

// commit marks the locked slot live and unlocks it. d is a decision made at
// t.At that left the bucket, of block ext, in the slot's state. When t.At
// is the server's clock, d's ResetAfter says when the bucket is fresh again
// (it is bucket.Limit.FreshAt - At, or 0 if fresh now) without recomputing
// it; a request at its own time asks the algorithm, so that a client's
// clock ahead of the server's cannot make the slot reclaimable early.
//
// A bucket decided at a time behind the server's clock is kept, on the
// server's clock, for as long as it needs to be fresh again from that time:
// otherwise it would be reclaimable at once, and a client replaying past
// times would find it gone and new, admitting its limit again.
func commit(sl shm.Slot, l *Limit, ext []int64, d *bucket.Decision, t Time) {
	if t.At != t.Now {
		freshAt := l.b.FreshAt((*bucket.State)(sl.State()), ext)
		if t.At < t.Now && freshAt > t.At {
			if wait := freshAt - t.At; wait <= math.MaxInt64-t.Now {
				freshAt = max(freshAt, t.Now+wait)
			} else {
				freshAt = math.MaxInt64
			}
		}
		sl.Commit(freshAt)
		return
	}
	freshAt := int64(math.MaxInt64)
	if d.ResetAfter <= math.MaxInt64-t.At {
		freshAt = t.At + d.ResetAfter
	}
	sl.Commit(freshAt)
}

// Acquire decides a request of cost against key's bucket under l at t.At
// and, if the request is allowed (or the semantics of f say so), consumes
// it. It writes the decision to *d. A cost of 0 is a peek at cost 0: it
// neither creates nor changes the bucket.
//
// It finds the bucket's slot and locks it in one probe of the table; a
// bucket that does not exist is decided on a new state first and its slot
// claimed only if the request changes it, from where the probe ended.
func (e *Engine) Acquire(d *bucket.Decision, key []byte, l *Limit, cost int64, t Time, f bucket.Flags) error {
	if !passes(key, l, cost, t.At) {
		return checkFailed(key, l, cost, t.At)
	}
	if err := e.enter(); err != nil {
		return err
	}
	defer e.t.Exit()
	if l.b.Algorithm == bucket.Concurrency {
		return ErrLeaseOnly
	}
	w := t.wait()
	if cost == 0 {
		return e.peek(d, key, l, t, true, &w)
	}
	sl, ok, pr, err := e.t.Find(e.fingerprint(key, l), &w)
	if err != nil {
		return tableErr(err)
	}
	if ok && e.probe != nil {
		e.probe(sl.Displacement())
	}
	if ok && l.ext == 0 && inPlace(l, sl) {
		// The common case, open's first, without its call: decide on the
		// slot's own words.
		s := (*bucket.State)(sl.State())
		finish(sl, l, s, nil, d, t, l.b.Decide(t.At, s, nil, cost, f, d), &w)
		return nil
	}
	if !ok {
		var done bool
		if sl, done, err = e.create(d, key, l, cost, t, f, &pr, &w); done || err != nil {
			return err
		}
		// Another request created the bucket since the Find: decide on it.
	}
	var tmp bucket.State
	s, ext, replaced, err := open(t, l, sl, &tmp, &w)
	if err != nil {
		return err
	}
	changed := l.b.Decide(t.At, s, ext, cost, f, d)
	finish(sl, l, s, ext, d, t, changed || replaced, &w)
	return nil
}

// create decides a request on a new bucket of key under l, and creates the
// bucket only if the request changes it: the slot claimed for it where a
// Find that did not find it left off (pr) then takes the state already
// decided. It reports whether it is done; if not, another request created
// the bucket since the Find, and sl is its slot, locked.
func (e *Engine) create(d *bucket.Decision, key []byte, l *Limit, cost int64, t Time, f bucket.Flags, pr *shm.Probe, w *shm.Wait) (sl shm.Slot, done bool, err error) {
	var s bucket.State
	words, buf := fresh(t, l, &s)
	defer putScratch(buf)
	if !l.b.Decide(t.At, &s, words, cost, f, d) {
		return sl, true, nil
	}
	sl, created, err := e.claim(pr, l, key, t, w)
	if err != nil || !created {
		return sl, err != nil, err
	}
	var ext []int64
	if l.ext > 0 {
		if ext, _, err = sl.Ext(l.ext, t.Now, w); err != nil {
			sl.Clear(w)
			return sl, true, extErr(err)
		}
	}
	put(sl, l, &s, ext, words, d, t)
	return sl, true, nil
}

// fresh sets s, and for an extended algorithm a block of scratch words, to
// a new bucket of l at t.At: what a request decides on when the bucket does
// not exist. The caller gives the block back with putScratch.
func fresh(t Time, l *Limit, s *bucket.State) (words []int64, buf *[maxExtWords]int64) {
	if l.ext > 0 {
		buf = scratch.Get().(*[maxExtWords]int64)
		words = buf[:l.ext]
	}
	l.b.Init(t.At, s, words)
	return words, buf
}

// putScratch gives back the scratch words fresh took, if any.
func putScratch(buf *[maxExtWords]int64) {
	if buf != nil {
		scratch.Put(buf)
	}
}

// claim creates key's bucket under l where a Find that did not find it
// left off (shm.Table.Claim) and tells the probe hook its displacement; it
// returns the bucket's slot, locked, and whether it created it (not:
// another request created it since the Find).
func (e *Engine) claim(pr *shm.Probe, l *Limit, key []byte, t Time, w *shm.Wait) (shm.Slot, bool, error) {
	sl, created, err := e.t.Claim(pr, l.b.Algorithm, key, t.Now, w)
	if err != nil {
		return sl, false, tableErr(err)
	}
	if created && e.probe != nil {
		e.probe(sl.Displacement())
	}
	return sl, created, nil
}

// Peek writes to *d the bucket as it stands at t.At, without consuming
// anything or creating the bucket: Remaining and ResetAfter as they are now
// (what a cost-0 request reports, what RL.GET reports), and Allowed,
// RetryAfter and Delay for a request of cost 1.
func (e *Engine) Peek(d *bucket.Decision, key []byte, l *Limit, t Time) error {
	if err := check(key, l, 1, t); err != nil {
		return err
	}
	if err := e.enter(); err != nil {
		return err
	}
	defer e.t.Exit()
	w := t.wait()
	return e.peek(d, key, l, t, false, &w)
}

// peek writes to *d what Peek reports of key's bucket (cost0: what an
// acquire of cost 0 reports), repairing a slot found torn on the way.
func (e *Engine) peek(d *bucket.Decision, key []byte, l *Limit, t Time, cost0 bool, w *shm.Wait) error {
	sl, ok, err := e.t.Lookup(e.fingerprint(key, l), w)
	if err != nil {
		return tableErr(err)
	}
	var tmp bucket.State
	if ok && sl.Live() {
		s, ext, replaced, err := open(t, l, sl, &tmp, w)
		if err != nil {
			return err
		}
		look(d, l, t.At, s, ext, cost0)
		finish(sl, l, s, ext, d, t, replaced, w)
		return nil
	}
	if ok {
		sl.Release()
	}
	words, buf := fresh(t, l, &tmp)
	defer putScratch(buf)
	look(d, l, t.At, &tmp, words, cost0)
	return nil
}

// look writes to *d what peek reports of the bucket in s and ext at at.
func look(d *bucket.Decision, l *Limit, at int64, s *bucket.State, ext []int64, cost0 bool) {
	if cost0 {
		l.b.Decide(at, s, ext, 0, 0, d)
	} else {
		l.b.Peek(at, s, ext, d)
	}
}

// Refund gives amount tokens back to key's bucket at t.At, capped at the
// limit's maximum, and writes to *d the bucket afterwards, as Peek reports
// it. A bucket that does not exist is full: refunding it changes nothing.
// With bucket.Cell a gcra refund is redis-cell's negative quantity, and *d
// its reply (see bucket.Cell).
func (e *Engine) Refund(d *bucket.Decision, key []byte, l *Limit, amount int64, t Time, f bucket.Flags) error {
	if err := check(key, l, amount, t); err != nil {
		return err
	}
	if err := e.enter(); err != nil {
		return err
	}
	defer e.t.Exit()
	w := t.wait()
	return e.refund(d, key, l, amount, t, f, &w)
}

// refund is Refund once the request is checked and counted in.
func (e *Engine) refund(d *bucket.Decision, key []byte, l *Limit, amount int64, t Time, f bucket.Flags, w *shm.Wait) error {
	if l.b.Algorithm == bucket.Concurrency {
		return ErrLeaseOnly
	}
	cell := f&bucket.Cell != 0 && l.b.Algorithm == bucket.GCRA
	sl, ok, err := e.t.Lookup(e.fingerprint(key, l), w)
	if err != nil {
		return tableErr(err)
	}
	if !ok || !sl.Live() || amount == 0 && !cell {
		if ok {
			sl.Release()
		}
		if cell { // redis-cell's reply for a new bucket, which is not kept
			var s bucket.State
			l.b.Init(t.At, &s, nil)
			l.b.DecideRefund(t.At, &s, nil, amount, f, d)
			return nil
		}
		return e.peek(d, key, l, t, false, w)
	}
	var tmp bucket.State
	s, ext, replaced, err := open(t, l, sl, &tmp, w)
	if err != nil {
		return err
	}
	changed := l.b.DecideRefund(t.At, s, ext, amount, f, d)
	if !cell {
		l.b.Peek(t.At, s, ext, d)
	}
	finish(sl, l, s, ext, d, t, changed || replaced, w)
	return nil
}

// Reset forgets key's bucket under l, which then behaves as new. It reports
// whether the bucket existed. t's clocks are not read: only its waits.
func (e *Engine) Reset(key []byte, l *Limit, t Time) (bool, error) {
	if err := check(key, l, 0, Time{}); err != nil {
		return false, err
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
	if !ok {
		return false, nil
	}
	existed := sl.Live()
	sl.Clear(&w)
	return existed, nil
}

// Hold locks key's bucket under l as a decision does, claiming a slot for
// it if it does not exist (at the server's clock now), and returns the
// function that releases it unchanged: until then, nothing else decides on
// the bucket, in any process. It is for tests of what waits for a lock (a
// process stopped or killed in the middle of a decision); decisions hold
// their locks for nanoseconds.
func (e *Engine) Hold(key []byte, l *Limit, now int64) (release func(), err error) {
	if err := check(key, l, 0, At(now)); err != nil {
		return nil, err
	}
	if err := e.enter(); err != nil {
		return nil, err
	}
	sl, _, err := e.t.LookupOrInsert(e.fingerprint(key, l), l.b.Algorithm, key, now, nil)
	if err != nil {
		e.t.Exit()
		return nil, tableErr(err)
	}
	return func() { sl.Release(); e.t.Exit() }, nil
}

// enter counts a decision in on an attached table (see shm.Table.Enter);
// it fails with ErrNoOwner once the owner it attached to stopped serving
// the file. On the owner's table it does nothing.
func (e *Engine) enter() error {
	if e.t.Enter() != nil {
		return ErrNoOwner
	}
	return nil
}
