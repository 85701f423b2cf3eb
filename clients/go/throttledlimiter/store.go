package throttledlimiter

import (
	"context"
	"errors"
	"time"

	"github.com/sluicehq/sluice/clients/go/internal/storekey"
	"github.com/sluicehq/sluice/clients/go/sluice"
	"github.com/throttled/throttled/v2"
)

// DefaultStorePrefix precedes the library's key in the key of every
// register a Store uses, unless NewStore is given another.
const DefaultStorePrefix = "throttled-gcra:"

// MinStoreTTL is the least time a Store keeps a register it writes:
// throttled asks for a time to live of 0 when it writes a theoretical
// arrival time that is now (a quantity of 0), which would expire at once,
// so a shorter ttl is raised to it, as throttled's Redis stores raise
// theirs to a second. A register kept longer than asked changes no
// decision: a theoretical arrival time in the past counts as now.
const MinStoreTTL = time.Second

// Store is a throttled.GCRAStoreCtx whose registers are the sidecar's:
// throttled's GCRARateLimiterCtx over a Store decides in the process, as
// over its memory or Redis stores, and every process of the host that uses
// the same key shares its register. Each store method is one call to the
// sidecar; GetWithTime's time is the sidecar's clock. It is safe for
// concurrent use.
//
// RateLimiter decides in one call instead of throttled's two (a read, then
// a compare-and-swap, retried on conflict): prefer it, unless the rate
// limiter must be throttled's own.
type Store struct {
	c      *sluice.Client
	prefix string
}

var _ throttled.GCRAStoreCtx = (*Store)(nil)

// NewStore returns a store that keeps its registers in the sidecar c
// talks to, under prefix and the library's key (DefaultStorePrefix if
// prefix is ""; a key too long for the sidecar is replaced by its
// SHA-256). c stays the caller's.
func NewStore(c *sluice.Client, prefix string) *Store {
	if prefix == "" {
		prefix = DefaultStorePrefix
	}
	return &Store{c: c, prefix: prefix}
}

// GetWithTime returns key's value, or -1 if it has none, and the sidecar's
// clock.
func (s *Store) GetWithTime(ctx context.Context, key string) (int64, time.Time, error) {
	r, err := s.c.GetRegister(ctx, storekey.Make(s.prefix, key))
	if err != nil {
		return 0, time.Time{}, err
	}
	if !r.Exists {
		return -1, r.Now, nil
	}
	return r.Value, r.Now, nil
}

// SetIfNotExistsWithTTL sets key to value, to live ttl (at least
// MinStoreTTL), if key has no value, and reports whether it did.
func (s *Store) SetIfNotExistsWithTTL(ctx context.Context, key string, value int64, ttl time.Duration) (bool, error) {
	ttl, err := storeTTL(ttl)
	if err != nil {
		return false, err
	}
	r, err := s.c.SetRegister(ctx, storekey.Make(s.prefix, key), value, ttl)
	return r.OK, err
}

// CompareAndSwapWithTTL sets key to new, to live ttl (at least
// MinStoreTTL) from now, if it holds old, and reports whether it did; a
// key with no value is not swapped.
func (s *Store) CompareAndSwapWithTTL(ctx context.Context, key string, old, new int64, ttl time.Duration) (bool, error) {
	ttl, err := storeTTL(ttl)
	if err != nil {
		return false, err
	}
	r, err := s.c.CompareAndSwapRegister(ctx, storekey.Make(s.prefix, key), old, new, ttl)
	return r.OK, err
}

var errNegativeTTL = errors.New("a negative time to live for a throttled store's key")

// storeTTL is the time a register asked to live ttl is kept.
func storeTTL(ttl time.Duration) (time.Duration, error) {
	if ttl < 0 {
		return 0, errNegativeTTL
	}
	return max(ttl, MinStoreTTL), nil
}
