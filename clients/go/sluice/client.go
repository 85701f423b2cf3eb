package sluice

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of the options.
const (
	DefaultDialTimeout = time.Second
	DefaultTimeout     = time.Second // per call, when the context has no deadline
	DefaultMinBackoff  = 10 * time.Millisecond
	DefaultMaxBackoff  = time.Second
)

// FailurePolicy says what Acquire, Peek and Multi return when the sidecar
// cannot be reached (ErrUnavailable).
type FailurePolicy uint8

const (
	// FailError returns the error, wrapping ErrUnavailable. The default.
	FailError FailurePolicy = iota
	// FailOpen allows: a Decision with Allowed and Degraded set, and a nil
	// error. Use it where an outage of the limiter must not become an
	// outage of the service.
	FailOpen
	// FailClosed denies: a Decision with Degraded set, Allowed false and
	// RetryAfter the time until the client next tries to reconnect, and a
	// nil error. Use it where exceeding a limit is worse than refusing
	// service (login attempts, payments).
	FailClosed
)

// String returns "error", "open" or "closed".
func (p FailurePolicy) String() string {
	switch p {
	case FailError:
		return "error"
	case FailOpen:
		return "open"
	case FailClosed:
		return "closed"
	}
	return fmt.Sprintf("FailurePolicy(%d)", uint8(p))
}

// An Option configures a Client in Dial.
type Option func(*options)

type options struct {
	dialTimeout time.Duration
	timeout     time.Duration
	policy      FailurePolicy
	minBackoff  time.Duration
	maxBackoff  time.Duration

	// dial opens a connection; tests replace it to watch the bytes.
	dial func(ctx context.Context, path string) (net.Conn, error)
}

// WithDialTimeout bounds each attempt to connect to the sidecar
// (default DefaultDialTimeout).
func WithDialTimeout(d time.Duration) Option { return func(o *options) { o.dialTimeout = d } }

// WithTimeout sets how long a call waits for its answer when its context
// has no deadline (default DefaultTimeout; 0 or less: no limit). A call
// that times out this way fails with ErrUnavailable (so the failure policy
// applies); a call whose own context expires or is cancelled returns the
// context's error.
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithFailurePolicy sets what Acquire, Peek and Multi do when the sidecar
// is unreachable (default FailError).
func WithFailurePolicy(p FailurePolicy) Option { return func(o *options) { o.policy = p } }

// WithBackoff sets the reconnect backoff: after a failed attempt to
// connect, calls fail at once (with ErrUnavailable or the policy's
// decision) for min, then 2*min, 4*min, ... up to max, before the next
// attempt. Defaults DefaultMinBackoff and DefaultMaxBackoff.
func WithBackoff(min, max time.Duration) Option {
	return func(o *options) { o.minBackoff, o.maxBackoff = min, max }
}

// Client talks to one sidecar over one Unix socket connection that it
// shares among every goroutine that uses it, pipelining their requests.
// It reconnects by itself after the connection breaks. A Client is safe
// for concurrent use; create one per process and keep it.
type Client struct {
	path string
	opt  options

	cur atomic.Pointer[conn] // the connection in use; nil when there is none

	mu       sync.Mutex // guards the fields below and serializes dialing
	closed   bool
	failures int       // consecutive failed attempts to connect
	retryAt  time.Time // no attempt to connect before this
	lastErr  error     // why the last attempt failed
}

// Dial returns a Client of the sidecar listening on the Unix socket at path
// and connects to it. With FailError (the default) it fails, with an error
// wrapping ErrUnavailable, if it cannot connect; with FailOpen or FailClosed
// it returns a Client anyway, which keeps trying to connect on later calls
// and meanwhile answers with the policy's decisions.
func Dial(path string, opts ...Option) (*Client, error) {
	c := &Client{path: path, opt: options{
		dialTimeout: DefaultDialTimeout, timeout: DefaultTimeout,
		minBackoff: DefaultMinBackoff, maxBackoff: DefaultMaxBackoff,
	}}
	for _, o := range opts {
		o(&c.opt)
	}
	if c.opt.minBackoff <= 0 {
		c.opt.minBackoff = time.Millisecond
	}
	c.opt.maxBackoff = max(c.opt.maxBackoff, c.opt.minBackoff)
	if c.opt.dial == nil {
		c.opt.dial = func(ctx context.Context, path string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}
	}
	if _, err := c.conn(); err != nil && c.opt.policy == FailError {
		return nil, err
	}
	return c, nil
}

// Close closes the connection; calls in flight fail with ErrClosed, and so
// does every later call. Close waits for the client's goroutines to exit.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	cn := c.cur.Swap(nil)
	c.mu.Unlock()
	if cn != nil {
		cn.fail(ErrClosed)
		cn.wait()
	}
	return nil
}

// conn returns the connection in use, connecting if there is none and the
// backoff allows.
func (c *Client) conn() (*conn, error) {
	if cn := c.cur.Load(); cn != nil && !cn.failed.Load() {
		return cn, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	if cn := c.cur.Load(); cn != nil {
		if !cn.failed.Load() {
			return cn, nil // another goroutine connected meanwhile
		}
		c.dropLocked(cn)
	}
	now := time.Now()
	if now.Before(c.retryAt) {
		return nil, fmt.Errorf("%w (next attempt in %v): %w", ErrUnavailable, c.retryAt.Sub(now).Round(time.Millisecond), c.lastErr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.opt.dialTimeout)
	nc, err := c.opt.dial(ctx, c.path)
	cancel()
	if err != nil {
		c.backoffLocked(now, err)
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	cn := newConn(c, nc)
	c.cur.Store(cn)
	return cn, nil
}

// dropped is called by a connection that failed, so that the next call
// reconnects.
func (c *Client) dropped(cn *conn) {
	c.mu.Lock()
	c.dropLocked(cn)
	c.mu.Unlock()
}

// dropLocked forgets the failed connection cn if it is the one in use. A
// connection that broke before its first answer counts as a failed attempt
// to connect (a sidecar that accepts and at once hangs up, answering Busy
// say, must not be redialled in a loop); one that had answered is followed
// by an immediate attempt.
func (c *Client) dropLocked(cn *conn) {
	if !c.cur.CompareAndSwap(cn, nil) {
		return
	}
	if cn.answered.Load() {
		c.failures, c.retryAt = 0, time.Time{}
		return
	}
	c.backoffLocked(time.Now(), cn.err)
}

// backoffLocked records a failed attempt to connect at now.
func (c *Client) backoffLocked(now time.Time, err error) {
	d := c.opt.minBackoff
	for i := 0; i < c.failures && d < c.opt.maxBackoff; i++ {
		if d > c.opt.maxBackoff/2 {
			d = c.opt.maxBackoff
			break
		}
		d *= 2
	}
	c.failures++
	c.retryAt, c.lastErr = now.Add(d), err
}

// retryIn is how long until the client next tries to connect: the
// RetryAfter of a FailClosed decision.
func (c *Client) retryIn() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d := time.Until(c.retryAt); d > 0 {
		return d
	}
	return c.opt.minBackoff
}

// roundTripAll queues the calls (nil entries skipped) on one connection,
// written together. On error none was queued and none is the caller's any
// more. On success the caller waits for each; if direct, it first calls
// cn.roundTripDirect with the last call.
func (c *Client) roundTripAll(ctx context.Context, calls []*call) (cn *conn, direct bool, err error) {
	put := func() {
		for _, cl := range calls {
			if cl != nil {
				putCall(cl)
			}
		}
	}
	if err := ctx.Err(); err != nil {
		put()
		return nil, false, err
	}
	for attempt := 0; ; attempt++ {
		cn, err := c.conn()
		if err != nil {
			put()
			return nil, false, err
		}
		direct, err := cn.enqueue(true, calls...)
		if err == nil {
			return cn, direct, nil
		}
		// Nothing was queued: one more try on a new connection is safe.
		if attempt > 0 || errors.Is(err, ErrClosed) {
			put()
			return nil, false, err
		}
	}
}

// roundTrip sends the request frame cl holds and waits for its answer. On
// success cl holds the decoded result and the caller must put it back with
// putCall; on error the call is no longer the caller's.
func (c *Client) roundTrip(ctx context.Context, cl *call) error {
	if err := ctx.Err(); err != nil {
		putCall(cl)
		return err
	}
	for attempt := 0; ; attempt++ {
		cn, err := c.conn()
		if err != nil {
			putCall(cl)
			return err
		}
		direct, err := cn.enqueue(true, cl)
		if direct {
			return cn.roundTripDirect(ctx, cl, c.opt.timeout)
		}
		if err == nil {
			break
		}
		// The connection failed before the request was queued: nothing was
		// sent, so one more try on a new connection is safe.
		if attempt > 0 || errors.Is(err, ErrClosed) {
			putCall(cl)
			return err
		}
	}
	return cl.wait(ctx, c.opt.timeout)
}
