package httpratecounter

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/go-chi/httprate"
	"github.com/sluicehq/sluice/clients/go/internal/storekey"
	"github.com/sluicehq/sluice/clients/go/sluice"
)

// DefaultPrefix precedes the library's key in the key of every bucket the
// counter uses (WithPrefix changes it).
const DefaultPrefix = "httprate:"

// ErrLimited is the error of an IncrementBy that would pass the limit: the
// sidecar refused the request, and httprate's error handler answers it.
// Only requests with a per-request increment or limit (httprate's
// WithIncrement, WithRequestLimit) can meet it.
var ErrLimited = errors.New("the request is over its rate limit")

var errNoLimit = errors.New("the counter has no limit: pass it to httprate.WithLimitCounter, whose rate limiter sets it")

// Counter is an httprate.LimitCounter whose counts are the sidecar's:
// every process of the host that limits a key shares its bucket, and each
// request is decided in one call to the sidecar (see the package
// documentation). One Counter serves one httprate rate limiter. It is safe
// for concurrent use.
type Counter struct {
	c      *sluice.Client
	prefix string

	mu      sync.Mutex
	limit   sluice.Limit
	max     int
	pending pending // the last Get's verdict, for the IncrementBy that follows it
}

var _ httprate.LimitCounter = (*Counter)(nil)

// pending is what Get decided for key's request.
type pending struct {
	key     string
	verdict verdict
}

type verdict uint8

const (
	none      verdict = iota // no Get to follow
	admitted                 // the sidecar took the request's token
	refused                  // the sidecar refused the request
	unlimited                // the failure policy allowed it without the sidecar
)

// An Option configures a Counter in New.
type Option func(*Counter)

// WithPrefix sets what precedes the library's key in the sidecar's key
// (default DefaultPrefix): counters of different prefixes count apart.
func WithPrefix(prefix string) Option { return func(k *Counter) { k.prefix = prefix } }

// New returns a counter that asks the sidecar through c, whose failure
// policy applies. c stays the caller's. Give it to one rate limiter with
// httprate.WithLimitCounter, which sets its limit (Config).
func New(c *sluice.Client, opts ...Option) *Counter {
	k := &Counter{c: c, prefix: DefaultPrefix}
	for _, o := range opts {
		o(k)
	}
	return k
}

// Config sets the limit: requestLimit requests over any windowLength, the
// sidecar's sliding_window. httprate's rate limiter calls it once.
func (k *Counter) Config(requestLimit int, windowLength time.Duration) {
	k.mu.Lock()
	k.limit, k.max = sluice.SlidingWindow(int64(requestLimit), windowLength), requestLimit
	k.mu.Unlock()
}

// Get decides a request of key: it takes the request's token if the
// sidecar admits it, and returns counts from which httprate reaches the
// same decision, with the window's remaining requests as the header's:
// (limit-1-remaining, 0) if it was admitted, (limit, 0) if not, (0, 0) if
// the failure policy allowed it. The IncrementBy httprate then calls
// takes nothing more for an increment of 1. A Get is a request: httprate's
// Status and a Get of one's own take one too. The windows are ignored: the
// sidecar's are aligned to the Unix epoch, as httprate's are for a counter
// of its own.
func (k *Counter) Get(key string, currentWindow, previousWindow time.Time) (int, int, error) {
	k.mu.Lock()
	l, limit := k.limit, k.max
	k.mu.Unlock()
	if l == (sluice.Limit{}) {
		return 0, 0, errNoLimit
	}
	d, err := k.c.Acquire(context.Background(), l, storekey.Make(k.prefix, key), 1)
	if err != nil {
		k.setPending(pending{})
		return 0, 0, err
	}
	switch {
	case d.Degraded && d.Allowed:
		k.setPending(pending{key, unlimited})
		return 0, 0, nil
	case d.Allowed:
		k.setPending(pending{key, admitted})
		return max(limit-1-int(d.Remaining), 0), 0, nil
	default:
		k.setPending(pending{key, refused})
		return limit, 0, nil
	}
}

func (k *Counter) setPending(p pending) {
	k.mu.Lock()
	k.pending = p
	k.mu.Unlock()
}

// Increment is IncrementBy(key, currentWindow, 1).
func (k *Counter) Increment(key string, currentWindow time.Time) error {
	return k.IncrementBy(key, currentWindow, 1)
}

// IncrementBy counts amount requests of key. Following the Get of the same
// key, whose request's token is taken already, it takes amount-1 more (an
// increment of 1, the usual, asks nothing), all or none: if they do not
// fit it gives the Get's token back and returns ErrLimited; and if that Get
// was refused it returns ErrLimited (httprate admits it under a
// per-request limit above the counter's). Otherwise it takes amount, and
// returns ErrLimited if they do not fit.
func (k *Counter) IncrementBy(key string, currentWindow time.Time, amount int) error {
	k.mu.Lock()
	p, l := k.pending, k.limit
	k.pending = pending{}
	k.mu.Unlock()
	if l == (sluice.Limit{}) {
		return errNoLimit
	}
	v := none
	if p.key == key {
		v = p.verdict
	}
	cost := int64(amount)
	switch v {
	case unlimited:
		return nil
	case refused:
		return ErrLimited
	case admitted:
		cost--
	}
	ctx, sk := context.Background(), storekey.Make(k.prefix, key)
	if cost < 0 { // an increment of 0: the Get's token goes back
		_, err := k.c.Refund(ctx, l, sk, -cost)
		return err
	}
	if cost == 0 {
		return nil
	}
	d, err := k.c.Acquire(ctx, l, sk, cost)
	if err == nil && !d.Allowed {
		err = ErrLimited
	}
	if err != nil && v == admitted {
		k.c.Refund(ctx, l, sk, 1) // the request is refused: its token goes back
	}
	return err
}
