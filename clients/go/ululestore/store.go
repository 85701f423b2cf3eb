package ululestore

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/sluicehq/sluice/clients/go/internal/storekey"
	"github.com/sluicehq/sluice/clients/go/sluice"
	"github.com/ulule/limiter/v3"
)

// DefaultPrefix precedes the library's key in the key of every bucket the
// store uses (WithPrefix changes it).
const DefaultPrefix = "ulule:"

// Store is a limiter.Store whose counts are the sidecar's: every process
// of the host that limits a key under a rate shares its bucket. It is safe
// for concurrent use.
type Store struct {
	c      *sluice.Client
	prefix string
}

var _ limiter.Store = (*Store)(nil)

// An Option configures a Store in New.
type Option func(*Store)

// WithPrefix sets what precedes the library's key in the sidecar's key
// (default DefaultPrefix): stores of different prefixes count apart.
func WithPrefix(prefix string) Option { return func(s *Store) { s.prefix = prefix } }

// New returns a store that asks the sidecar through c, whose failure
// policy applies (see the package documentation). c stays the caller's.
func New(c *sluice.Client, opts ...Option) *Store {
	s := &Store{c: c, prefix: DefaultPrefix}
	for _, o := range opts {
		o(s)
	}
	return s
}

var errNegativeRate = errors.New("a rate's limit must not be negative")

// Limit returns the limit that decides rate: a fixed_window of
// rate.Limit+1 tokens per rate.Period. The extra token is the request that
// finds the limit reached: taking it tells the store that the count has
// passed rate.Limit, as ulule's own stores count it, and it is refused.
func Limit(rate limiter.Rate) (sluice.Limit, error) {
	if rate.Limit < 0 || rate.Limit == math.MaxInt64 {
		return sluice.Limit{}, errNegativeRate
	}
	return sluice.FixedWindow(rate.Limit+1, rate.Period), nil
}

// Get counts one request against key under rate and returns the result:
// Reached means refuse it.
func (s *Store) Get(ctx context.Context, key string, rate limiter.Rate) (limiter.Context, error) {
	return s.Increment(ctx, key, 1, rate)
}

// Increment counts count requests against key under rate in one decision:
// all of them, or, if they do not fit what is left of the window, none
// (then Reached is set).
func (s *Store) Increment(ctx context.Context, key string, count int64, rate limiter.Rate) (limiter.Context, error) {
	l, err := Limit(rate)
	if err != nil {
		return limiter.Context{}, err
	}
	d, err := s.c.Acquire(ctx, l, storekey.Make(s.prefix, key), count)
	if err != nil {
		return limiter.Context{}, err
	}
	return contextOf(rate, d), nil
}

// Peek returns key's state under rate without counting anything.
func (s *Store) Peek(ctx context.Context, key string, rate limiter.Rate) (limiter.Context, error) {
	l, err := Limit(rate)
	if err != nil {
		return limiter.Context{}, err
	}
	d, err := s.c.Peek(ctx, l, storekey.Make(s.prefix, key))
	if err != nil {
		return limiter.Context{}, err
	}
	return contextOf(rate, d), nil
}

// Reset forgets key's count under rate, for every process, and returns the
// fresh state. It fails when the sidecar cannot be reached, whatever the
// client's failure policy.
func (s *Store) Reset(ctx context.Context, key string, rate limiter.Rate) (limiter.Context, error) {
	l, err := Limit(rate)
	if err != nil {
		return limiter.Context{}, err
	}
	if _, err := s.c.Reset(ctx, l, storekey.Make(s.prefix, key)); err != nil {
		return limiter.Context{}, err
	}
	return limiter.Context{Limit: rate.Limit, Remaining: rate.Limit, Reset: windowEnd(time.Now(), rate.Period)}, nil
}

// contextOf reads a decision under Limit(rate), whose Remaining counts the
// extra token: none left means the count passed rate.Limit.
func contextOf(rate limiter.Rate, d sluice.Decision) limiter.Context {
	now := time.Now()
	c := limiter.Context{Limit: rate.Limit, Reset: windowEnd(now, rate.Period)}
	if d.ResetAfter > 0 {
		c.Reset = now.Add(d.ResetAfter).Unix()
	}
	switch {
	case d.Degraded && d.Allowed: // FailOpen: nothing is counted
		c.Remaining = rate.Limit
	case !d.Allowed || d.Remaining <= 0:
		c.Reached = true
	default:
		c.Remaining = d.Remaining - 1
	}
	return c
}

// windowEnd returns the end of now's window of length period, aligned to
// multiples of period since the Unix epoch as the sidecar's are, in Unix
// seconds.
func windowEnd(now time.Time, period time.Duration) int64 {
	if period <= 0 {
		return now.Unix()
	}
	p := int64(period)
	return time.Unix(0, (now.UnixNano()/p+1)*p).Unix()
}
