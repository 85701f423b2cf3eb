package engine

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/cespare/xxhash/v2"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/shm"
)

// Engine runs limits on the buckets of one table.
type Engine struct {
	t *shm.Table
}

// New returns an Engine over t. The caller keeps ownership of t and closes
// it after the last operation.
func New(t *shm.Table) *Engine { return &Engine{t: t} }

// Table returns the engine's table.
func (e *Engine) Table() *shm.Table { return e.t }

// identLen is the length of the encoding of a bucket's identity besides its
// key: the algorithm byte and the three identity words, little-endian. Its
// xxhash64 is the ident of shm.Table.Fingerprint.
const identLen = 1 + 3*8

// Limit is a validated limit ready for the engine: a bucket.Limit and the
// encoding of its identity. Build one with NewLimit; the zero Limit is
// refused by every operation. A Limit is a value and may be shared by
// goroutines.
type Limit struct {
	b     bucket.Limit
	ident uint64 // the bucket identity digest
	valid bool
}

// NewLimit validates b and returns it as a Limit.
func NewLimit(b bucket.Limit) (Limit, error) {
	if err := b.Validate(); err != nil {
		return Limit{}, err
	}
	var enc [identLen]byte
	enc[0] = byte(b.Algorithm)
	id := b.Identity()
	binary.LittleEndian.PutUint64(enc[1:], uint64(id[0]))
	binary.LittleEndian.PutUint64(enc[9:], uint64(id[1]))
	binary.LittleEndian.PutUint64(enc[17:], uint64(id[2]))
	return Limit{b: b, ident: xxhash.Sum64(enc[:]), valid: true}, nil
}

// MustLimit is NewLimit for limits known to be valid, as in tests and
// examples; it panics on an invalid one.
func MustLimit(b bucket.Limit) Limit {
	l, err := NewLimit(b)
	if err != nil {
		panic(err)
	}
	return l
}

// Bucket returns the limit's algorithm and parameters.
func (l *Limit) Bucket() *bucket.Limit { return &l.b }

// fingerprint identifies the bucket of key under l.
func (e *Engine) fingerprint(key []byte, l *Limit) shm.Fingerprint {
	return e.t.Fingerprint(key, l.ident)
}

// check validates a request's key, limit and cost.
func check(key []byte, l *Limit, cost int64) error {
	switch {
	case l == nil || !l.valid:
		return ErrInvalidLimit
	case len(key) == 0:
		return shm.ErrEmptyKey
	case len(key) > shm.MaxKeyLen:
		return shm.ErrKeyTooLong
	case cost < 0:
		return fmt.Errorf("%w: %d", ErrNegativeCost, cost)
	}
	return nil
}

// load copies the state of a locked slot into s, as l's algorithm must see
// it: a new bucket if the slot is not live, a drained one if it was found
// torn or holds another algorithm. It reports whether s differs from the
// slot, so the slot must be written even if the algorithm changes nothing.
func load(now int64, l *Limit, sl shm.Slot, s *bucket.State) (replaced bool) {
	switch {
	case !sl.Live():
		l.b.Init(now, s)
		return false // a claimed slot stays reclaimable unless the algorithm writes
	case !inPlace(l, sl):
		l.b.Drained(now, s)
		return true
	}
	*s = bucket.State(*sl.State())
	return false
}

// inPlace reports whether a locked slot's state words can be handed to l's
// algorithm as they are: the slot is live, sound, and of l's algorithm.
func inPlace(l *Limit, sl shm.Slot) bool {
	return sl.Live() && !sl.Conservative() && sl.Kind() == uint8(l.b.Algorithm)
}

// store writes s into the locked slot and commits it.
func store(sl shm.Slot, s *bucket.State, d *bucket.Decision, now int64) {
	*sl.State() = [shm.StateWords]int64(*s)
	commit(sl, d, now)
}

// commit marks the locked slot live and unlocks it. d is a decision made at
// now that left the bucket in the slot's state: its ResetAfter says when the
// bucket is fresh again (bucket.Limit.FreshAt, without recomputing it), or,
// if 0, that it is fresh now.
func commit(sl shm.Slot, d *bucket.Decision, now int64) {
	freshAt := int64(math.MaxInt64)
	if d.ResetAfter <= math.MaxInt64-now {
		freshAt = now + d.ResetAfter
	}
	sl.Commit(freshAt)
}

// Acquire decides a request of cost against key's bucket under l at now,
// writes the decision to *d and, if the request is allowed (or the semantics
// of f say so), consumes it. A cost of 0 is a peek at cost 0: it neither
// creates nor changes the bucket.
func (e *Engine) Acquire(d *bucket.Decision, key []byte, l *Limit, cost int64, now int64, f bucket.Flags) error {
	if err := check(key, l, cost); err != nil {
		return err
	}
	if cost == 0 {
		e.peek(d, key, l, 0, now)
		return nil
	}
	fp := e.fingerprint(key, l)
	sl, ok := e.t.Lookup(fp)
	if ok && inPlace(l, sl) {
		// The common case: decide on the slot's own words.
		if l.b.Decide(now, (*bucket.State)(sl.State()), cost, f, d) {
			commit(sl, d, now)
		} else {
			sl.Release()
		}
		return nil
	}
	if !ok {
		// Create the bucket only if the request changes a new one.
		var s bucket.State
		l.b.Init(now, &s)
		if !l.b.Decide(now, &s, cost, f, d) {
			return nil
		}
		var err error
		if sl, _, err = e.t.LookupOrInsert(fp, uint8(l.b.Algorithm), key, now); err != nil {
			return err
		}
	}
	var s bucket.State
	replaced := load(now, l, sl, &s)
	if l.b.Decide(now, &s, cost, f, d) || replaced {
		store(sl, &s, d, now)
	} else {
		sl.Release()
	}
	return nil
}

// Peek writes to *d the decision a request of cost 1 would get at now,
// without consuming anything or creating the bucket.
func (e *Engine) Peek(d *bucket.Decision, key []byte, l *Limit, now int64) error {
	if err := check(key, l, 1); err != nil {
		return err
	}
	e.peek(d, key, l, 1, now)
	return nil
}

func (e *Engine) peek(d *bucket.Decision, key []byte, l *Limit, cost int64, now int64) {
	var s bucket.State
	if sl, ok := e.t.Lookup(e.fingerprint(key, l)); ok {
		load(now, l, sl, &s)
		sl.Release()
	} else {
		l.b.Init(now, &s)
	}
	l.b.Decide(now, &s, cost, 0, d)
}

// Refund gives amount tokens back to key's bucket, capped at the limit's
// maximum, and writes the bucket's state afterwards to *d as a cost-0 peek.
// A bucket that does not exist is full: refunding it changes nothing.
func (e *Engine) Refund(d *bucket.Decision, key []byte, l *Limit, amount int64, now int64) error {
	if err := check(key, l, amount); err != nil {
		return err
	}
	sl, ok := e.t.Lookup(e.fingerprint(key, l))
	if !ok || amount == 0 {
		if ok {
			sl.Release()
		}
		e.peek(d, key, l, 0, now)
		return nil
	}
	var s bucket.State
	replaced := load(now, l, sl, &s)
	if (l.b.DecideRefund(now, &s, amount, 0, d) && sl.Live()) || replaced {
		store(sl, &s, d, now)
	} else {
		sl.Release()
	}
	return nil
}

// Reset forgets key's bucket under l, which then behaves as new. It reports
// whether the bucket existed.
func (e *Engine) Reset(key []byte, l *Limit) (bool, error) {
	if err := check(key, l, 0); err != nil {
		return false, err
	}
	sl, ok := e.t.Lookup(e.fingerprint(key, l))
	if !ok {
		return false, nil
	}
	existed := sl.Live()
	sl.Clear()
	return existed, nil
}
