package golimiterstore

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sethvargo/go-limiter"
	"github.com/sluicehq/sluice/clients/go/internal/storekey"
	"github.com/sluicehq/sluice/clients/go/sluice"
)

// DefaultPrefix precedes the library's key in the key of every bucket the
// store uses (Config.Prefix changes it).
const DefaultPrefix = "golimiter:"

// Config says what a Store limits. The zero Config, like memorystore's,
// allows 1 request per second per key.
type Config struct {
	// Tokens per Interval is the limit of every key that Set has not given
	// another: a fixed_window of Tokens per Interval (default 1 per
	// second, as memorystore's).
	Tokens   uint64
	Interval time.Duration

	// Limit, if set, is the limit of every such key instead of Tokens and
	// Interval: any Sluice limit (a token_bucket, a gcra, a
	// sliding_window, a limit the sidecar's configuration names, ...).
	Limit sluice.Limit

	// Prefix precedes the library's key in the sidecar's key (default
	// DefaultPrefix): stores of different prefixes count apart.
	Prefix string
}

// Store is a limiter.Store whose buckets are the sidecar's: every process
// of the host that takes from a key under the same limit shares its
// bucket. It is safe for concurrent use.
type Store struct {
	c      *sluice.Client
	prefix string
	limit  limit

	overrides sync.Map // key -> limit, set by Set
	stopped   atomic.Bool
}

var _ limiter.Store = (*Store)(nil)

// limit is a key's limit and the tokens reported for it when the sidecar
// does not answer (0 when the store cannot know them: a Config.Limit).
type limit struct {
	l      sluice.Limit
	tokens uint64
}

var errTooManyTokens = errors.New("a limit of more than 2^63-1 tokens is not possible")

// New returns a store that asks the sidecar through c, whose failure
// policy applies (see the package documentation). c stays the caller's:
// Close does not close it. cfg may be nil.
func New(c *sluice.Client, cfg *Config) (*Store, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	s := &Store{c: c, prefix: cfg.Prefix}
	if s.prefix == "" {
		s.prefix = DefaultPrefix
	}
	if cfg.Limit != (sluice.Limit{}) {
		s.limit = limit{l: cfg.Limit}
		return s, nil
	}
	tokens, interval := cfg.Tokens, cfg.Interval
	if tokens == 0 {
		tokens = 1
	}
	if interval <= 0 {
		interval = time.Second
	}
	if tokens > math.MaxInt64 {
		return nil, errTooManyTokens
	}
	s.limit = limit{l: sluice.FixedWindow(int64(tokens), interval), tokens: tokens}
	return s, nil
}

// limitOf returns key's limit: its override, or the store's.
func (s *Store) limitOf(key string) limit {
	if o, ok := s.overrides.Load(key); ok {
		return o.(limit)
	}
	return s.limit
}

// Take takes a token from key's bucket if one is left, in one decision of
// the sidecar. It returns the limit's tokens, those left, when the bucket
// is next worth asking (Unix ns: when a refused request would pass, else
// when the bucket is full again), and whether the request may proceed.
func (s *Store) Take(ctx context.Context, key string) (tokens, remaining, reset uint64, ok bool, err error) {
	if s.stopped.Load() {
		return 0, 0, 0, false, limiter.ErrStopped
	}
	lim := s.limitOf(key)
	d, err := s.c.Acquire(ctx, lim.l, storekey.Make(s.prefix, key), 1)
	if err != nil {
		return 0, 0, 0, false, err
	}
	now := time.Now()
	if d.Degraded {
		if d.Allowed { // FailOpen: nothing is counted
			return lim.tokens, lim.tokens, uint64(now.UnixNano()), true, nil
		}
		return lim.tokens, 0, uint64(now.Add(d.RetryAfter).UnixNano()), false, nil
	}
	wait := d.ResetAfter
	if !d.Allowed && d.RetryAfter >= 0 {
		wait = d.RetryAfter
	}
	return uint64(d.Limit), uint64(d.Remaining), uint64(now.Add(wait).UnixNano()), d.Allowed, nil
}

// Get returns key's limit and the tokens left, taking nothing. A key never
// taken from has all its tokens (memorystore answers 0 and 0).
func (s *Store) Get(ctx context.Context, key string) (tokens, remaining uint64, err error) {
	if s.stopped.Load() {
		return 0, 0, limiter.ErrStopped
	}
	lim := s.limitOf(key)
	d, err := s.c.Peek(ctx, lim.l, storekey.Make(s.prefix, key))
	if err != nil {
		return 0, 0, err
	}
	if d.Degraded {
		if d.Allowed {
			return lim.tokens, lim.tokens, nil
		}
		return lim.tokens, 0, nil
	}
	return uint64(d.Limit), uint64(d.Remaining), nil
}

// Set gives key a limit of its own in this process, a fixed_window of
// tokens per interval, and fills its bucket (a reset, for every process).
// The limit is this process's: every process that limits key must Set it
// alike, or they count in different buckets. A limit the sidecar refuses
// (0 tokens, an interval under a millisecond) is not set; if the sidecar
// cannot be reached, the limit is set and the error says the bucket was
// not filled.
func (s *Store) Set(ctx context.Context, key string, tokens uint64, interval time.Duration) error {
	if s.stopped.Load() {
		return limiter.ErrStopped
	}
	if tokens > math.MaxInt64 {
		return errTooManyTokens
	}
	lim := limit{l: sluice.FixedWindow(int64(tokens), interval), tokens: tokens}
	_, err := s.c.Reset(ctx, lim.l, storekey.Make(s.prefix, key))
	if err != nil && !errors.Is(err, sluice.ErrUnavailable) {
		return err
	}
	s.overrides.Store(key, lim)
	return err
}

// Burst gives tokens back to key's bucket, for every process, up to its
// limit: the sidecar's buckets never hold more than their limit, so Burst
// returns what was taken and no more (memorystore's can raise a bucket past
// its limit until its next interval). Set raises a key's limit.
func (s *Store) Burst(ctx context.Context, key string, tokens uint64) error {
	if s.stopped.Load() {
		return limiter.ErrStopped
	}
	_, err := s.c.Refund(ctx, s.limitOf(key).l, storekey.Make(s.prefix, key), int64(min(tokens, math.MaxInt64)))
	return err
}

// Close stops the store: every later call returns limiter.ErrStopped. The
// buckets stay in the sidecar, and the client stays open.
func (s *Store) Close(ctx context.Context) error {
	s.stopped.Store(true)
	return nil
}
