package throttledlimiter

import (
	"context"
	"errors"
	"time"

	"github.com/sluicehq/sluice/clients/go/internal/storekey"
	"github.com/sluicehq/sluice/clients/go/sluice"
	"github.com/throttled/throttled/v2"
)

// DefaultPrefix precedes the library's key in the key of every bucket the
// rate limiter uses (WithPrefix changes it).
const DefaultPrefix = "throttled:"

// RateLimiter is a throttled.RateLimiterCtx that decides in the sidecar:
// every process of the host that limits a key under the same limit shares
// its bucket, and each decision is one call. It is safe for concurrent use.
type RateLimiter struct {
	c      *sluice.Client
	l      sluice.Limit
	prefix string
	now    func() time.Time // if set, requests are decided as of now() (At) rather than the sidecar's clock
}

var (
	_ throttled.RateLimiterCtx = (*RateLimiter)(nil)
	_ throttled.RateLimiter    = (*RateLimiter)(nil)
)

// An Option configures a RateLimiter in New.
type Option func(*RateLimiter)

// WithPrefix sets what precedes the library's key in the sidecar's key
// (default DefaultPrefix): rate limiters of different prefixes count apart.
func WithPrefix(prefix string) Option { return func(r *RateLimiter) { r.prefix = prefix } }

// New returns a rate limiter of limit l (any Sluice limit; Limit gives
// the gcra of a throttled.RateQuota) that asks the sidecar through c,
// whose failure policy applies. c stays the caller's.
func New(c *sluice.Client, l sluice.Limit, opts ...Option) *RateLimiter {
	r := &RateLimiter{c: c, l: l, prefix: DefaultPrefix}
	for _, o := range opts {
		o(r)
	}
	return r
}

var errQuota = errors.New("a rate quota needs a rate made by throttled.PerSec, PerMin, PerHour, PerDay or PerDuration and a burst of 0 or more")

// Limit returns the sidecar's gcra limit that decides as throttled's
// GCRARateLimiterCtx does under q: q.MaxRate's emission interval and a
// burst of q.MaxBurst, so q.MaxBurst+1 requests at once.
func Limit(q throttled.RateQuota) (sluice.Limit, error) {
	// Rate.Quota is deprecated in throttled, but the only reading of a rate.
	count, window := q.MaxRate.Quota()
	if count < 1 || window <= 0 || q.MaxBurst < 0 {
		return sluice.Limit{}, errQuota
	}
	return sluice.GCRA(int64(q.MaxBurst), int64(count), window), nil
}

// RateLimitCtx decides a request of quantity under key in one call to the
// sidecar and reports whether it is limited, with the bucket's state:
// Limit, Remaining, ResetAfter (until the bucket is full again) and
// RetryAfter (until a limited request would pass; -1 if it was not
// limited or never can be). A quantity of 0 peeks: nothing is taken, it is
// never limited, and RetryAfter says when a request of 1 would pass.
func (r *RateLimiter) RateLimitCtx(ctx context.Context, key string, quantity int) (bool, throttled.RateLimitResult, error) {
	var opts []sluice.RequestOption
	if r.now != nil {
		opts = []sluice.RequestOption{sluice.At(r.now())}
	}
	k := storekey.Make(r.prefix, key)
	var d sluice.Decision
	var err error
	if quantity == 0 {
		d, err = r.c.Peek(ctx, r.l, k, opts...)
	} else {
		d, err = r.c.Acquire(ctx, r.l, k, int64(quantity), opts...)
	}
	if err != nil {
		return false, throttled.RateLimitResult{}, err
	}
	res := throttled.RateLimitResult{Limit: -1, Remaining: -1, ResetAfter: -1, RetryAfter: -1}
	if d.Degraded { // nothing known but the failure policy's verdict
		if !d.Allowed {
			res.RetryAfter = d.RetryAfter
		}
		return !d.Allowed, res, nil
	}
	res.Limit, res.Remaining, res.ResetAfter = int(d.Limit), int(d.Remaining), d.ResetAfter
	if !d.Allowed && d.RetryAfter >= 0 {
		res.RetryAfter = d.RetryAfter
	}
	return !d.Allowed && quantity != 0, res, nil
}

// RateLimit is RateLimitCtx without a context, for throttled's older
// HTTPRateLimiter.
func (r *RateLimiter) RateLimit(key string, quantity int) (bool, throttled.RateLimitResult, error) {
	return r.RateLimitCtx(context.Background(), key, quantity)
}
