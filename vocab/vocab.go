package vocab

import "strconv"

// Algorithm names a limiter algorithm. The zero value, Invalid, is never
// valid. The values are stable: state files store them (a slot's kind) and
// the wire carries them (a limit's first byte).
type Algorithm uint8

// The algorithms. SlidingLog, WindowCounters and Concurrency keep their
// state in a block of the state file's arena besides the slot (Extended),
// and are protocol version 3's (ValidIn); Quota is version 5's.
const (
	Invalid        Algorithm = iota // never valid; the zero value
	TokenBucket                     // "token_bucket": smyte/ratelimit's discrete-refill token bucket
	GCRA                            // "gcra": redis-cell's generic cell rate algorithm
	FixedWindow                     // "fixed_window": a counter per epoch-aligned window
	SlidingWindow                   // "sliding_window": two-window weighted counter
	Pacer                           // "pacer": leaky bucket as a queue; replies carry a delay
	SlidingLog                      // "sliding_log": exact rolling window over a log of admissions
	WindowCounters                  // "window_counters": sub-window counters summed over the last window
	Concurrency                     // "concurrency": leases held at once, released or expiring
	Quota                           // "quota": a count per calendar period in a time zone

	NumAlgorithms // one past the last valid Algorithm
)

// RegisterKind is the kind a state file stores in a slot that holds a
// register (a value with an expiry, protocol version 6) rather than a
// bucket. It is no algorithm: Valid reports false for it, and no limit or
// SCAN names it.
const RegisterKind Algorithm = 0x80

var algorithmNames = [NumAlgorithms]string{
	Invalid:        "invalid",
	TokenBucket:    "token_bucket",
	GCRA:           "gcra",
	FixedWindow:    "fixed_window",
	SlidingWindow:  "sliding_window",
	Pacer:          "pacer",
	SlidingLog:     "sliding_log",
	WindowCounters: "window_counters",
	Concurrency:    "concurrency",
	Quota:          "quota",
}

// Valid reports whether a is one of the algorithms (not Invalid, not past
// the last).
func (a Algorithm) Valid() bool { return a >= TokenBucket && a < NumAlgorithms }

// ValidIn reports whether a is one of the algorithms of protocol version v:
// TokenBucket to Pacer in versions 1 and 2, to Concurrency in versions 3
// and 4, every one from version 5.
func (a Algorithm) ValidIn(v uint8) bool {
	switch {
	case v < 3:
		return a >= TokenBucket && a <= Pacer
	case v < 5:
		return a >= TokenBucket && a <= Concurrency
	}
	return a.Valid()
}

// Extended reports whether a keeps state beyond a slot's StateWords, in a
// block of the state file's arena: sliding_log, window_counters and
// concurrency.
func (a Algorithm) Extended() bool { return a >= SlidingLog && a <= Concurrency }

// Name returns the algorithm's name in configuration, limit specs and
// metrics ("token_bucket", ...), and ok false for Invalid and values past
// the last algorithm (whose name is then "invalid" or "").
func (a Algorithm) Name() (name string, ok bool) {
	if a < NumAlgorithms {
		return algorithmNames[a], a.Valid()
	}
	return "", false
}

// String returns the algorithm's name, "invalid" for Invalid, and
// "algorithm(N)" for a value past the last algorithm.
func (a Algorithm) String() string {
	if a < NumAlgorithms {
		return algorithmNames[a]
	}
	return Unnamed(a)
}

// Unnamed is how an algorithm without a name is written: "algorithm(N)".
func Unnamed(a Algorithm) string { return "algorithm(" + strconv.Itoa(int(a)) + ")" }

// Named returns the valid algorithm named s, in lower case, or Invalid.
func Named(s string) Algorithm {
	for a := TokenBucket; a < NumAlgorithms; a++ {
		if algorithmNames[a] == s {
			return a
		}
	}
	return Invalid
}

// The limits every layer enforces alike.
const (
	MaxKeyLen  = 1024 // the longest key (or scan prefix), in bytes; a key has at least one
	MaxBatch   = 256  // the most operations of one native frame
	MaxMulti   = 16   // the most items of one all-or-nothing batch (MULTI)
	StateWords = 3    // int64 words of an algorithm's state in a slot
)

// Decision is the outcome of a request: what every algorithm decides and
// every protocol carries. Durations are nanoseconds.
type Decision struct {
	// Allowed reports whether the request may proceed (for the pacer: after
	// waiting Delay).
	Allowed bool
	// Remaining is, for most algorithms, how many more cost-1 requests
	// would be allowed right now after this one. token_bucket: the tokens
	// left after the request if allowed, the tokens available if denied;
	// with Smyte, the tokens available before the deduction; concurrency:
	// the entries free for a lease. Always in [0, Limit].
	Remaining int64
	// Limit is the largest Remaining can be: token_bucket, fixed_window,
	// sliding_window, sliding_log, window_counters, concurrency: Max; gcra:
	// Burst+1; pacer: MaxDelay/interval + 1.
	Limit int64
	// RetryAfter is the time until this same request would be allowed with
	// no other traffic: -1 if it is allowed, -1 if it can never be (cost
	// above the limit's capacity; gcra or pacer state that would pass
	// math.MaxInt64); otherwise >= 1, saturating at math.MaxInt64.
	RetryAfter int64
	// ResetAfter is the time until the bucket is back to its fresh state
	// with no other traffic: max(FreshAt-now, 0), so 0 for a fresh bucket.
	ResetAfter int64
	// Delay is, for the pacer, the time the caller must wait before acting
	// (0 when denied); 0 for the other algorithms.
	Delay int64
}
