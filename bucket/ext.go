package bucket

import (
	"fmt"

	"github.com/sluicehq/sluice/vocab"
)

// The extended algorithms (sliding_log, window_counters, concurrency) keep
// state that does not fit in a State: their extension, ext, a block of
// l.ExtWords() int64 words that the table allocates beside the slot. Their
// entry points take the State and the extension together; like the fixed
// ones they require that l passed Validate, take time as Unix nanoseconds,
// never read the clock, and allocate nothing.
//
// State words of the extended algorithms. Word 0 is the algorithm's (see
// each one); word 1 is vocab.BlockSum(ext) after every method that writes, kept up
// to date word by word as the extension changes, so that the table can tell
// a torn block on recovery (s[extSum] != vocab.BlockSum(ext): use DrainedExt); word
// 2 belongs to the table (it keeps the block's reference there) and is never
// read or written here.
const extSum = 1

// ExtWords returns the number of int64 words of l's extension: sliding_log
// Max; window_counters Counters+1; concurrency 2*Max; 0 for the algorithms
// whose State holds everything. l must have passed Validate.
func (l *Limit) ExtWords() int {
	switch l.Algorithm {
	case SlidingLog:
		return int(l.Max)
	case WindowCounters:
		return int(l.Counters) + 1
	case Concurrency:
		return 2 * int(l.Max)
	}
	return 0
}

// setExt stores v in ext[i], keeping s[extSum] the checksum of ext, and
// reports whether the word changed.
func setExt(s *State, ext []int64, i int, v int64) bool {
	old := ext[i]
	if old == v {
		return false
	}
	ext[i] = v
	s[extSum] = int64(uint64(s[extSum]) + vocab.BlockTerm(i, v) - vocab.BlockTerm(i, old))
	return true
}

// checkExt panics unless ext has l's length: the table allocated the wrong
// block, a broken invariant of the caller like an unvalidated Limit.
func (l *Limit) checkExt(ext []int64) {
	if n := l.ExtWords(); len(ext) != n {
		panic(fmt.Sprintf("bucket: %v: extension of %d words, want %d", l.Algorithm, len(ext), n))
	}
}

// InitExt sets s and ext to a brand-new bucket at now: sliding_log an empty
// log; window_counters every counter 0, now's sub-window the newest;
// concurrency every lease free (word 0 at now). A new bucket is
// fresh: FreshAtExt <= now. Word 2 of s is left as it is.
func (l *Limit) InitExt(now int64, s *State, ext []int64) {
	l.checkExt(ext)
	clear(ext)
	switch l.Algorithm {
	case SlidingLog:
		s[0] = 0
	case WindowCounters:
		s[0] = floorDiv(now, l.subWindow())
	case Concurrency:
		s[0] = now
	default:
		badAlgorithm(l.Algorithm)
	}
	s[extSum] = vocab.BlockSum(ext)
}

// DrainedExt sets s and ext to a conservative state at now, for a block
// found torn or corrupt (s[1] != vocab.BlockSum(ext)): sliding_log a full log of Max
// admissions at now, so nothing passes before now+Window; window_counters
// now's sub-window holding Max and the others 0; concurrency every lease
// held until now+Lease under id 0, which no release matches. Word 2 of s is
// left as it is.
func (l *Limit) DrainedExt(now int64, s *State, ext []int64) {
	l.checkExt(ext)
	switch l.Algorithm {
	case SlidingLog:
		l.drainedSlidingLog(now, s, ext)
	case WindowCounters:
		l.drainedCounters(now, s, ext)
	case Concurrency:
		l.drainedConcurrency(now, s, ext)
	default:
		badAlgorithm(l.Algorithm)
	}
	s[extSum] = vocab.BlockSum(ext)
}

// DecideExt decides a request of cost tokens at now against s and ext, and
// updates them if the algorithm's semantics say so, writing the Decision to
// *d. changed reports whether s or ext was modified. It is Decide for the
// extended algorithms.
//
// cost 0 is a peek: it never changes anything. A negative cost is treated as
// 0. Flags are ignored. Time going backwards relative to the state never
// mints capacity. Concurrency leases are taken only through AcquireLease:
// on a concurrency limit DecideExt, whatever the cost, is PeekExt and
// changes nothing.
func (l *Limit) DecideExt(now int64, s *State, ext []int64, cost int64, f Flags, d *Decision) (changed bool) {
	l.checkExt(ext)
	cost = max(cost, 0)
	switch l.Algorithm {
	case SlidingLog:
		return l.applySlidingLog(now, s, ext, cost, d)
	case WindowCounters:
		return l.applyCounters(now, s, ext, cost, d)
	case Concurrency:
		l.peekConcurrency(now, ext, d)
		return false
	}
	badAlgorithm(l.Algorithm)
	return false
}

// PeekExt writes to *d what a peek reports, changing nothing: Remaining and
// ResetAfter as a request of cost 0 finds them, Allowed and RetryAfter as
// for a request of cost 1 (concurrency: whether a lease is free now).
func (l *Limit) PeekExt(now int64, s *State, ext []int64, d *Decision) {
	l.checkExt(ext)
	switch l.Algorithm {
	case SlidingLog:
		l.peekSlidingLog(now, s, ext, d)
	case WindowCounters:
		l.peekCounters(now, s, ext, d)
	case Concurrency:
		l.peekConcurrency(now, ext, d)
	default:
		badAlgorithm(l.Algorithm)
	}
}

// DecideRefundExt gives amount tokens back at now: sliding_log removes the
// newest min(amount, in-window) admissions; window_counters takes amount
// off the counters in the window, newest sub-window first; concurrency
// changes nothing (leases go back through ReleaseLease). amount <= 0
// refunds nothing. d describes the bucket afterwards, as a cost-0 DecideExt;
// changed reports whether s or ext was modified. Flags are ignored.
func (l *Limit) DecideRefundExt(now int64, s *State, ext []int64, amount int64, f Flags, d *Decision) (changed bool) {
	l.checkExt(ext)
	if amount > 0 {
		switch l.Algorithm {
		case SlidingLog:
			changed = l.refundSlidingLog(now, s, ext, amount)
		case WindowCounters:
			changed = l.refundCounters(now, s, ext, amount)
		case Concurrency:
		default:
			badAlgorithm(l.Algorithm)
		}
	}
	l.DecideExt(now, s, ext, 0, f, d)
	return changed
}

// FreshAtExt is FreshAt for the extended algorithms: the earliest time at
// which s and ext are back to the state of a new bucket with no further
// traffic, math.MinInt64 if they are at any time. sliding_log: the newest
// admission plus Window; window_counters: the end of the newest non-zero
// sub-window plus Window; concurrency: the latest expiry of a lease (the
// ids of the entries then may differ from a new bucket's, which no decision
// reads).
func (l *Limit) FreshAtExt(s *State, ext []int64) int64 {
	l.checkExt(ext)
	switch l.Algorithm {
	case SlidingLog:
		return l.slidingLogFreshAt(s, ext)
	case WindowCounters:
		return l.countersFreshAt(s, ext)
	case Concurrency:
		return concurrencyFreshAt(ext)
	}
	badAlgorithm(l.Algorithm)
	return 0
}
