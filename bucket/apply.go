package bucket

import "fmt"

// The entry points: one switch on the algorithm each, no interface (STYLE
// rule 10). All of them require that l passed Validate, take time as
// Unix nanoseconds, never read the clock, and allocate nothing. Those of
// this file are for the algorithms whose State holds everything; on an
// extended algorithm (Algorithm.Extended) they panic: see ext.go.

// Init sets s to the state of a brand-new bucket at now: token_bucket full
// with its refill phase anchored at now; gcra tat = now; fixed_window and
// sliding_window an empty current window; pacer next = now. A new bucket is
// fresh: FreshAt(s) <= now.
func (l *Limit) Init(now int64, s *State) {
	switch l.Algorithm {
	case TokenBucket:
		*s = State{l.Max, now, 0}
	case GCRA, Pacer:
		*s = State{now, 0, 0}
	case FixedWindow, SlidingWindow:
		*s = State{windowStart(now, l.Window), 0, 0}
	default:
		badAlgorithm(l.Algorithm)
	}
}

// Drained sets s to a conservative state at now, for a slot found torn or
// corrupt: the bucket as the most demanding traffic of cost-1 requests up to
// now leaves it, so it admits nothing that a drained bucket would deny and
// grants no burst: token_bucket empty with its refill clock at now; gcra
// tat = now + (Burst+1)*T; fixed_window the current window full;
// sliding_window the current window's count = Max; pacer next =
// now + MaxDelay + I (a request admitted at the longest delay has just
// taken its slot: the next is admitted one interval from now).
func (l *Limit) Drained(now int64, s *State) {
	switch l.Algorithm {
	case TokenBucket:
		*s = State{0, now, 0}
	case GCRA:
		*s = State{satAdd(now, l.tau()), 0, 0}
	case FixedWindow:
		*s = State{windowStart(now, l.Window), l.Max, 0}
	case SlidingWindow:
		*s = State{windowStart(now, l.Window), 0, l.Max}
	case Pacer:
		*s = State{satAdd(satAdd(now, l.MaxDelay), l.pacerInterval()), 0, 0}
	default:
		badAlgorithm(l.Algorithm)
	}
}

// Apply decides a request of cost tokens at now against state s and, if the
// algorithm's semantics say so, updates s. changed reports whether s was
// modified (any word differs from before the call).
//
// cost 0 is a peek: it never changes s. A negative cost is treated as 0.
// Flags are read by token_bucket only. Time going backwards relative to s
// counts as no time passing: it never mints tokens. l must have passed
// Validate; a Limit with an Invalid or unknown algorithm panics. s may hold
// any words, even corrupt ones: Apply never panics on them.
func (l *Limit) Apply(now int64, s *State, cost int64, f Flags) (d Decision, changed bool) {
	changed = l.Decide(now, s, cost, f, &d)
	return d, changed
}

// Decide is Apply writing its Decision to *d: the form for hot paths. (A
// Decision has more fields than the compiler keeps in registers; returning
// one by value costs a copy through memory at every call level.)
func (l *Limit) Decide(now int64, s *State, cost int64, f Flags, d *Decision) (changed bool) {
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
	}
	badAlgorithm(l.Algorithm)
	return false
}

// Refund gives amount tokens back at now, capped so the bucket never goes
// past its fresh state (token_bucket: Max tokens; gcra and pacer: tat or next
// not earlier than now; windows: counts not below 0). amount <= 0 refunds
// nothing. d describes the bucket afterwards, as a cost-0 Apply; changed
// reports whether s was modified. With Cell, a gcra refund is redis-cell's
// negative quantity instead (see Cell and refundGCRACell).
func (l *Limit) Refund(now int64, s *State, amount int64, f Flags) (d Decision, changed bool) {
	changed = l.DecideRefund(now, s, amount, f, &d)
	return d, changed
}

// DecideRefund is Refund writing its Decision to *d.
func (l *Limit) DecideRefund(now int64, s *State, amount int64, f Flags, d *Decision) (changed bool) {
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
		default:
			badAlgorithm(l.Algorithm)
		}
	}
	l.Decide(now, s, 0, 0, d)
	return *s != old
}

// FreshAt returns the earliest time (Unix ns) at which the bucket in s is
// back to the state of a new bucket with no further traffic: token_bucket
// full; gcra its tat; fixed_window the end of its window; sliding_window
// the time both window counts have aged out; pacer its next free slot. It
// returns math.MinInt64 if s is fresh at any time (a full token bucket,
// empty windows).
//
// FreshAt is never earlier than the truth: at FreshAt, any request gets the
// same Decision as it would from a new bucket (for token_bucket, up to the
// refill phase), so a table may reclaim the slot from then on without
// knowing the limit.
func (l *Limit) FreshAt(s *State) int64 {
	switch l.Algorithm {
	case TokenBucket:
		return l.fullAt(clamp(s[tbAmount], 0, l.Max), s[tbRefilledAt])
	case GCRA, Pacer:
		return s[0]
	case FixedWindow:
		return l.fixedFreshAt(s[winStart], s[fwCount])
	case SlidingWindow:
		return l.slidingFreshAt(s[winStart], s[swPrev], s[swCurr])
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

// badAlgorithm panics: the Limit did not pass Validate, or an extended
// algorithm went to a method without its extension, or the other way round:
// a broken invariant of the caller.
func badAlgorithm(a Algorithm) {
	switch {
	case a.Extended():
		panic(fmt.Sprintf("bucket: %v keeps an extension: use the Ext methods", a))
	case a != Invalid && a < numAlgorithms:
		panic(fmt.Sprintf("bucket: %v has no extension: use the methods without Ext", a))
	}
	panic(fmt.Sprintf("bucket: %v: Limit used without Validate", a))
}
