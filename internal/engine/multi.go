package engine

import (
	"fmt"
	"slices"
	"sync"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/shm"

	"github.com/sluicehq/sluice/vocab"
)

// MaxMultiItems is the most items one Multi may hold.
const MaxMultiItems = vocab.MaxMulti

// multiAttempts bounds how often Multi retries when a slot it found was
// reclaimed by another bucket before it could lock it.
const multiAttempts = 16

// Item is one acquire of a Multi.
type Item struct {
	Key   []byte
	Limit *Limit
	Cost  int64
	Flags bucket.Flags
}

// Multi decides every item at t, all or nothing: if every item is allowed,
// every item consumes; if any is denied, no bucket changes (whatever the
// items' flags say). Items may name the same bucket more than once; later
// items see the effect of earlier ones. It appends one decision per item to
// dst and reports whether the whole request was allowed.
//
// Multi locks every slot it needs in ascending slot order, which makes it
// deadlock-free however Multis overlap. Slots it claims for new buckets are
// reserved until it decides, and left reclaimable if nothing is consumed.
//
// A slot found torn is repaired (its drained state written back) whatever
// the outcome, like on every other path.
func (e *Engine) Multi(dst []bucket.Decision, items []Item, t Time) ([]bucket.Decision, bool, error) {
	return e.multi(dst, items, t, false)
}

// Each decides every item at t, each on its own, as if they were acquired
// one after the other with no other request in between: a denied item
// changes only what its flags say (Smyte drains), and later items see the
// effect of earlier ones. It holds every slot the items need, locked as
// Multi locks them, for the whole sequence. This is a Redis transaction's
// MULTI/EXEC of rate-limit commands. It appends one decision per item to
// dst.
func (e *Engine) Each(dst []bucket.Decision, items []Item, t Time) ([]bucket.Decision, error) {
	dst, _, err := e.multi(dst, items, t, true)
	return dst, err
}

// multi is Multi (each false) and Each (each true).
func (e *Engine) multi(dst []bucket.Decision, items []Item, t Time, each bool) ([]bucket.Decision, bool, error) {
	if len(items) > MaxMultiItems {
		return dst, false, ErrTooManyItems
	}
	if err := e.enter(); err != nil {
		return dst, false, err
	}
	defer e.t.Exit()
	w := t.wait()
	words := 0 // of the items' blocks, copied to be decided on
	var (
		fps   [MaxMultiItems]shm.Fingerprint
		idx   [MaxMultiItems]uint64 // slot of each item
		order [MaxMultiItems]uint64 // distinct slots, ascending
		slots [MaxMultiItems]shm.Slot
		state [MaxMultiItems]bucket.State
		dirty [MaxMultiItems]bool
	)
	for i := range items {
		it := &items[i]
		if err := check(it.Key, it.Limit, it.Cost, t); err != nil {
			return dst, false, err
		}
		if it.Limit.b.Algorithm == bucket.Concurrency {
			return dst, false, ErrLeaseOnly
		}
		if it.Limit.ext > 0 && each {
			return dst, false, invalidLimit{fmt.Errorf("%v limits cannot be part of a transaction", it.Limit.b.Algorithm)}
		}
		words += it.Limit.ext
		fps[i] = e.fingerprint(it.Key, it.Limit)
	}
	// Room for the decisions and the blocks' copies now: nothing allocates
	// while slots are locked.
	dst = slices.Grow(dst, len(items))
	var copies *[]int64
	if words > 0 {
		copies = multiScratch.Get().(*[]int64)
		defer multiScratch.Put(copies)
		*copies = slices.Grow((*copies)[:0], words)[:words]
	}
	var reserved [MaxMultiItems]bool // item i's slot is reserved by this call
	for range multiAttempts {
		// Find or create each bucket's slot. A slot that holds no bucket yet is
		// reserved, so that no other insert (another item's included) reclaims
		// it before it is locked again below.
		for i := range items {
			sl, _, err := e.t.LookupOrInsert(fps[i], items[i].Limit.b.Algorithm, items[i].Key, t.Now, &w)
			if err != nil {
				e.unreserve(fps[:i], idx[:i], reserved[:i], &w)
				return dst, false, tableErr(err)
			}
			idx[i] = sl.Index()
			if reserved[i] = !sl.Live(); reserved[i] {
				sl.Reserve()
			} else {
				sl.Release()
			}
		}
		multiFound()
		distinct := order[:len(items)]
		copy(distinct, idx[:len(items)])
		slices.Sort(distinct)
		distinct = slices.Compact(distinct)
		// Lock them in ascending order and confirm each still holds its bucket.
		for j, si := range distinct {
			sl, err := e.t.LockIndex(si, &w)
			if err != nil {
				for _, sl := range slots[:j] {
					sl.Release()
				}
				e.unreserve(fps[:len(items)], idx[:len(items)], reserved[:len(items)], &w)
				return dst, false, tableErr(err)
			}
			slots[j] = sl
		}
		held := slots[:len(distinct)]
		if !e.holds(held, distinct, fps[:len(items)], idx[:len(items)]) {
			for _, sl := range held {
				sl.Release()
			}
			continue
		}
		if each {
			return e.decideEach(dst, items, t, distinct, held, state[:len(distinct)], idx[:len(items)], &w)
		}
		var buf []int64
		if copies != nil {
			buf = *copies
		}
		return e.decide(dst, items, t, distinct, held, state[:len(distinct)], dirty[:len(distinct)], idx[:len(items)], buf, &w)
	}
	e.unreserve(fps[:len(items)], idx[:len(items)], reserved[:len(items)], &w)
	return dst, false, ErrContended
}

// multiFound is called between finding a Multi's slots and locking them. It
// does nothing; tests that take a lock at that moment replace it.
var multiFound = func() {}

// unreserve clears the slots this Multi reserved and that still hold no
// bucket, so they are reclaimable again. A Multi that gave up waiting
// comes here with its Wait spent: it tries each slot once more, briefly,
// and a reservation it cannot clear stays until the bucket is next used
// (it holds no decision: the bucket is new to whoever finds it).
func (e *Engine) unreserve(fps []shm.Fingerprint, idx []uint64, reserved []bool, w *shm.Wait) {
	for i, r := range reserved {
		if !r {
			continue
		}
		sl, err := e.t.LockIndex(idx[i], w)
		if err != nil {
			continue
		}
		if sl.Fingerprint() == fps[i] && !sl.Live() {
			sl.Clear(w)
		} else {
			sl.Release()
		}
	}
}

// holds reports whether every item's slot still holds the item's bucket.
func (e *Engine) holds(held []shm.Slot, distinct []uint64, fps []shm.Fingerprint, idx []uint64) bool {
	for i, si := range idx {
		j, _ := slices.BinarySearch(distinct, si)
		if held[j].Fingerprint() != fps[i] {
			return false
		}
	}
	return true
}

// decide runs the items on copies of the locked slots' states (and of
// their blocks, in copies) and writes them back only if every item is
// allowed; if not, it writes back only the repairs of slots found torn. It
// releases every slot, waiting for the arena's lock as w says.
func (e *Engine) decide(dst []bucket.Decision, items []Item, t Time, distinct []uint64, held []shm.Slot,
	state []bucket.State, dirty []bool, idx []uint64, copies []int64, w *shm.Wait) ([]bucket.Decision, bool, error) {
	for j := range held {
		dirty[j] = false
	}
	start := len(dst)
	var (
		loaded   [MaxMultiItems]bool
		repaired [MaxMultiItems]bool
		limit    [MaxMultiItems]*Limit          // the limit that loaded each slot
		before   [MaxMultiItems]bucket.State    // each slot's state as loaded
		last     [MaxMultiItems]bucket.Decision // the last decision on each slot
		block    [MaxMultiItems][]int64         // an extended algorithm's block in the slot
		copied   [MaxMultiItems][]int64         // and the copy decided on
	)
	allowed := true
	var failed error
	for i := range items {
		it := &items[i]
		j, _ := slices.BinarySearch(distinct, idx[i])
		if !loaded[j] {
			loaded[j], limit[j] = true, it.Limit
			var err error
			if block[j], repaired[j], err = loadHeld(t, it.Limit, held[j], &state[j], w); err != nil {
				failed, allowed = err, false
				break
			}
			copied[j], copies = copies[:it.Limit.ext], copies[it.Limit.ext:]
			copy(copied[j], block[j])
			before[j], dirty[j] = state[j], repaired[j]
		}
		// Smyte's drain on a denial is not all-or-nothing: it is dropped.
		changed := it.Limit.b.Decide(t.At, &state[j], copied[j], it.Cost, it.Flags&^bucket.Smyte, &last[j])
		dirty[j] = dirty[j] || changed
		allowed = allowed && last[j].Allowed
		dst = append(dst, last[j])
	}
	for j, sl := range held {
		l := limit[j]
		switch {
		case !loaded[j] && !sl.Live():
			sl.Clear(w) // a reservation, left when a block could not be had
		case !loaded[j]:
			sl.Release()
		case failed == nil && allowed && dirty[j]:
			put(sl, l, &state[j], block[j], copied[j], &last[j], t)
		case repaired[j]:
			var d bucket.Decision
			l.b.Decide(t.At, &before[j], block[j], 0, 0, &d)
			put(sl, l, &before[j], block[j], block[j], &d, t)
		case !sl.Live():
			sl.Clear(w) // end the reservation (and free a block given to it): reclaimable again
		default:
			sl.Release()
		}
	}
	if failed != nil {
		return dst[:start], false, failed
	}
	return dst, allowed, nil
}

// loadHeld copies the bucket in the locked slot sl, held among others, into
// s as l's algorithm must see it, as load does, and returns its block (nil
// for an algorithm of fixed size), readied in place as loadExtHeld says: it
// leaves the slot locked on an error. replaced reports a repair, which must
// be written whatever the items decide.
func loadHeld(t Time, l *Limit, sl shm.Slot, s *bucket.State, w *shm.Wait) (ext []int64, replaced bool, err error) {
	if l.ext == 0 {
		return nil, load(t, l, sl, s), nil
	}
	if ext, replaced, err = loadExtHeld(t, l, sl, w); err == nil {
		*s = bucket.State(*sl.State())
	}
	return ext, replaced, err
}

// multiScratch holds the copies of the blocks a Multi decides on.
var multiScratch = sync.Pool{New: func() any { return new([]int64) }}

// decideEach runs the items one after the other on the locked slots'
// states, each with its own flags, and writes back every slot an item
// changed (or that was found torn). It releases every slot, waiting for the
// arena's lock as w says.
func (e *Engine) decideEach(dst []bucket.Decision, items []Item, t Time, distinct []uint64, held []shm.Slot,
	state []bucket.State, idx []uint64, w *shm.Wait) ([]bucket.Decision, bool, error) {
	var (
		loaded, dirty [MaxMultiItems]bool
		limit         [MaxMultiItems]*Limit
		last          [MaxMultiItems]bucket.Decision
	)
	for i := range items {
		it := &items[i]
		j, _ := slices.BinarySearch(distinct, idx[i])
		if !loaded[j] {
			loaded[j], limit[j] = true, it.Limit
			dirty[j] = load(t, it.Limit, held[j], &state[j])
		}
		if it.Limit.b.Decide(t.At, &state[j], nil, it.Cost, it.Flags, &last[j]) {
			dirty[j] = true
		}
		dst = append(dst, last[j])
	}
	for j, sl := range held {
		switch {
		case dirty[j]:
			put(sl, limit[j], &state[j], nil, nil, &last[j], t)
		case !sl.Live():
			sl.Clear(w) // end the reservation: reclaimable again
		default:
			sl.Release()
		}
	}
	return dst, true, nil
}
