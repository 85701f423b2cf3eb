package rls

import (
	"math"
	"strconv"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/bucket"
)

// Result is what was decided for one Item that Decides.
type Result struct {
	Decision bucket.Decision
	Limit    *bucket.Limit // the limit that decided it
	Name     string        // Named: the limit's name
}

// The names of the response headers, envoyproxy/ratelimit's defaults.
const (
	HeaderLimit     = "RateLimit-Limit"
	HeaderRemaining = "RateLimit-Remaining"
	HeaderReset     = "RateLimit-Reset"
)

// Respond builds the response to the items, results holding one Result
// for each item (used where the item Decides) decided at now (Unix ns).
// With headers it adds the RateLimit-* headers of the descriptor that is
// over its limit or, if none is, of the one with the fewest requests
// remaining, as envoyproxy/ratelimit does.
func Respond(items []Item, results []Result, now int64, headers bool) *rlspb.RateLimitResponse {
	resp := &rlspb.RateLimitResponse{
		OverallCode: rlspb.RateLimitResponse_OK,
		Statuses:    make([]*rlspb.RateLimitResponse_DescriptorStatus, len(items)),
	}
	var pick *rlspb.RateLimitResponse_DescriptorStatus
	for i := range items {
		st := status(&items[i], &results[i], now)
		resp.Statuses[i] = st
		switch {
		case st.Code == rlspb.RateLimitResponse_OVER_LIMIT:
			resp.OverallCode, pick = st.Code, st
		case st.CurrentLimit == nil:
		case pick == nil || pick.Code != rlspb.RateLimitResponse_OVER_LIMIT && st.LimitRemaining < pick.LimitRemaining:
			pick = st
		}
	}
	if headers && pick != nil {
		reset := (pick.GetDurationUntilReset().AsDuration() + time.Second - 1) / time.Second
		resp.ResponseHeadersToAdd = []*corepb.HeaderValue{
			{Key: HeaderLimit, Value: strconv.FormatUint(uint64(pick.CurrentLimit.RequestsPerUnit), 10)},
			{Key: HeaderRemaining, Value: strconv.FormatUint(uint64(pick.LimitRemaining), 10)},
			{Key: HeaderReset, Value: strconv.FormatInt(int64(reset), 10)},
		}
	}
	return resp
}

// status is one descriptor's status.
func status(it *Item, r *Result, now int64) *rlspb.RateLimitResponse_DescriptorStatus {
	ok := rlspb.RateLimitResponse_OK
	switch it.Kind {
	case None:
		return &rlspb.RateLimitResponse_DescriptorStatus{Code: ok}
	case Unlimited:
		return &rlspb.RateLimitResponse_DescriptorStatus{Code: ok, LimitRemaining: math.MaxUint32}
	case Blocked:
		code := rlspb.RateLimitResponse_OVER_LIMIT
		if it.Hits == 0 || it.Refund || it.Shadow {
			code = ok
		}
		w := unitSeconds[it.Unit] * it.Mult * 1e9
		return &rlspb.RateLimitResponse_DescriptorStatus{
			Code: code, CurrentLimit: rate(it, 0), DurationUntilReset: durationpb.New(time.Duration(w - now%w)),
		}
	}
	d, l := &r.Decision, r.Limit
	st := &rlspb.RateLimitResponse_DescriptorStatus{Code: ok, LimitRemaining: uint32(min(max(d.Remaining, 0), math.MaxUint32))}
	if !d.Allowed && !it.Shadow {
		st.Code = rlspb.RateLimitResponse_OVER_LIMIT
	}
	reset := d.ResetAfter
	if l.Algorithm == bucket.FixedWindow {
		reset = l.Window - now%l.Window // the window's end, whether or not the bucket exists
	}
	st.DurationUntilReset = durationpb.New(time.Duration(reset))
	if it.Kind == Window {
		st.CurrentLimit = rate(it, it.Per)
		return st
	}
	u, mult, per := rateOf(l)
	st.CurrentLimit = &rlspb.RateLimitResponse_RateLimit{Name: r.Name, RequestsPerUnit: per, Unit: u}
	if it.Rule.Name != "" {
		st.CurrentLimit.Name = it.Rule.Name
	}
	if mult != 1 {
		st.CurrentLimit.UnitMultiplier = wrapperspb.UInt32(mult)
	}
	return st
}

// rate is a window's current limit.
func rate(it *Item, per uint32) *rlspb.RateLimitResponse_RateLimit {
	rl := &rlspb.RateLimitResponse_RateLimit{RequestsPerUnit: per, Unit: it.Unit}
	if it.Rule != nil {
		rl.Name = it.Rule.Name
	}
	if it.Mult != 1 {
		rl.UnitMultiplier = wrapperspb.UInt32(uint32(it.Mult))
	}
	return rl
}

// quotaUnits are the units of a quota's calendar periods.
var quotaUnits = map[bucket.CalendarUnit]Unit{
	bucket.CalDay: rlspb.RateLimitResponse_RateLimit_DAY, bucket.CalWeek: rlspb.RateLimitResponse_RateLimit_WEEK,
	bucket.CalMonth: rlspb.RateLimitResponse_RateLimit_MONTH, bucket.CalYear: rlspb.RateLimitResponse_RateLimit_YEAR,
}

// rateOf is a named limit's rate as a unit, a multiplier and the requests
// per that many units: a quota's limit per its calendar period (a month is
// MONTH, whatever its length), another limit's as perPeriod and unitOf
// say.
func rateOf(l *bucket.Limit) (Unit, uint32, uint32) {
	if u, ok := quotaUnits[l.Calendar]; ok && l.Algorithm == bucket.Quota {
		return u, uint32(min(max(l.Every, 1), math.MaxUint32)), uint32(min(l.Max, math.MaxUint32))
	}
	return unitOf(perPeriod(l))
}

// perPeriod is a limit's rate as requests per period (ns): a window's
// limit per window, a token bucket's capacity per the time it takes to
// refill from empty, gcra's and the pacer's count per period.
func perPeriod(l *bucket.Limit) (n, period int64) {
	switch l.Algorithm {
	case bucket.TokenBucket:
		steps := (l.Max + l.RefillAmount - 1) / l.RefillAmount
		return l.Max, steps * l.RefillTime
	case bucket.GCRA, bucket.Pacer:
		return l.Count, l.Period
	}
	return l.Max, l.Window
}

// unitOf expresses n requests per period as requests per a multiple of the
// largest unit that divides the period; a period that is not whole
// seconds is expressed per second, rounded down (at least 1).
func unitOf(n, period int64) (Unit, uint32, uint32) {
	per := uint32(min(n, math.MaxUint32))
	for _, u := range []Unit{
		rlspb.RateLimitResponse_RateLimit_WEEK, rlspb.RateLimitResponse_RateLimit_DAY,
		rlspb.RateLimitResponse_RateLimit_HOUR, rlspb.RateLimitResponse_RateLimit_MINUTE,
		rlspb.RateLimitResponse_RateLimit_SECOND,
	} {
		ns := unitSeconds[u] * 1e9
		if period%ns == 0 && period/ns <= math.MaxUint32 {
			return u, uint32(period / ns), per
		}
	}
	perSecond := float64(n) * 1e9 / float64(period)
	return rlspb.RateLimitResponse_RateLimit_SECOND, 1, uint32(min(max(perSecond, 1), math.MaxUint32))
}
