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
	g := lookup(l.Algorithm)
	if g == nil {
		return fmt.Errorf("%w: %v has no global form; use it with scope: local", ErrUnsupported, l.Algorithm)
	}
	return g.check(l)
}

func count(name string, v int64) error {
	if v > MaxCount {
		return fmt.Errorf("%w: %s = %d is above the largest global count, %d", ErrUnsupported, name, v, MaxCount)
	}
	return nil
}

// duration returns an error if the derived duration d (what) passes
// MaxDuration.
func duration(what string, d int64) error {
	if d > MaxDuration {
		return unsupported("%s, %d ns,", what, d)
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

// decisionLimit is bucket.Decision.Limit for l, which passed Check.
func decisionLimit(l *bucket.Limit) int64 {
	return lookup(l.Algorithm).limit(l)
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
	id, n := l.Identity(), 0
	if g := lookup(l.Algorithm); g != nil {
		n = g.identity
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
