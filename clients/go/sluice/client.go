package sluice

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/proto"
)

// Defaults of the options. The call timeout is sized for a sidecar on
// the same host: a round trip takes tens of microseconds, and under a
// host loaded to saturation the client's slowest answers stay within a few
// milliseconds (README, "Failure policy"), so an answer that has not come
// after 50 ms is not coming soon.
const (
	DefaultDialTimeout = 100 * time.Millisecond
	DefaultTimeout     = 50 * time.Millisecond // per call; a context deadline may shorten it
	DefaultMinBackoff  = 10 * time.Millisecond
	DefaultMaxBackoff  = time.Second
	DefaultPolicy      = FailOpen

	// DefaultStartTimeout bounds Dial's first call to the sidecar (its
	// start check, see Dial): generous, since an application that fails
	// to start because its host was busy for a moment is worse than one
	// that starts a second late.
	DefaultStartTimeout = time.Second
)

// degradedLogInterval is the least time between two log lines about
// decisions the failure policy made.
const degradedLogInterval = 10 * time.Second

// FailurePolicy says what Acquire, Peek, Multi and Lease return when the
// sidecar cannot be reached (ErrUnavailable) after it has answered this
// client once: an outage of a sidecar that was there. It never applies to
// a sidecar that has never answered (a wrong socket path, a sidecar not
// started yet: see Dial and WithLazyStart), nor to one that refuses this
// process (ErrDenied), nor to a request the sidecar rejects (a
// *StatusError): those are errors, whatever the policy.
type FailurePolicy uint8

const (
	// FailOpen allows: a Decision with Allowed and Degraded set, and a nil
	// error. The default (DefaultPolicy): an outage of the limiter does
	// not become an outage of the service, and the client counts and logs
	// every such decision (Client.Degraded).
	FailOpen FailurePolicy = iota
	// FailClosed denies: a Decision with Degraded set, Allowed false and
	// RetryAfter the time until the client next asks the sidecar, and a
	// nil error. Use it where exceeding a limit is worse than refusing
	// service (login attempts, payments).
	FailClosed
	// FailError returns the error, wrapping ErrUnavailable.
	FailError
)

// String returns "open", "closed" or "error".
func (p FailurePolicy) String() string {
	switch p {
	case FailError:
		return "error"
	case FailOpen:
		return "open"
	case FailClosed:
		return "closed"
	}
	return "policy " + strconv.Itoa(int(p))
}

// An Option configures a Client in Dial.
type Option func(*options)

type options struct {
	dialTimeout time.Duration
	timeout     time.Duration
	policy      FailurePolicy
	minBackoff  time.Duration
	maxBackoff  time.Duration
	breaker     breaker // its settings only
	logger      *slog.Logger
	lazy        bool

	// dial opens a connection; tests replace it to watch the bytes.
	dial func(ctx context.Context, path string) (net.Conn, error)
}

// WithDialTimeout bounds each attempt to connect to the sidecar
// (default DefaultDialTimeout).
func WithDialTimeout(d time.Duration) Option { return func(o *options) { o.dialTimeout = d } }

// WithTimeout sets how long a call waits for its answer (default
// DefaultTimeout; 0 or less: no limit but the context's). A call that
// times out this way fails with ErrUnavailable (so the failure policy
// applies); a call whose own context expires first or is cancelled
// returns the context's error.
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithFailurePolicy sets what Acquire, Peek and Multi do when the sidecar
// is unreachable (default DefaultPolicy, FailOpen).
func WithFailurePolicy(p FailurePolicy) Option { return func(o *options) { o.policy = p } }

// WithBackoff sets the reconnect backoff: after a failed attempt to
// connect, calls fail at once (with ErrUnavailable or the policy's
// decision) for min, then 2*min, 4*min, ... up to max, before the next
// attempt. Defaults DefaultMinBackoff and DefaultMaxBackoff.
func WithBackoff(min, max time.Duration) Option {
	return func(o *options) { o.minBackoff, o.maxBackoff = min, max }
}

// WithBreaker sets the circuit breaker: after threshold consecutive calls
// got no answer in time (within the client's timeout or before their
// context's deadline), calls fail at once for minOpen, then, after each probe that
// finds it unavailable still, for twice as long up to maxOpen (each period
// shortened at random by up to half); then one call probes the sidecar.
// threshold 0 or less turns the breaker off. Defaults
// DefaultBreakerThreshold, DefaultBreakerMinOpen and DefaultBreakerMaxOpen.
func WithBreaker(threshold int, minOpen, maxOpen time.Duration) Option {
	return func(o *options) {
		o.breaker.threshold, o.breaker.minOpen, o.breaker.maxOpen = int32(min(threshold, 1<<30)), minOpen, maxOpen
	}
}

// WithLazyStart makes Dial return the Client without asking the sidecar,
// for deployments where the application may start before its sidecar.
// The client connects on its first call, as it reconnects after an
// outage; until the sidecar has answered once, every call fails with an
// error wrapping ErrUnavailable, whatever the failure policy: a sidecar
// that has never answered is as likely a wrong path as one still
// starting, and failing open would turn a typo into an unlimited service.
// Once it has answered, the failure policy covers its outages.
func WithLazyStart() Option { return func(o *options) { o.lazy = true } }

// WithLogger sets where the client logs the breaker's opening and closing
// and, at most every 10 seconds, the count of decisions its failure policy
// made (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// Client talks to one sidecar over one Unix socket connection that it
// shares among every goroutine that uses it, pipelining their requests.
// It reconnects by itself after the connection breaks. A Client is safe
// for concurrent use; create one per process and keep it.
type Client struct {
	path  string // what the client dials: where, unless it is too long for a socket address
	where string // the socket's absolute path, for people
	opt   options
	brk   breaker

	answered atomic.Bool // the sidecar has answered this client at least once

	cur atomic.Pointer[conn] // the connection in use; nil when there is none

	// callers is how many calls are between send's start and their end: a
	// caller that takes a role while others run lets them queue first.
	callers atomic.Int32

	sidecar atomic.Pointer[sidecarVersion] // the protocol version of cur's sidecar (outage.go)

	closedNames atomic.Pointer[failsClosed] // the limits that fail closed, by name (outage.go)
	closedMu    sync.Mutex                  // serializes replacing closedNames

	degradedN   atomic.Uint64 // decisions the failure policy made
	degradedLog atomic.Int64  // when the last line about them was logged, Unix ns
	degradedAt  atomic.Uint64 // degradedN when it was

	mu       sync.Mutex // guards the fields below and serializes dialing
	closed   bool
	failures int       // consecutive failed attempts to connect
	retryAt  time.Time // no attempt to connect before this
	lastErr  error     // why the last attempt failed
}

// Dial returns a Client of the sidecar listening on the Unix socket at
// path, after checking that it answers: it fails if nothing listens there
// (the error names the socket's absolute path), if the sidecar refuses
// this process (ErrDenied, --allow-uid), or if no answer comes within
// DefaultStartTimeout. A relative path is resolved against the working
// directory once, here: an application started from another directory
// than the sidecar fails at once rather than limiting nothing. With
// WithLazyStart, Dial asks nothing and the first answer comes later.
//
// Once the sidecar has answered, the Client keeps going through its
// outages (see FailurePolicy): it reconnects by itself, and meanwhile
// answers with the failure policy's decisions.
func Dial(path string, opts ...Option) (*Client, error) {
	return DialContext(context.Background(), path, opts...)
}

// DialContext is Dial with a context that bounds the start check instead
// of DefaultStartTimeout, if it has a deadline, and can cancel it.
func DialContext(ctx context.Context, path string, opts ...Option) (*Client, error) {
	c := &Client{path: path, opt: options{
		dialTimeout: DefaultDialTimeout, timeout: DefaultTimeout, policy: DefaultPolicy,
		minBackoff: DefaultMinBackoff, maxBackoff: DefaultMaxBackoff,
		breaker: breaker{threshold: DefaultBreakerThreshold, minOpen: DefaultBreakerMinOpen, maxOpen: DefaultBreakerMaxOpen},
	}}
	for _, o := range opts {
		o(&c.opt)
	}
	if c.opt.minBackoff <= 0 {
		c.opt.minBackoff = time.Millisecond
	}
	c.opt.maxBackoff = max(c.opt.maxBackoff, c.opt.minBackoff)
	if c.opt.logger == nil {
		c.opt.logger = slog.Default()
	}
	b := &c.opt.breaker
	c.where, c.path = socketPath(path)
	c.brk = breaker{threshold: b.threshold, minOpen: max(b.minOpen, time.Millisecond), log: c.opt.logger, path: c.where}
	c.brk.maxOpen = max(b.maxOpen, c.brk.minOpen)
	if c.brk.threshold <= 0 {
		c.brk.threshold = 1 << 30 // never reached: consecutive failures are counted in an int32
	}
	if c.opt.dial == nil {
		c.opt.dial = func(ctx context.Context, path string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}
	}
	if c.opt.lazy {
		return c, nil
	}
	if err := c.check(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// socketPath returns the absolute path of the socket at path, and what to
// dial: the absolute path, unless it is too long for a socket address
// (108 bytes) where path is not, or path names an abstract socket ("@").
func socketPath(path string) (where, dial string) {
	if strings.HasPrefix(path, "@") {
		return path, path
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return path, path
	}
	if len(abs) >= maxSocketPath && len(path) < maxSocketPath {
		return abs, path
	}
	return abs, abs
}

// maxSocketPath is the size of sun_path, the longest socket address but
// one (its terminating NUL).
const maxSocketPath = 108

// check is Dial's start check: a PING, past the breaker, that waits for
// its answer until ctx's deadline or, if it has none, DefaultStartTimeout.
func (c *Client) check(ctx context.Context) error {
	timeout := DefaultStartTimeout
	if _, ok := ctx.Deadline(); ok {
		timeout = 0
	}
	// The first connection may take the check's whole time, not only a
	// reconnection's dial timeout: a sidecar slow to accept on a busy host
	// is there all the same.
	budget := DefaultStartTimeout
	if dl, ok := ctx.Deadline(); ok {
		budget = time.Until(dl)
	}
	if _, err := c.connWithin(max(budget, c.opt.dialTimeout)); err != nil {
		return err
	}
	cl := simpleCall(proto.OpPing)
	if err := c.send(ctx, cl, timeout); err != nil {
		if !errors.Is(err, ErrUnavailable) && errors.Is(err, context.DeadlineExceeded) {
			err = unavailable("no answer from "+c.where+" before the deadline", err)
		}
		return err
	}
	defer putCall(cl)
	return statusError(proto.OpPing, cl.res.Status, cl.res.Message)
}

// Healthy reports whether the client asks the sidecar: false while its
// circuit breaker is open, that is, while calls fail at once because the
// last ones found the sidecar unavailable.
func (c *Client) Healthy() bool { return c.brk.healthy() }

// Degraded returns how many decisions the failure policy (FailOpen or
// FailClosed) has made since the client was created: Acquire, Peek and
// Multi calls, and pipelined requests, answered without the sidecar, with
// Degraded set. A service exports it, so that a limiter silently allowing
// (or refusing) everything shows.
func (c *Client) Degraded() uint64 { return c.degradedN.Load() }

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

// errBreakerOpen is the error of a call the open breaker did not let
// through.
var errBreakerOpen = unavailable("it did not answer the last calls, so the client is not asking it for now", nil)

// outcome classifies a call's error for the breaker. Only the slow
// failures count against the sidecar: no answer within the timeout or the
// call's deadline. A sidecar that is not there fails fast by itself (the
// kernel refuses the connection at once, and the reconnect backoff spares
// the attempts), and a broken connection is redialled.
func outcome(err error) int {
	switch {
	case err == nil:
		return outcomeAnswered
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return outcomeUnavailable
	case errors.Is(err, ErrUnavailable), errors.Is(err, ErrClosed), errors.Is(err, context.Canceled):
		return outcomeNeither
	}
	return outcomeAnswered // the sidecar answered with an error status
}

// roundTripAll queues the calls (nil entries skipped) on one connection,
// written together, if the breaker lets them through. On error none was
// queued and none is the caller's any more. On success the caller waits
// for each, if direct calling cn.roundTripDirect with the last call
// first, and then reports the outcome to c.brk.done with probe.
func (c *Client) roundTripAll(ctx context.Context, calls []*call) (cn *conn, direct, probe bool, err error) {
	put := func() {
		for _, cl := range calls {
			if cl != nil {
				putCall(cl)
			}
		}
	}
	if err := ctx.Err(); err != nil {
		put()
		return nil, false, false, err
	}
	ok, probe := c.brk.allow()
	if !ok {
		put()
		return nil, false, false, errBreakerOpen
	}
	for attempt := 0; ; attempt++ {
		cn, err := c.conn()
		if err != nil {
			put()
			c.brk.done(probe, outcome(err))
			return nil, false, false, err
		}
		r, err := cn.enqueue(true, calls...)
		if r == roleWrite {
			cn.writeAsCaller(false)
		}
		if err == nil {
			return cn, r == roleDirect, probe, nil
		}
		// Nothing was queued: one more try on a new connection is safe.
		if attempt > 0 || errors.Is(err, ErrClosed) {
			put()
			c.brk.done(probe, outcome(err))
			return nil, false, false, err
		}
	}
}

// roundTrip sends the request frame cl holds, if the breaker lets it
// through, and waits for its answer. On success cl holds the decoded
// result and the caller must put it back with putCall; on error the call
// is no longer the caller's.
func (c *Client) roundTrip(ctx context.Context, cl *call) error {
	if err := ctx.Err(); err != nil {
		putCall(cl)
		return err
	}
	ok, probe := c.brk.allow()
	if !ok {
		putCall(cl)
		return errBreakerOpen
	}
	err := c.send(ctx, cl, c.opt.timeout)
	c.brk.done(probe, outcome(err))
	return err
}

// send is roundTrip past the breaker: it waits for the answer at most
// timeout (0 or less: no limit but the context's).
func (c *Client) send(ctx context.Context, cl *call, timeout time.Duration) error {
	alone := c.callers.Add(1) == 1
	defer c.callers.Add(-1)
	for attempt := 0; ; attempt++ {
		cn, err := c.conn()
		if err != nil {
			putCall(cl)
			return err
		}
		r, err := cn.enqueue(true, cl)
		switch r {
		case roleDirect:
			return cn.roundTripDirect(ctx, cl, timeout, !alone)
		case roleWrite:
			cn.writeAsCaller(!alone)
			return cl.wait(ctx, timeout)
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
	return cl.wait(ctx, timeout)
}
