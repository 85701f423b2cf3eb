package sluice

import (
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/proto"
)

// Limit is an algorithm and its parameters: exactly what the wire carries
// (see proto.Limit). Build one with the constructors below or ParseLimit.
// It is comparable, so it can key a map. The zero Limit is invalid.
type Limit = proto.Limit

// Algorithm names a limiter algorithm; Limit.Algorithm.String() gives its
// name in limit specs ("token_bucket", ...).
type Algorithm = proto.Algorithm

// TokenBucket returns a token_bucket limit: a bucket of max tokens, full
// when new, that gains refillAmount tokens every refillTime (discrete
// refills, as smyte/ratelimit). The sidecar wants max >= 1,
// refillTime >= 1ms and refillAmount >= 1.
func TokenBucket(max int64, refillTime time.Duration, refillAmount int64) Limit {
	return proto.TokenBucketLimit(max, refillTime, refillAmount)
}

// GCRA returns a gcra limit (redis-cell's generic cell rate algorithm):
// count requests per period, with bursts of up to burst+1.
func GCRA(burst, count int64, period time.Duration) Limit {
	return proto.GCRALimit(burst, count, period)
}

// FixedWindow returns a fixed_window limit: limit tokens per window, the
// windows aligned to multiples of window since the Unix epoch.
func FixedWindow(limit int64, window time.Duration) Limit {
	return proto.FixedWindowLimit(limit, window)
}

// SlidingWindow returns a sliding_window limit: limit tokens over any
// window, estimated from the current and the previous aligned window.
func SlidingWindow(limit int64, window time.Duration) Limit {
	return proto.SlidingWindowLimit(limit, window)
}

// Pacer returns a pacer limit: rate events per period, spaced evenly; a
// Decision's Delay is the caller's wait, and a request that would wait more
// than maxDelay is denied.
func Pacer(rate int64, period, maxDelay time.Duration) Limit {
	return proto.PacerLimit(rate, period, maxDelay)
}

// SlidingLog returns a sliding_log limit: limit tokens over any window,
// exactly, from a log of the requests' times (one entry per token: the
// sidecar wants 1 <= limit <= 4096 and window >= 1ms).
func SlidingLog(limit int64, window time.Duration) Limit {
	return proto.SlidingLogLimit(limit, window)
}

// WindowCounters returns a window_counters limit: limit tokens over any
// window, counted in counters sub-windows (1 to 64); with countDenied a
// denied request counts too, so a caller who keeps hammering stays limited.
func WindowCounters(limit int64, window time.Duration, counters uint8, countDenied bool) Limit {
	return proto.WindowCountersLimit(limit, window, counters, countDenied)
}

// Concurrency returns a concurrency limit: at most limit leases held at
// once, each until it is released or, failing that, until lease after it
// was taken (the sidecar wants 1 <= limit <= 1024 and lease >= 1ms). Its
// slots are taken with Client.Lease and given back with Lease.Release;
// Acquire, Refund and Multi refuse it.
func Concurrency(limit int64, lease time.Duration) Limit {
	return proto.ConcurrencyLimit(limit, lease)
}

// Quota returns a quota limit (a sidecar of protocol version 5): limit
// tokens per calendar period of the time zone tz ("" for UTC; an IANA
// name such as "Europe/Paris"), period one of "day", "week", "month" and
// "year" or a multiple ("2week", "3month"). Months start on the 1st and
// weeks on Monday; ParseLimit takes the spec's anchor and week_start for
// others ("quota:limit=1000,period=month,anchor=15"). The error wraps
// ErrInvalidLimit.
func Quota(limit int64, period, tz string) (Limit, error) {
	spec := "quota:limit=" + strconv.FormatInt(limit, 10) + ",period=" + period
	if tz != "" {
		spec += ",tz=" + tz
	}
	return ParseLimit(spec)
}

// ParseLimit parses a limit spec, "ALGORITHM:name=value,...", for example
// "token_bucket:max=10,refill_time=1h,refill_amount=1" or
// "gcra:burst=4,count=1,period=1s" (proto's package doc, "Limit spec", has
// the grammar). Limit.String gives the canonical spec back. The error
// wraps ErrInvalidLimit. Only the syntax is checked: the sidecar judges
// the values.
func ParseLimit(spec string) (Limit, error) {
	l, err := proto.ParseLimit(spec)
	if err != nil {
		return Limit{}, &StatusError{Status: proto.StatusInvalidLimit, Message: strings.TrimPrefix(err.Error(), "proto: ")}
	}
	return l, nil
}
