package global

import (
	"fmt"
	"strconv"

	"github.com/sluicehq/sluice/bucket"
)

// Lua keeps integers exact only below 2^53, and the script works in
// nanoseconds relative to now, so a global limit is held to these bounds
// (package bucket's are wider: see docs/global.md).
const (
	// MaxCount is the largest count a global limit may hold: max (token
	// bucket and windows), burst+1 (gcra). 2^52, about 4.5e15.
	MaxCount int64 = 1 << 52
	// MaxDuration is the longest duration a global limit may hold or
	// derive, in ns: 2^52 ns, about 52 days. It bounds the token bucket's
	// time to refill from empty (ceil(max/refill_amount) * refill_time),
	// the gcra tolerance (burst+1)*T, twice the window of the window
	// algorithms (a sliding window remembers two), and the pacer's
	// max_delay plus one interval.
	MaxDuration int64 = 1 << 52
	// maxCost is the largest cost sent to the script: every larger cost is
	// denied the same way (none fits MaxCount or MaxDuration).
	maxCost int64 = 1<<53 - 1
)

// Check reports whether l can be a global limit: it passes
// bucket.Limit.Validate and fits the bounds above. The error names the
// parameter and wraps ErrUnsupported (or bucket's own sentinel errors).
func Check(l bucket.Limit) error {
	if err := l.Validate(); err != nil {
		return err
	}
	var derived int64
	var what string
	switch l.Algorithm {
	case bucket.TokenBucket:
		if err := count("max", l.Max); err != nil {
			return err
		}
		k := (l.Max + l.RefillAmount - 1) / l.RefillAmount // no overflow: Max <= 2^52
		if k > MaxDuration/l.RefillTime {
			return unsupported("the time to refill an empty bucket, %d steps of %d ns,", k, l.RefillTime)
		}
		return nil
	case bucket.GCRA:
		if err := count("burst+1", l.Burst+1); err != nil {
			return err
		}
		t := l.Period / l.Count
		if l.Burst+1 > MaxDuration/t {
			return unsupported("the tolerance (burst+1)*period/count = %d*%d ns", l.Burst+1, t)
		}
		return nil
	case bucket.FixedWindow:
		derived, what = l.Window, "the window"
	case bucket.SlidingWindow:
		derived, what = 2*l.Window, "twice the window"
	case bucket.Pacer:
		derived, what = l.MaxDelay+pacerInterval(l), "max_delay plus one interval"
	default:
		// sliding_log, window_counters and concurrency keep a block of state
		// per bucket that has no global form (yet): they are local only.
		return fmt.Errorf("%w: %v has no global form; use it with scope: local", ErrUnsupported, l.Algorithm)
	}
	if l.Algorithm == bucket.FixedWindow || l.Algorithm == bucket.SlidingWindow {
		if err := count("limit", l.Max); err != nil {
			return err
		}
	}
	if derived > MaxDuration {
		return unsupported("%s, %d ns,", what, derived)
	}
	return nil
}

func count(name string, v int64) error {
	if v > MaxCount {
		return fmt.Errorf("%w: %s = %d is above the largest global count, %d", ErrUnsupported, name, v, MaxCount)
	}
	return nil
}

func unsupported(format string, args ...any) error {
	return fmt.Errorf("%w: "+format+" is longer than the longest global duration, %d ns (52 days)",
		append(append([]any{ErrUnsupported}, args...), MaxDuration)...)
}

// pacerInterval is package bucket's I = ceil(Period/Count).
func pacerInterval(l bucket.Limit) int64 {
	return (l.Period-1)/l.Count + 1
}

// decisionLimit is bucket.Decision.Limit for l.
func decisionLimit(l *bucket.Limit) int64 {
	switch l.Algorithm {
	case bucket.GCRA:
		return l.Burst + 1
	case bucket.Pacer:
		i := pacerInterval(*l)
		return l.MaxDelay/i + 1
	}
	return l.Max
}

// scriptParams returns the three parameters the script takes for l (see
// decide.lua).
func scriptParams(l *bucket.Limit) [3]int64 {
	switch l.Algorithm {
	case bucket.TokenBucket:
		return [3]int64{l.Max, l.RefillTime, l.RefillAmount}
	case bucket.GCRA:
		return [3]int64{l.Period / l.Count, l.Burst + 1, 0}
	case bucket.Pacer:
		return [3]int64{pacerInterval(*l), l.MaxDelay, 0}
	}
	return [3]int64{l.Max, l.Window, 0}
}

// AppendKey appends the Redis key of the bucket of limit l and key k under
// prefix: prefix{k}:algorithm[:identity...], where the identity is
// bucket.Limit.Identity's non-zero prefix (token_bucket max, refill_time,
// refill_amount; the windows their window; gcra and pacer nothing). The
// hash tag {k} puts every key of one caller's key in one Cluster slot.
// Keys are unambiguous: the part after the last "}" is fixed.
func AppendKey(dst []byte, prefix string, l *bucket.Limit, k string) []byte {
	dst = append(dst, prefix...)
	dst = append(dst, '{')
	dst = append(dst, k...)
	dst = append(dst, "}:"...)
	dst = append(dst, l.Algorithm.String()...)
	id := l.Identity()
	n := 0
	switch l.Algorithm {
	case bucket.TokenBucket:
		n = 3
	case bucket.FixedWindow, bucket.SlidingWindow:
		n = 1
	}
	for _, v := range id[:n] {
		dst = append(dst, ':')
		dst = strconv.AppendInt(dst, v, 10)
	}
	return dst
}

// clampCost returns cost limited to [0, maxCost].
func clampCost(cost int64) int64 {
	return min(max(cost, 0), maxCost)
}
