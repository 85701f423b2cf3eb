package bucket

import (
	"fmt"
	"math/bits"
	"time"

	"github.com/sluicehq/sluice/vocab"
)

// Algorithm names a limiter algorithm (package vocab holds the enum and
// its names). The zero value, Invalid, is never valid. Algorithm values are
// stable: they may be stored and sent on the wire.
type Algorithm = vocab.Algorithm

// The algorithms. See the package documentation for their semantics and the
// layout of their State.
const (
	Invalid        = vocab.Invalid
	TokenBucket    = vocab.TokenBucket
	GCRA           = vocab.GCRA
	FixedWindow    = vocab.FixedWindow
	SlidingWindow  = vocab.SlidingWindow
	Pacer          = vocab.Pacer
	SlidingLog     = vocab.SlidingLog
	WindowCounters = vocab.WindowCounters
	Concurrency    = vocab.Concurrency
	Quota          = vocab.Quota

	numAlgorithms = vocab.NumAlgorithms // one past the last valid Algorithm
)

// ParseAlgorithm returns the Algorithm named s, which must be one of the
// names String returns for a valid algorithm, in lower case. Otherwise it
// returns Invalid and an error wrapping ErrUnknownAlgorithm.
func ParseAlgorithm(s string) (Algorithm, error) {
	if a := vocab.Named(s); a != Invalid {
		return a, nil
	}
	return Invalid, fmt.Errorf("%w: %q", ErrUnknownAlgorithm, s)
}

// StateWords is the number of int64 words of a State.
const StateWords = vocab.StateWords

// State is an algorithm's words inside a slot. Their meaning depends on the
// Limit's algorithm; the package documentation gives each layout. Words an
// algorithm does not use are set to 0 by Init and Drained and otherwise
// never read or written. The extended algorithms (see Algorithm.Extended)
// keep most of their state in an extension instead, and their State is
// word 0 for the algorithm, word 1 the extension's checksum ExtSum, and
// word 2 the table's, never read or written here.
//
// The zero State is not a new bucket: use Limit.Init. Every
// method accepts any State, and any extension, including words torn or
// corrupted on disk, without panicking; out-of-range counts are clamped
// when read.
type State [StateWords]int64

// Flags modify a request. Strict and Smyte are read by token_bucket
// requests, Cell by gcra refunds; everything else ignores them.
type Flags uint8

const (
	// Strict: a request that leaves the bucket at 0, or is denied, restarts
	// the refill clock at now (smyte/ratelimit STRICT). token_bucket only.
	Strict Flags = 1 << iota
	// Smyte: smyte/ratelimit compatibility: every request with cost > 0
	// writes, a denial drains the bucket to 0, and Decision.Remaining is the
	// count before the deduction. token_bucket only.
	Smyte
	// Cell: redis-cell compatibility for a refund (CL.THROTTLE with a
	// negative quantity): it is decided like a request, and limited, changing
	// nothing, when the bucket would still be past its tolerance after it.
	// gcra refunds only.
	Cell
)

// Limit is an algorithm and its parameters. Durations are nanoseconds. The
// parameters an algorithm does not use must be 0 (CountDenied false). The
// zero Limit is invalid.
//
// Call Validate once before using a Limit; the other methods assume it
// passed and may panic otherwise (for example on a division by a zero
// RefillTime). A Limit is a value: it holds no state and is safe for
// simultaneous use by multiple goroutines.
type Limit struct {
	Algorithm    Algorithm
	Max          int64          // token_bucket: capacity; the window algorithms: the limit per window; concurrency: leases at once (>= 1)
	RefillTime   int64          // token_bucket: ns per refill step (>= 1 ms)
	RefillAmount int64          // token_bucket: tokens per refill step (>= 1; callers default it to Max)
	Burst        int64          // gcra: max_burst (>= 0); limit = Burst+1
	Count        int64          // gcra: count per Period; pacer: events per Period (>= 1)
	Period       int64          // gcra, pacer: ns (>= 1)
	Window       int64          // fixed_window, sliding_window, sliding_log, window_counters: ns (>= 1 ms)
	MaxDelay     int64          // pacer: longest delay a caller may be asked to wait, ns (>= 0)
	Counters     int64          // window_counters: sub-windows per Window (1 to MaxCounters; callers default it to 60)
	CountDenied  bool           // window_counters: a denied request counts too
	Lease        int64          // concurrency: how long a lease is held unless released, ns (>= 1 ms)
	Calendar     CalendarUnit   // quota: the unit of a period (CalDay, CalWeek, CalMonth, CalYear)
	Every        int64          // quota: units per period (>= 1; at most maxEvery's for the unit)
	Anchor       int64          // quota, months and years: the day of the month periods start on (1-31; 0 means 1)
	WeekStart    int64          // quota, weeks: the first day of a week, days after Monday (0-6)
	Loc          *time.Location // quota: the time zone of the calendar; nil means UTC

	step  int64   // gcra T, pacer I, window_counters sub-window: recorded by Validate; 0 means compute it
	stepD divider // division by step, prepared by Validate
}

// Millisecond is one millisecond in the package's unit, nanoseconds: the
// minimum RefillTime and Window.
const Millisecond int64 = 1e6

// The ranges of time and duration in which decisions are exact. Every
// quantity a decision derives (a refill step, a gcra tat, a pacer slot, a
// window's end) is a time at most MaxTime plus a duration at most
// MaxDuration, and MaxTime+MaxDuration fits in an int64: so no accepted
// limit can overflow at an accepted time, and none can wedge a bucket.
const (
	// MaxTime is the latest time a decision may be made at:
	// 2190-01-01T00:00:00Z, in Unix ns. Times are >= 0 (1970) as well.
	MaxTime int64 = 6_942_585_600 * 1e9
	// MaxDuration is the longest duration a Limit may hold or derive: 2^31
	// seconds (68 years, the longest refill time smyte/ratelimit accepts).
	// It bounds RefillTime, Period, Window, MaxDelay and Lease, the gcra
	// tolerance (Burst+1)*Period/Count, the pacer's MaxDelay plus one
	// interval and window_counters' Window plus one sub-window.
	MaxDuration int64 = 1 << 31 * 1e9
)

// The caps of the extended algorithms, whose extension grows with a
// parameter: each bounds the words one bucket takes in the state file.
const (
	// MaxLogLimit is the largest Max of a sliding_log: one word per unit.
	MaxLogLimit = 4096
	// MaxConcurrency is the largest Max of a concurrency limit: two words per lease.
	MaxConcurrency = 1024
	// MaxCounters is the largest Counters of window_counters: one word per
	// counter, plus one.
	MaxCounters = 64
)

// ValidTime reports whether now is in the range decisions are exact for:
// [0, MaxTime]. The methods of Limit accept any int64 and never panic or
// wrap around, but outside this range they only promise to be
// conservative; servers refuse explicit request times outside it.
func ValidTime(now int64) bool { return now >= 0 && now <= MaxTime }

// Parameter bits, in Limit field order, for the table of which algorithm
// uses which parameter.
const (
	pMax = 1 << iota
	pRefillTime
	pRefillAmount
	pBurst
	pCount
	pPeriod
	pWindow
	pMaxDelay
	pCounters
	pCountDenied
	pLease
	pCalendar // Calendar and Every
	pAnchor
	pWeekStart
	pLoc
)

var usedParams = [numAlgorithms]uint16{
	TokenBucket:    pMax | pRefillTime | pRefillAmount,
	GCRA:           pBurst | pCount | pPeriod,
	FixedWindow:    pMax | pWindow,
	SlidingWindow:  pMax | pWindow,
	Pacer:          pCount | pPeriod | pMaxDelay,
	SlidingLog:     pMax | pWindow,
	WindowCounters: pMax | pWindow | pCounters | pCountDenied,
	Concurrency:    pMax | pLease,
	Quota:          pMax | pCalendar | pAnchor | pWeekStart | pLoc,
}

// param is a parameter's name and value, for Validate's messages.
type param struct {
	name string
	v    int64
}

// setParams returns the parameter bits of the parameters that are not 0
// (CountDenied: set).
func (l *Limit) setParams() uint16 {
	var m uint16
	for i, v := range [...]int64{l.Max, l.RefillTime, l.RefillAmount, l.Burst, l.Count, l.Period, l.Window, l.MaxDelay, l.Counters} {
		if v != 0 {
			m |= 1 << i
		}
	}
	if l.CountDenied {
		m |= pCountDenied
	}
	if l.Lease != 0 {
		m |= pLease
	}
	if l.Calendar != NoCalendar || l.Every != 0 {
		m |= pCalendar
	}
	if l.Anchor != 0 {
		m |= pAnchor
	}
	if l.WeekStart != 0 {
		m |= pWeekStart
	}
	if l.Loc != nil {
		m |= pLoc
	}
	return m
}

// params returns the parameters in field order, for messages; CountDenied
// is 1 if set.
func (l *Limit) params() [15]param {
	countDenied, loc := int64(0), int64(0)
	if l.CountDenied {
		countDenied = 1
	}
	if l.Loc != nil {
		loc = 1
	}
	return [15]param{
		{"max", l.Max}, {"refill_time", l.RefillTime}, {"refill_amount", l.RefillAmount},
		{"burst", l.Burst}, {"count", l.Count}, {"period", l.Period},
		{"window", l.Window}, {"max_delay", l.MaxDelay},
		{"counters", l.Counters}, {"count_denied", countDenied}, {"lease", l.Lease},
		{"period's units", l.Every}, {"anchor", l.Anchor}, {"week_start", l.WeekStart}, {"tz", loc},
	}
}

// Validate reports whether l can be used and, if it can, records the
// quantities its decisions derive from the parameters (so l must not be
// modified afterwards without validating it again). It checks, in this order: the
// algorithm; each parameter the algorithm uses, in field order (negative,
// below its minimum, above its cap (MaxLogLimit, MaxConcurrency,
// MaxCounters) or, for a duration, above MaxDuration: ErrOutOfRange; a
// zero RefillAmount, Count or Period: ErrZeroRate); the derived quantities
// (gcra: Period/Count truncating to 0 ns is ErrZeroRate, a tolerance
// (Burst+1)*Period/Count above MaxDuration is ErrOverflow; pacer: MaxDelay
// plus one interval above MaxDuration is ErrOverflow; window_counters:
// Window plus one sub-window above MaxDuration is ErrOverflow); then that every
// parameter it does not use is 0 (ErrUnusedParameter). The error names the
// algorithm, the field and the value.
func (l *Limit) Validate() error {
	a := l.Algorithm
	if a == Invalid || a >= numAlgorithms {
		return fmt.Errorf("%w: %v", ErrUnknownAlgorithm, a)
	}
	var err error
	switch a {
	case TokenBucket:
		err = firstErr(
			l.atLeast("max", l.Max, 1, ""),
			l.duration("refill_time", l.RefillTime, Millisecond, " ns (1 ms)"),
			l.rate("refill_amount", l.RefillAmount),
		)
	case GCRA:
		err = firstErr(
			l.atLeast("burst", l.Burst, 0, ""),
			l.rate("count", l.Count),
			l.rate("period", l.Period),
			l.atMost("period", l.Period, MaxDuration),
		)
		if err == nil {
			err = l.validateGCRA()
		}
	case FixedWindow, SlidingWindow:
		err = firstErr(
			l.atLeast("limit", l.Max, 1, ""),
			l.duration("window", l.Window, Millisecond, " ns (1 ms)"),
		)
	case SlidingLog:
		err = firstErr(
			l.atLeast("limit", l.Max, 1, ""),
			l.atMostCap("limit", l.Max, MaxLogLimit, "the most requests a sliding log remembers"),
			l.duration("window", l.Window, Millisecond, " ns (1 ms)"),
		)
	case WindowCounters:
		err = firstErr(
			l.atLeast("limit", l.Max, 1, ""),
			l.duration("window", l.Window, Millisecond, " ns (1 ms)"),
			l.atLeast("counters", l.Counters, 1, ""),
			l.atMostCap("counters", l.Counters, MaxCounters, "the most counters a bucket keeps"),
		)
		if err == nil {
			err = l.validateCounters()
		}
	case Concurrency:
		err = firstErr(
			l.atLeast("limit", l.Max, 1, ""),
			l.atMostCap("limit", l.Max, MaxConcurrency, "the most leases a bucket holds"),
			l.duration("lease", l.Lease, Millisecond, " ns (1 ms)"),
		)
	case Quota:
		err = l.validateQuota()
	case Pacer:
		err = firstErr(
			l.rate("rate", l.Count),
			l.rate("period", l.Period),
			l.atMost("period", l.Period, MaxDuration),
			l.duration("max_delay", l.MaxDelay, 0, ""),
		)
		if err == nil {
			err = l.validatePacer()
		}
	}
	if err != nil {
		return err
	}
	if unused := l.setParams() &^ usedParams[a]; unused != 0 {
		p := l.params()[bits.TrailingZeros16(unused)] // the first in field order
		return fmt.Errorf("%w: %v does not use %s, got %d", ErrUnusedParameter, a, p.name, p.v)
	}
	// Record the derived interval so decisions need not divide by Count.
	switch l.step = 0; a {
	case GCRA:
		l.step = l.interval()
	case Pacer:
		l.step = l.pacerInterval()
	case WindowCounters:
		l.step = l.subWindow()
	}
	l.stepD = newDivider(uint64(l.step))
	return nil
}

// Identity returns the parameters that are part of a bucket's identity
// (SPEC section 2): token_bucket {Max, RefillTime, RefillAmount};
// fixed_window and sliding_window {Window, 0, 0}; sliding_log {Max,
// Window, 0} (Max sizes its log); window_counters {Window, Counters, 0};
// concurrency {Max, 0, 0} (Max sizes its leases; a lease's expiry is
// absolute, so Lease may change); gcra, pacer and Invalid {0, 0, 0},
// because their state is read under whatever parameters a request brings.
func (l *Limit) Identity() [3]int64 {
	switch l.Algorithm {
	case TokenBucket:
		return [3]int64{l.Max, l.RefillTime, l.RefillAmount}
	case FixedWindow, SlidingWindow:
		return [3]int64{l.Window, 0, 0}
	case SlidingLog:
		return [3]int64{l.Max, l.Window, 0}
	case WindowCounters:
		return [3]int64{l.Window, l.Counters, 0}
	case Concurrency:
		return [3]int64{l.Max, 0, 0}
	case Quota:
		return [3]int64{int64(l.Calendar) | l.Every<<8 | l.Anchor<<40 | l.WeekStart<<48, zoneHash(l.Loc), 0}
	}
	return [3]int64{}
}

// validateQuota checks a quota's parameters: a limit >= 1, a known unit,
// Every in [1, maxEvery], an anchor (1-31) only for months and years, a
// week start (0-6) only for weeks.
func (l *Limit) validateQuota() error {
	u := l.Calendar
	if u < CalDay || u > CalYear {
		return fmt.Errorf("%w: quota period unit %d, want a day, week, month or year", ErrOutOfRange, u)
	}
	err := firstErr(
		l.atLeast("limit", l.Max, 1, ""),
		l.atLeast("period's "+u.String()+"s", l.Every, 1, ""),
		l.atMostCap("period's "+u.String()+"s", l.Every, maxEvery[u], "the longest period within 68 years"),
		l.atLeast("anchor", l.Anchor, 0, ""),
		l.atMostCap("anchor", l.Anchor, 31, "the last day a month can have"),
		l.atLeast("week_start", l.WeekStart, 0, ""),
		l.atMostCap("week_start", l.WeekStart, 6, "days after Monday"),
	)
	switch {
	case err != nil:
	case l.Anchor != 0 && u != CalMonth && u != CalYear:
		err = fmt.Errorf("%w: quota anchor = %d applies to months and years only, the period is in %ss", ErrUnusedParameter, l.Anchor, u)
	case l.WeekStart != 0 && u != CalWeek:
		err = fmt.Errorf("%w: quota week_start = %d applies to weeks only, the period is in %ss", ErrUnusedParameter, l.WeekStart, u)
	}
	return err
}

// zoneHash names a time zone in a bucket's identity: FNV-1a of its name,
// 0 for UTC.
func zoneHash(loc *time.Location) int64 {
	if loc == nil || loc == time.UTC {
		return 0
	}
	h := uint64(14695981039346656037)
	for _, c := range []byte(loc.String()) {
		h = (h ^ uint64(c)) * 1099511628211
	}
	return int64(h)
}

// Decision is the outcome of a request (package vocab's, which every
// protocol carries). Durations are nanoseconds.
type Decision = vocab.Decision

// resetDecision sets every field of d for a new decision: denied, nothing
// remaining, the given limit, no retry. Field by field, so d stays in place.
func resetDecision(d *Decision, limit int64) {
	d.Allowed = false
	d.Remaining = 0
	d.Limit = limit
	d.RetryAfter = -1
	d.ResetAfter = 0
	d.Delay = 0
}

// resetAfter returns max(freshAt-now, 0).
func resetAfter(freshAt, now int64) int64 {
	return max(satSub(freshAt, now), 0)
}

// retryAfter returns the RetryAfter of a request denied at now that would
// pass at time at: at-now, but at least 1 even when at saturated at
// math.MaxInt64, because the request was denied at now.
func retryAfter(at, now int64) int64 {
	return max(satSub(at, now), 1)
}
