package bucket

import (
	"fmt"

	"github.com/sluicehq/sluice/vocab"
)

// The entry points: one method set for every algorithm, one switch on the
// algorithm each, no interface (STYLE rule 10). All of them require that l
// passed Validate, take time as Unix nanoseconds, never read the clock, and
// allocate nothing. Each takes the bucket's State and its block, ext: nil
// for the algorithms whose State holds everything, l.ExtWords() words for
// the extended ones (Algorithm.Extended), which keep most of their state
// there (ext.go).

// Init sets s (and ext) to the state of a brand-new bucket at now:
// token_bucket full with its refill phase anchored at now; gcra tat = now;
// fixed_window and sliding_window an empty current window; pacer next =
// now; sliding_log an empty log; window_counters every counter 0, now's
// sub-window the newest; concurrency every lease free (word 0 at now);
// quota now's period with a count of 0. A
// new bucket is fresh: FreshAt(s, ext) <= now. An extended algorithm's word
// 2 of s is left as it is.
func (l *Limit) Init(now int64, s *State, ext []int64) {
	l.checkExt(ext)
	switch l.Algorithm {
	case TokenBucket:
		*s = State{l.Max, now, 0}
		return
	case GCRA, Pacer:
		*s = State{now, 0, 0}
		return
	case FixedWindow, SlidingWindow:
		*s = State{windowStart(now, l.Window), 0, 0}
		return
	case Quota:
		l.initQuota(now, s, 0)
		return
	}
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

// Drained sets s (and ext) to a conservative state at now, for a slot
// found torn or corrupt (an extended algorithm's block too: s[1] !=
// vocab.BlockSum(ext)): the bucket as the most demanding traffic of cost-1
// requests up to now leaves it, so it admits nothing that a drained bucket
// would deny and grants no burst: token_bucket empty with its refill clock
// at now; gcra tat = now + (Burst+1)*T; fixed_window the current window
// full; sliding_window the current window's count = Max; pacer next = now +
// MaxDelay + I (a request admitted at the longest delay has just taken its
// slot: the next is admitted one interval from now); sliding_log a full log
// of Max admissions at now, so nothing passes before now+Window;
// window_counters now's sub-window holding Max and the others 0;
// quota now's period holding Max;
// concurrency every lease held until now+Lease under id 0, which no release
// matches. An extended algorithm's word 2 of s is left as it is.
func (l *Limit) Drained(now int64, s *State, ext []int64) {
	l.checkExt(ext)
	switch l.Algorithm {
	case TokenBucket:
		*s = State{0, now, 0}
		return
	case GCRA:
		*s = State{satAdd(now, l.tau()), 0, 0}
		return
	case FixedWindow:
		*s = State{windowStart(now, l.Window), l.Max, 0}
		return
	case SlidingWindow:
		*s = State{windowStart(now, l.Window), 0, l.Max}
		return
	case Pacer:
		*s = State{satAdd(satAdd(now, l.MaxDelay), l.pacerInterval()), 0, 0}
		return
	case Quota:
		l.initQuota(now, s, l.Max)
		return
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

// Apply decides a request of cost tokens at now against state s of an
// algorithm whose State holds everything (ext nil) and, if the algorithm's
// semantics say so, updates s. changed reports whether s was modified (any
// word differs from before the call). It is Decide returning its Decision.
func (l *Limit) Apply(now int64, s *State, cost int64, f Flags) (d Decision, changed bool) {
	changed = l.Decide(now, s, nil, cost, f, &d)
	return d, changed
}

// Decide decides a request of cost tokens at now against s and ext and, if
// the algorithm's semantics say so, updates them, writing the Decision to
// *d (the form for hot paths: a Decision has more fields than the compiler
// keeps in registers, and returning one by value costs a copy through
// memory at every call level). changed reports whether s or ext was
// modified.
//
// cost 0 is a peek: it never changes anything. A negative cost is treated
// as 0. Flags are read by token_bucket only. Time going backwards relative
// to the state counts as no time passing: it never mints tokens.
// Concurrency leases are taken only through AcquireLease: on a concurrency
// limit Decide, whatever the cost, is Peek and changes nothing. s and ext
// may hold any words, even corrupt ones: Decide never panics on them.
func (l *Limit) Decide(now int64, s *State, ext []int64, cost int64, f Flags, d *Decision) (changed bool) {
	cost = max(cost, 0)
	switch l.Algorithm {
	case TokenBucket:
		return l.applyTokenBucket(now, s, cost, f, d)
	case GCRA:
		return l.applyGCRA(now, s, cost, d)
	case FixedWindow:
		return l.applyFixedWindow(now, s, cost, d)
	case SlidingWindow:
		return l.applySlidingWindow(now, s, cost, d)
	case Pacer:
		return l.applyPacer(now, s, cost, d)
	case Quota:
		return l.applyQuota(now, s, cost, d)
	}
	return l.decideExt(now, s, ext, cost, d)
}

// decideExt is Decide for the extended algorithms, apart so that the
// algorithms of fixed size decide in a function of their size.
func (l *Limit) decideExt(now int64, s *State, ext []int64, cost int64, d *Decision) (changed bool) {
	l.checkExt(ext)
	switch l.Algorithm {
	case SlidingLog:
		return l.applySlidingLog(now, s, ext, cost, d)
	case WindowCounters:
		return l.applyCounters(now, s, ext, cost, d)
	case Concurrency:
		l.peekConcurrency(now, ext, d) // leases are taken through AcquireLease only
		return false
	}
	badAlgorithm(l.Algorithm)
	return false
}

// Peek writes to *d what a peek reports, changing nothing: Remaining and
// ResetAfter as a request of cost 0 finds them, Allowed, RetryAfter and
// Delay as for a request of cost 1 (concurrency: whether a lease is free
// now). For the algorithms whose State holds everything it is Decide of
// cost 1 on a copy of s, merged with Decide of cost 0.
func (l *Limit) Peek(now int64, s *State, ext []int64, d *Decision) {
	l.checkExt(ext)
	switch l.Algorithm {
	case SlidingLog:
		l.peekSlidingLog(now, s, ext, d)
	case WindowCounters:
		l.peekCounters(now, s, ext, d)
	case Concurrency:
		l.peekConcurrency(now, ext, d)
	default:
		var one Decision
		c := *s
		l.Decide(now, &c, nil, 1, 0, &one)
		l.Decide(now, s, nil, 0, 0, d)
		d.Allowed, d.RetryAfter, d.Delay = one.Allowed, one.RetryAfter, one.Delay
	}
}

// Refund gives amount tokens back at now to a bucket whose State holds
// everything (ext nil): DecideRefund returning its Decision.
func (l *Limit) Refund(now int64, s *State, amount int64, f Flags) (d Decision, changed bool) {
	changed = l.DecideRefund(now, s, nil, amount, f, &d)
	return d, changed
}

// DecideRefund gives amount tokens back at now, capped so the bucket never
// goes past its fresh state (token_bucket: Max tokens; gcra and pacer: tat
// or next not earlier than now; windows: counts not below 0); sliding_log
// removes the newest min(amount, in-window) admissions; window_counters
// takes amount off the counters in the window, newest sub-window first;
// concurrency changes nothing (leases go back through ReleaseLease). amount
// <= 0 refunds nothing. d describes the bucket afterwards, as a cost-0
// Decide; changed reports whether s or ext was modified. With Cell, a gcra
// refund is redis-cell's negative quantity instead (see Cell and
// refundGCRACell); the other flags are ignored.
func (l *Limit) DecideRefund(now int64, s *State, ext []int64, amount int64, f Flags, d *Decision) (changed bool) {
	if l.Algorithm == GCRA && f&Cell != 0 {
		return l.refundGCRACell(now, s, max(amount, 0), d)
	}
	old := *s
	if amount > 0 {
		switch l.Algorithm {
		case TokenBucket:
			l.refundTokenBucket(now, s, amount)
		case GCRA:
			refundTAT(now, s, satMul(amount, l.interval()))
		case FixedWindow:
			l.refundFixedWindow(now, s, amount)
		case SlidingWindow:
			l.refundSlidingWindow(now, s, amount)
		case Pacer:
			refundTAT(now, s, satMul(amount, l.pacerInterval()))
		case Quota:
			l.refundQuota(now, s, amount)
		case SlidingLog:
			l.checkExt(ext)
			changed = l.refundSlidingLog(now, s, ext, amount)
		case WindowCounters:
			l.checkExt(ext)
			changed = l.refundCounters(now, s, ext, amount)
		case Concurrency:
		default:
			badAlgorithm(l.Algorithm)
		}
	}
	l.Decide(now, s, ext, 0, 0, d)
	return changed || *s != old
}

// FreshAt returns the earliest time (Unix ns) at which the bucket in s (and
// ext) is back to the state of a new bucket with no further traffic:
// token_bucket full; gcra its tat; fixed_window the end of its window;
// sliding_window the time both window counts have aged out; pacer its next
// free slot; sliding_log the newest admission plus Window; window_counters
// the end of the newest non-zero sub-window plus Window; quota the end of
// its period; concurrency the
// latest expiry of a lease (the ids of the entries then may differ from a
// new bucket's, which no decision reads). It returns math.MinInt64 if the
// bucket is fresh at any time (a full token bucket, empty windows).
//
// FreshAt is never earlier than the truth: at FreshAt, any request gets the
// same Decision as it would from a new bucket (for token_bucket, up to the
// refill phase), so a table may reclaim the slot from then on without
// knowing the limit.
func (l *Limit) FreshAt(s *State, ext []int64) int64 {
	switch l.Algorithm {
	case TokenBucket:
		return l.fullAt(clamp(s[tbAmount], 0, l.Max), s[tbRefilledAt])
	case GCRA, Pacer:
		return s[0]
	case FixedWindow:
		return l.fixedFreshAt(s[winStart], s[fwCount])
	case SlidingWindow:
		return l.slidingFreshAt(s[winStart], s[swPrev], s[swCurr])
	case Quota:
		return quotaFreshAt(s)
	}
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

// refundTAT moves a theoretical arrival time (gcra tat, pacer next) back by
// d ns, but not before now: a tat at or before now is already fresh.
func refundTAT(now int64, s *State, d int64) {
	if s[0] > now {
		s[0] = max(satSub(s[0], d), now)
	}
}

// badAlgorithm panics: the Limit did not pass Validate, a broken invariant
// of the caller.
func badAlgorithm(a Algorithm) {
	panic(fmt.Sprintf("bucket: %v: Limit used without Validate", a))
}
