// Package bucket holds Sluice's limiter algorithms as pure functions over a
// fixed-size State (and, for some, a block of words beside it), given the
// time.
//
// A Limit is an algorithm and its parameters; a State is the algorithm's
// three int64 words inside a slot of the table. Every algorithm has the one
// method set: Limit.Init makes a new bucket, Limit.Decide decides a request
// of some cost (tokens) at a time now and updates the State if the
// algorithm's semantics say so, Limit.Peek reports the bucket without
// changing it, Limit.DecideRefund gives tokens back, Limit.Drained replaces
// a state found torn, and Limit.FreshAt tells the table when a slot holds
// no information any more and may be reclaimed. Most callers want, per
// request:
//
//	if err := l.Validate(); err != nil { ... }      // once per limit
//	// under the slot lock: s is the slot's State, or l.Init(now, &s, ext) for a new bucket
//	changed := l.Decide(now, &s, ext, cost, flags, &d)
//
// The State of quota holds its period's boundaries; package time computes
// them (see Algorithms). Three algorithms keep more state than a State holds: sliding_log,
// window_counters and concurrency (Algorithm.Extended). Theirs lives in an
// extension, ext, a block of Limit.ExtWords int64 words that the table
// allocates beside the slot; the others take ext nil (Apply and Refund are
// Decide and DecideRefund for them, returning the Decision). Concurrency
// alone also takes AcquireLease and ReleaseLease.
//
// # Adding an algorithm
//
// Pick the family by the state: if three int64 words hold it, it is of
// fixed size (ExtWords 0); if it needs more, it is extended, and ExtWords
// says how many words its block has. Then:
//
//   - vocab: its value (the next one: values are stored and sent) and name.
//   - bucket: a file with its apply, refund, freshAt and drained functions,
//     one case in each method of apply.go, its parameters in limit.go
//     (usedParams, Validate, Identity) and, if extended, ext.go's ExtWords;
//     its section below; its tests beside the others' (helpers_test.go's
//     testLimits or extLimits run the shared properties on it).
//   - proto: its spec parameters (specParams in limit.go) and wire order,
//     in doc.go; engine.bucketLimit maps them onto the Limit's fields. A
//     new algorithm is a new protocol version (quota is version 5's).
//   - The Python client's copy: its Algorithm value and its Limit class in
//     clients/python/src/sluice/limits.py, checked against proto/testdata.
//   - Global limits, if it can be one: its script, internal/global/lua/<name>.lua,
//     and its row of internal/global/algorithms.go's algorithms (that
//     package's doc, "Algorithms"), checked against this package by the
//     conformance tests.
//
// The engine, the server and the clients need nothing more: they decide
// every algorithm through this method set.
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
// sliding_log (Max, Window) is the exact rolling window of CALLR's sorted
// sets: the tokens admitted in any Window-long span never exceed Max. The
// extension is a ring of the last Max admission times, one entry per token
// (a request of cost c writes c entries). A request of cost c is allowed iff
// fewer than Max-c+1 entries are later than now-Window, which the
// (Max-c+1)-th most recent entry alone decides, in O(1); an entry later than
// now (time went backwards) counts too, and an admission is recorded at
// max(now, the newest entry), so the ring stays in order. Decision.Remaining
// is Max minus the entries that count after the request, found by binary
// search; a denied RetryAfter is exact: the (Max-c+1)-th most recent entry
// plus Window, minus now; a cost above Max is never allowed. A denial
// changes nothing; a refund un-admits the newest entries that still count.
// The bucket is fresh Window after its newest entry.
// State: [0] the ring's position, head | fill<<32: head in [0, Max) the
// index the next entry is written to (the oldest once the ring is full),
// fill in [0, Max] the entries stored, the k-th most recent at
// (head-k) mod Max. Max is capped at MaxLogLimit.
//
// window_counters (Max, Window, Counters, CountDenied) is Figma's sliding
// window counters: sub-windows of w = ceil(Window/Counters) ns aligned to
// multiples of w since the Unix epoch, each with a counter. A request sees
// the sum of the counters of every sub-window that overlaps
// (now-Window, now] (sub-window j stops counting at (j+1)*w + Window), which
// holds every admission of that span and some before: harsh, never lenient.
// A request is allowed iff sum+cost <= Max, and then adds cost to now's
// sub-window; with CountDenied a denied request adds its cost too, so a
// caller who keeps hammering stays limited. If time went backwards, the
// stored sub-windows after now's count as well and the count goes into the
// newest one. Decision.RetryAfter is exact for the counters as they stand
// after the request: the time the sub-windows that must leave for the
// request to fit have left. The extension is a ring of Counters+1 counters,
// sub-window j at index j mod (Counters+1) (Counters*w >= Window, so at most
// Counters+1 overlap). Decision.Remaining is max(Max-sum, 0). A refund
// takes from the newest sub-window first. The bucket is fresh Window after
// the end of its newest sub-window with a count.
// State: [0] the number j of the newest stored sub-window. Counters is
// capped at MaxCounters.
//
// concurrency (Max, Lease) is nginx limit_conn's slots in flight: at most
// Max leases are held at once. AcquireLease takes a free entry, held until
// now+Lease, under an id the caller draws at random (the bucket only makes
// it non-zero and unique among its entries), and returns it, the caller's
// handle; ReleaseLease frees it
// by id (an unknown, released or expired id does nothing); an entry whose
// expiry has passed is free again. A lease's expiry is absolute, so an
// earlier now only finds more entries held. Leases are taken only through
// AcquireLease: Decide, whatever the cost, is a peek (Remaining the
// entries free, Allowed whether one is), and a refund changes nothing. The
// bucket is fresh when its latest expiry passes. The
// extension is Max entries of two words, [expiry, id]; an entry is held iff
// expiry > now, and a released entry's expiry is 0. State: [0] is not read
// (Init and Drained set it to now: earlier versions kept their latest
// id there). Max is capped at MaxConcurrency.
//
// quota (Max, Calendar, Every, Anchor, WeekStart, Loc) counts tokens per
// period of a calendar in a time zone, like a fixed window whose windows
// are local days, weeks, months or years (Every of them: 2 weeks, 3
// months). CalendarPeriod gives the period [start, end) that holds a time:
// start is the first instant of a local day of Loc (UTC if nil): its
// midnight, or, where a transition skips midnight, the instant it lands
// on; a day a zone skipped entirely is an empty period. So a local day
// lasts 23 or 25 hours across a DST change, and a month 28 to 31 days,
// leap years included. Days are counted from 1970-01-01, weeks from the
// week holding it that starts on WeekStart (days after Monday), months
// from January 1970 (Every 3: quarters), each a multiple of Every; months
// start on day Anchor (a month shorter than Anchor on its last day) and a
// year on January's. A request is allowed iff count+cost <= Max; a denial
// is not counted; RetryAfter is the time to the period's end,
// Decision.Remaining max(Max-count, 0), and ResetAfter the time to the
// period's end once the period counted anything (0 while it is untouched,
// as every algorithm's: the bucket is as new). The stored period applies
// until its end, so the calendar is computed once per period, not per
// request, and a stored period later than now's (time went backwards)
// still applies. The bucket is fresh at the end of a period that counted
// anything. State: [0] the start of the stored period, Unix ns; [1] its
// count; [2] its end, Unix ns.
//
// For the three extended algorithms, Decision.Limit is Max, State word [1] is vocab.BlockSum(ext),
// updated word by word with every change to the extension, so the table can
// tell a torn block on recovery (and then use Drained), and word [2]
// belongs to the table, which keeps the block's reference there: it is
// never read or written by this package.
//
// # Space
//
// A bucket takes one slot of 64 bytes. The table stores an extension's
// words as 8 bytes each in cells of 64 bytes, so an extended bucket takes
// 64 bytes plus 8*ExtWords rounded up to 64: sliding_log 64 + 8*Max rounded
// up (a limit of 10: 192 bytes; of MaxLogLimit, 4096: 32832 bytes);
// window_counters 64 + 8*(Counters+1) rounded up (Counters 60: 576 bytes; 64:
// 640); concurrency 64 + 16*Max rounded up (a limit of 16: 320 bytes; of
// MaxConcurrency, 1024: 16448 bytes).
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
// weight; gcra and pacer keep their later tat; a sliding log counts its
// entries later than now and records at its newest; window counters count
// their sub-windows later than now's and count into the newest; leases keep
// their absolute expiry. This holds in smyte
// compatibility too: smyte/ratelimit's STRICT restarts the refill clock at a
// backwards client time, moving it back (anchor-semantics.md 1.7), which
// refills the bucket early; Strict|Smyte keeps the later clock instead.
//
// A quota's calendar is the one exception to integer arithmetic's rule
// above: its periods are computed with package time, whose zone rules
// (Loc) come from the IANA database; the caller loads them, since this
// package does no I/O. Every is capped so a period stays within
// MaxDuration.
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
// The zero State is not a new bucket; use Limit.Init. A
// State written by one algorithm means nothing to another, and a
// token_bucket, window, sliding_log, window_counters or concurrency State
// means nothing under other values of the parameters in Limit.Identity: the
// table must key buckets by those.
//
// The methods panic when given an extension whose length is not ExtWords
// (nil for an algorithm of fixed size), AcquireLease and ReleaseLease on
// another algorithm than concurrency, as on a Limit that did not pass
// Validate.
//
// gcra replies are exact in nanoseconds; redis-cell's CL.THROTTLE rounds
// durations up to whole seconds (at millisecond granularity) and truncates
// T to microseconds for remaining, which can then exceed the limit. That
// conversion belongs to the RESP layer.
//
// Cost 0 is a peek: Apply then never writes (unlike redis-cell's quantity
// 0). SPEC's peek operation, the decision for cost 1 without consuming, is
// Peek (for an algorithm of fixed size, Decide with cost 1 on a copy of
// the State; an extended one copies nothing).
//
// Outside the exact ranges, values near the ends of the int64 range never
// wrap around. Durations, refill times and window ends saturate at
// math.MaxInt64 (a window below math.MinInt64 starts there). A gcra or
// pacer request whose tat or slots would pass math.MaxInt64 (possible only
// at a time past MaxTime, or for a cost larger than the limit's capacity)
// is denied with RetryAfter -1 rather than stored saturated, which would
// forget its debt. Comparisons of the sliding window's weighted counts use
// 128-bit products. window_counters requires Window plus one sub-window to
// be at most MaxDuration, so the time a counter stops counting fits too. A
// lease taken within Lease of math.MaxInt64 expires at math.MaxInt64.
// Before 1970, a released entry's expiry 0 is still ahead: it counts as held.
//
// Methods on Limit assume it passed Validate; an Invalid or unknown
// algorithm panics. They are safe for simultaneous use on distinct States;
// a State shared between goroutines needs the caller's lock.
package bucket
