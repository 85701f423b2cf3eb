// Package bucket holds Sluice's limiter algorithms as pure functions over a
// fixed-size State, given the time.
//
// A Limit is an algorithm and its parameters; a State is the algorithm's
// three int64 words inside a slot of the table. Limit.Apply decides a
// request of some cost (tokens) at a time now and updates the State if the
// algorithm's semantics say so; Limit.Refund gives tokens back;
// Limit.FreshAt tells the table when a slot holds no information any more
// and may be reclaimed. Most callers want, per request:
//
//	if err := l.Validate(); err != nil { ... }      // once per limit
//	// under the slot lock: s is the slot's State, or l.Init(now, &s) for a new bucket
//	d, changed := l.Apply(now, &s, cost, flags)
//
// The package imports only the standard library, reads no clock, does no
// I/O and allocates nothing on the decision path. Arithmetic is integer
// only; every intermediate value that could overflow either is ruled out by
// Validate or saturates at math.MaxInt64 / math.MinInt64, so extreme inputs
// give conservative decisions, never a wraparound or a panic.
//
// # Algorithms
//
// token_bucket (Max, RefillTime, RefillAmount) is smyte/ratelimit's bucket.
// A new bucket is full. Refill is discrete: RefillAmount tokens arrive at
// each whole RefillTime since the bucket's refill clock, whose phase is
// anchored at the bucket's creation and moves only in whole steps, so the
// bucket keeps its phase while capped at Max. A request is allowed iff the
// tokens available are >= cost. By default a denial changes nothing. With
// Strict a request that leaves the bucket at 0, or is denied, restarts the
// refill clock at now. With Smyte every request with cost > 0 writes
// max(available-cost, 0), so a denial drains the bucket, and
// Decision.Remaining is the count before the deduction, which is the reply of
// RL.REDUCE. State: [0] tokens as of the refill clock, in [0, Max];
// [1] the refill clock, Unix ns of the last whole refill step; [2] unused.
//
// gcra (Burst, Count, Period) is redis-cell's generic cell rate algorithm
// with emission interval T = Period/Count ns (truncated) and tolerance
// tau = (Burst+1)*T. A request is allowed iff max(tat-now, 0) + cost*T <=
// tau; then tat = max(tat, now) + cost*T. A denial changes nothing. The
// parameters are not part of the bucket's identity: a stored tat is read
// under whatever parameters a request brings. State: [0] tat, the
// theoretical arrival time, Unix ns; [1], [2] unused.
//
// fixed_window (Max, Window) counts tokens in windows aligned to multiples
// of Window since the Unix epoch. A request is allowed iff count+cost <=
// Max; a denial is not counted. State: [0] the start of the counted window,
// Unix ns; [1] its count; [2] unused.
//
// sliding_window (Max, Window) is the two-window weighted counter
// (Cloudflare, Kong, Figma): estimate = prev*(Window-elapsed)/Window + curr,
// where elapsed is the time since the current aligned window started. A
// request is allowed iff estimate+cost <= Max, decided exactly with 128-bit
// products; a denial is not counted. Decision.RetryAfter is the exact
// earliest nanosecond at which the request would pass. State: [0] the start
// of the current window, Unix ns; [1] the previous window's count; [2] the
// current window's count.
//
// pacer (Count, Period, MaxDelay) is the leaky bucket as a queue (CALLR):
// slots are I = ceil(Period/Count) ns apart; a request gets the slot
// max(next, now) and Decision.Delay = slot-now, the time the caller must
// wait before acting; it is denied if that would exceed MaxDelay. An allowed
// request of cost n takes n slots. State: [0] next, the Unix ns of the next
// free slot; [1], [2] unused.
//
// # Time
//
// Time is always a parameter: now is Unix nanoseconds (int64), the
// server's clock or a client's explicit timestamp, and every duration in a
// Limit or a Decision is nanoseconds. Time may go backwards relative to a
// State (a client replaying history with an earlier timestamp, a clock
// step): elapsed time then counts as zero, so time travel never mints
// tokens. A token bucket keeps its refill clock (native Strict restarts it
// at the later of the two times); a fixed window keeps the later stored
// window; a sliding window keeps it too, with its previous count at full
// weight; gcra and pacer keep their later tat. This holds in smyte
// compatibility too: smyte/ratelimit's STRICT restarts the refill clock at a
// backwards client time, moving it back (anchor-semantics.md 1.7), which
// refills the bucket early; Strict|Smyte keeps the later clock instead.
//
// Decisions are exact for times in [0, MaxTime] (1970 to 2190) and
// limits whose durations, and derived durations, are at most MaxDuration
// (2^31 s, 68 years): MaxTime+MaxDuration fits in an int64, so within those
// ranges nothing a decision computes can overflow, a bucket that reports
// Remaining > 0 admits a cost of 1, and a denied cost that fits the limit
// always has a finite RetryAfter at which it passes.
//
// # Caveats
//
// The zero State is not a new bucket; use Limit.Init. A State written by
// one algorithm means nothing to another, and a token_bucket or window
// State means nothing under other values of the parameters in
// Limit.Identity: the table must key buckets by those.
//
// gcra replies are exact in nanoseconds; redis-cell's CL.THROTTLE rounds
// durations up to whole seconds (at millisecond granularity) and truncates
// T to microseconds for remaining, which can then exceed the limit. That
// conversion belongs to the RESP layer.
//
// Cost 0 is a peek: Apply then never writes (unlike redis-cell's quantity
// 0). SPEC's peek operation, the decision for cost 1 without consuming, is
// Apply with cost 1 on a copy of the State.
//
// Outside the exact ranges, values near the ends of the int64 range never
// wrap around. Durations, refill times and window ends saturate at
// math.MaxInt64 (a window below math.MinInt64 starts there). A gcra or
// pacer request whose tat or slots would pass math.MaxInt64 (possible only
// at a time past MaxTime, or for a cost larger than the limit's capacity)
// is denied with RetryAfter -1 rather than stored saturated, which would
// forget its debt. Comparisons of the sliding window's weighted counts use
// 128-bit products.
//
// Methods on Limit assume it passed Validate; an Invalid or unknown
// algorithm panics. They are safe for simultaneous use on distinct States;
// a State shared between goroutines needs the caller's lock.
package bucket
