// Package direct decides in the sidecar's state file from inside a Go
// process: it maps the file that sluiced owns and runs the sidecar's own
// engine on it, under the same slot locks as the sidecar and every other
// process, with no socket round trip. A bucket touched through the socket,
// the Redis protocol or this package is one bucket, decided with the same
// semantics.
//
// The sidecar stays the file's owner: it creates, recovers, syncs and
// scrubs it. A direct Client never does; it refuses a file no sidecar
// serves, stops deciding while a restarted sidecar recovers the file, and
// attaches again once it serves. With Options.Fallback, every operation it
// cannot decide in the file goes to the socket client instead.
//
// Using the file is a privilege: a process that maps it can write anything
// in it. Who may is decided by the file's mode and group (see the README's
// security model); the sidecar checks each slot's checksum and repairs
// damage conservatively.
//
// A decision waits for its buckets' locks while another process holds
// them: nanoseconds, unless that process is stopped (SIGSTOP, a debugger)
// in the middle of a decision. The wait spins briefly, then sleeps, so it
// costs no processor; it lasts at most until the context's deadline, or
// Options.LockWait without one, and then fails with an error matching
// ErrLocked (and sluice.ErrContended) that names the holder's pid. A lock
// whose holder died is taken over at once.
//
// A Client decides at the sidecar's clock as its process reads it
// (engine.Clock: steady, never behind the file's recorded time). Where the
// kernel keeps its clocks on the processor's time-stamp counter (Linux on
// amd64 with the tsc clocksource), it reads the counter, a third of the
// cost, and converts it at a rate it measures against the monotonic clock,
// staying within 10 µs of it (clock.go); elsewhere it reads the monotonic
// clock.
package direct

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/clients/go/sluice"
	"github.com/sluicehq/sluice/clients/go/sluice/internal/clientwire"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/proto"
)

// The client's reading of request options and writing of decisions, which
// its exported API keeps to itself (package clientwire).
var (
	wireOptions  = clientwire.Options.(func([]sluice.RequestOption) (proto.Flags, int64))
	wireDecision = clientwire.Decision.(func(*proto.Decision) sluice.Decision)
)

// Options configure a Client.
type Options struct {
	// Fallback, if set, answers every operation the Client cannot decide
	// in the file: when Open cannot attach to it (another host, no
	// permission, another format version, no sidecar serving it), and
	// while the sidecar that owns it is away. Without one, those
	// operations fail with an error wrapping sluice.ErrUnavailable.
	Fallback *sluice.Client
	// LockWait bounds how long an operation whose context has no deadline
	// waits for a bucket's lock that another process keeps; 0 means one
	// second (engine.DefaultLockWait).
	LockWait time.Duration
}

// ErrLocked is matched by the error of an operation that gave up waiting
// for a bucket's lock: another process keeps it, alive but not going on
// (stopped, or stuck in a debugger). errors.As finds a *LockedError, with
// the holder's pid. The error also matches sluice.ErrContended, as the
// sidecar's answer to the same wait does.
var ErrLocked = engine.ErrLocked

// LockedError is the error of an operation that gave up waiting for a
// bucket's lock: Pid is the process that keeps it, Held how long the
// operation saw it do so. The operation changed nothing.
type LockedError = engine.LockedError

// ownerCheckEvery is how often a Client asks whether the sidecar it
// decides beside still lives (a read of /proc).
const ownerCheckEvery = time.Second

// reattachEvery bounds how often a Client tries to attach again while the
// sidecar is away.
const reattachEvery = 100 * time.Millisecond

// Client decides in one state file. It is safe for concurrent use; create
// one per process and keep it.
type Client struct {
	path     string
	fallback *sluice.Client
	lockWait time.Duration                 // Options.LockWait
	eng      atomic.Pointer[engine.Engine] // nil while detached
	clock    *clock                        // the sidecar's clock, as this process reads it (clock.go)

	limits [limitCacheSize]atomic.Pointer[cachedLimit] // validated limits, by limitSlot

	nextCheck atomic.Int64 // steady clock: when to ask about the owner again
	mu        sync.Mutex   // serialises attaching
	retired   []*engine.Engine
	reason    error // why the Client is detached, for Direct
	nextTry   int64
	closed    bool
}

// Open attaches to the state file at path, which a running sluiced owns.
// If it cannot, it returns the reason, unless opts.Fallback is set: then
// it returns a Client that sends every operation to the fallback until it
// can attach (Direct says why).
func Open(path string, opts Options) (*Client, error) {
	c := &Client{path: path, fallback: opts.Fallback, lockWait: opts.LockWait}
	e, err := engine.Attach(path)
	if err != nil {
		if opts.Fallback == nil {
			return nil, fmt.Errorf("cannot decide in %s: %w", path, err)
		}
		c.reason = err
		c.clock = newClock(engine.Clock(0))
		return c, nil
	}
	o := e.Opened()
	c.clock = newClock(engine.Clock(o.HighTime)) // the sidecar's clock, as this process sees it
	c.eng.Store(e)
	c.nextCheck.Store(c.clock.now() + int64(ownerCheckEvery))
	return c, nil
}

// limitCacheSize is how many validated limits a Client remembers: a
// process uses a handful, and validating one costs more than deciding.
const limitCacheSize = 64

// cachedLimit is a limit as the caller wrote it and as the engine runs it.
// It is never modified once published.
type cachedLimit struct {
	w proto.Limit
	l engine.Limit
}

// limit returns the engine's limit for l, validating it only the first
// time (or when another limit has taken its cache entry since). It takes l
// by pointer: a limit is copied only into the cache.
func (c *Client) limit(l *sluice.Limit) (*engine.Limit, error) {
	if cl := c.limits[limitSlot(l)].Load(); cl != nil && sameLimit(&cl.w, l) {
		return &cl.l, nil
	}
	return c.newLimit(l)
}

// sameLimit is a == b, inline: the numbers first, which tell most limits
// apart, then the names, without the call a struct comparison makes.
func sameLimit(a, b *sluice.Limit) bool {
	return a.P == b.P && a.Algorithm == b.Algorithm && a.Shadow == b.Shadow && a.Name == b.Name && a.TZ == b.TZ
}

// limitSlot is l's entry in the limit cache.
func limitSlot(l *sluice.Limit) uint64 {
	h := uint64(l.Algorithm) ^ uint64(l.P[0])*0x9e3779b97f4a7c15 ^ uint64(l.P[1])*0xc2b2ae3d27d4eb4f ^ uint64(l.P[2])
	return (h ^ h>>29) % limitCacheSize
}

// newLimit validates l and caches it.
func (c *Client) newLimit(l *sluice.Limit) (*engine.Limit, error) {
	v, err := engine.FromProto(*l)
	if err != nil {
		return nil, err
	}
	cl := &cachedLimit{w: *l, l: v}
	c.limits[limitSlot(l)].Store(cl)
	return &cl.l, nil
}

// Direct reports whether the Client decides in the file now, and if not,
// why.
func (c *Client) Direct() (bool, error) {
	if c.eng.Load() != nil {
		return true, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return false, c.reason
}

// Close detaches from the file. The fallback client, if any, stays open:
// it belongs to the caller.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return sluice.ErrClosed
	}
	c.closed = true
	var err error
	if e := c.eng.Swap(nil); e != nil {
		err = e.Close()
	}
	for _, e := range c.retired {
		e.Close()
	}
	c.retired = nil
	return err
}

// engine returns the engine to decide with at now, or nil if the Client is
// detached. Once a second it asks whether the sidecar still lives; while
// it does not, decisions go on in the file (which stays sound: the kernel
// keeps its pages) until a new sidecar takes the file over.
func (c *Client) engine(now int64) *engine.Engine {
	e := c.eng.Load()
	if e != nil && now < c.nextCheck.Load() {
		return e
	}
	return c.slow(now)
}

// slow checks the owner, and attaches again when detached.
func (c *Client) slow(now int64) *engine.Engine {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.eng.Load()
	if c.closed {
		return nil
	}
	if e != nil {
		c.nextCheck.Store(now + int64(ownerCheckEvery))
		if e.OwnerAlive() {
			return e
		}
	}
	if now < c.nextTry {
		return e
	}
	c.nextTry = now + int64(reattachEvery)
	ne, err := engine.Attach(c.path)
	if err != nil {
		c.reason = err
		return e // still the old file: sound, until a new owner takes it
	}
	if e != nil {
		// The old engine may still be in use by other goroutines: it is
		// retired (its Enter fails now that the file has a new owner) and
		// closed with the Client.
		e.Retire()
		c.retired = append(c.retired, e)
	}
	c.eng.Store(ne)
	c.reason = nil
	return ne
}

// detached handles an engine that found its owner gone mid-call: the
// Client attaches again at its next call.
func (c *Client) detached(e *engine.Engine, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.eng.CompareAndSwap(e, nil) {
		e.Retire()
		c.retired = append(c.retired, e)
		c.reason = err
		c.nextTry = 0
	}
}

// errLeaseOnly refuses to acquire from or refund to a concurrency limit:
// its slots are leased through the socket (sluice.Client.Lease), where the
// sidecar sees a holder's connection close and gives its leases back. A
// lease taken in the file would outlive a crashed holder until it expired.
var errLeaseOnly = fmt.Errorf("%w: a concurrency limit's slots are leased through the sidecar's socket, which gives a lease back when its holder's connection closes; the direct path cannot lease them",
	engine.ErrInvalidLimit)

// leaseOnly reports whether l is a concurrency limit, which the direct path
// can peek at and reset but not acquire from or refund to.
func leaseOnly(l *engine.Limit) bool { return l.Bucket().Algorithm == bucket.Concurrency }

// Acquire decides a request of cost against key's bucket under l, as the
// socket client's Acquire does. A concurrency limit is refused
// (sluice.ErrInvalidLimit): lease its slots with the socket client.
func (c *Client) Acquire(ctx context.Context, l sluice.Limit, key string, cost int64, opts ...sluice.RequestOption) (d sluice.Decision, err error) {
	return d, c.decide(ctx, proto.OpAcquire, &l, key, cost, opts, &d)
}

// Peek reports key's bucket under l as it stands, as the socket client's
// Peek does.
func (c *Client) Peek(ctx context.Context, l sluice.Limit, key string, opts ...sluice.RequestOption) (d sluice.Decision, err error) {
	return d, c.decide(ctx, proto.OpPeek, &l, key, 1, opts, &d)
}

// Refund gives amount tokens back to key's bucket under l, as the socket
// client's Refund does. A concurrency limit is refused, as by Acquire.
func (c *Client) Refund(ctx context.Context, l sluice.Limit, key string, amount int64, opts ...sluice.RequestOption) (d sluice.Decision, err error) {
	return d, c.decide(ctx, proto.OpRefund, &l, key, amount, opts, &d)
}

// Reset forgets key's bucket under l and reports whether it existed.
func (c *Client) Reset(ctx context.Context, l sluice.Limit, key string) (bool, error) {
	lim, err := c.limit(&l)
	if err != nil {
		return false, opError(err)
	}
	for {
		e := c.engine(c.clock.now())
		if e == nil {
			if c.fallback != nil {
				return c.fallback.Reset(ctx, l, key)
			}
			return false, c.unavailable()
		}
		req := engine.Request{Op: proto.OpReset, Key: keyBytes(key), Limit: lim, Time: engine.Time{Wait: c.wait(ctx)}}
		var res engine.Result
		err := e.Do(&req, &res)
		if errors.Is(err, engine.ErrNoOwner) {
			c.detached(e, err)
			continue
		}
		return res.Existed, opError(err)
	}
}

// decide decides one operation into *out. The limit and the decision are
// passed by pointer, and an acquire without options goes to the engine's
// Acquire itself (as Do would send it): on a hot key, copying the limit and
// the decision, and building the request, cost as much as the engine's
// work.
func (c *Client) decide(ctx context.Context, op proto.Opcode, l *sluice.Limit, key string, n int64, opts []sluice.RequestOption, out *sluice.Decision) error {
	lim, err := c.limit(l)
	if err != nil {
		return opError(err)
	}
	if op != proto.OpPeek && leaseOnly(lim) {
		return opError(errLeaseOnly)
	}
	var (
		f  proto.Flags
		at int64
	)
	if len(opts) > 0 {
		f, at = wireOptions(opts)
	}
	var res engine.Result
	for {
		now := c.clock.now()
		e := c.engine(now)
		if e == nil {
			d, err := c.fall(ctx, op, *l, key, n, opts)
			*out = d
			return err
		}
		if op == proto.OpAcquire && f == 0 { // no flag: no shadow, no AT
			t := engine.At(now)
			t.Wait = c.wait(ctx)
			err = e.Acquire(&res.Decision, keyBytes(key), lim, n, t, 0)
		} else {
			req := engine.Request{Limit: lim, Time: engine.At(now)}
			req.Time.Wait = c.wait(ctx)
			req.Wire(op, keyBytes(key), n, f, at) // a shadow request's denial is answered as the sidecar answers it
			err = e.Do(&req, &res)
		}
		if err != nil {
			if errors.Is(err, engine.ErrNoOwner) {
				c.detached(e, err)
				continue
			}
			return opError(err)
		}
		setDecision(out, &res.Decision)
		out.ShadowDenied = res.Shadowed
		return nil
	}
}

// setDecision sets the fields of *out that w carries, as the client's
// decision (wireDecision) has them, in place and directly: a Decision
// built and then copied stalls the copy's loads on the stores just made,
// and one passed to a function value escapes to the heap.
func setDecision(out *sluice.Decision, w *proto.Decision) {
	out.Allowed, out.Remaining, out.Limit = w.Allowed, w.Remaining, w.Limit
	out.RetryAfter, out.ResetAfter, out.Delay = time.Duration(w.RetryAfter), time.Duration(w.ResetAfter), time.Duration(w.Delay)
}

// fall sends an operation to the fallback client, or fails it.
func (c *Client) fall(ctx context.Context, op proto.Opcode, l sluice.Limit, key string, n int64, opts []sluice.RequestOption) (sluice.Decision, error) {
	if c.fallback == nil {
		return sluice.Decision{}, c.unavailable()
	}
	switch op {
	case proto.OpPeek:
		return c.fallback.Peek(ctx, l, key, opts...)
	case proto.OpRefund:
		return c.fallback.Refund(ctx, l, key, n, opts...)
	}
	return c.fallback.Acquire(ctx, l, key, n, opts...)
}

func (c *Client) unavailable() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return sluice.ErrClosed
	}
	return fmt.Errorf("%w: cannot decide in %s: %w", sluice.ErrUnavailable, c.path, c.reason)
}

// Multi decides every item, all or nothing, as the socket client's Multi
// does. An item of a concurrency limit is refused, as by Acquire.
func (c *Client) Multi(ctx context.Context, items []sluice.Item, opts ...sluice.RequestOption) (bool, []sluice.Decision, error) {
	if len(items) == 0 || len(items) > proto.MaxMulti {
		return false, nil, opError(fmt.Errorf("%w: %d items, want 1 to %d", engine.ErrTooManyItems, len(items), proto.MaxMulti))
	}
	f, at := wireOptions(opts)
	var (
		limits [proto.MaxMulti]engine.Limit
		its    [proto.MaxMulti]engine.Item
		ds     [proto.MaxMulti]bucket.Decision
	)
	for i := range items {
		it := &items[i]
		l, err := c.limit(&it.Limit)
		if err == nil && leaseOnly(l) {
			err = errLeaseOnly
		}
		if err != nil {
			return false, nil, fmt.Errorf("item %d, %w", i+1, opError(err)) // as the socket client says it
		}
		limits[i] = *l
		fl := f & (proto.FlagStrict | proto.FlagSmyte)
		if it.Strict {
			fl |= proto.FlagStrict
		}
		if it.Smyte {
			fl |= proto.FlagSmyte
		}
		its[i] = engine.Item{Key: keyBytes(it.Key), Limit: &limits[i], Cost: it.Cost, Flags: engine.FlagsFromProto(fl)}
	}
	for {
		now := c.clock.now()
		e := c.engine(now)
		if e == nil {
			if c.fallback != nil {
				return c.fallback.Multi(ctx, items, opts...)
			}
			return false, nil, c.unavailable()
		}
		t := engine.At(now)
		t.Wait = c.wait(ctx)
		t.Wire(f, at)
		out, allowed, err := e.Multi(ds[:0], its[:len(items)], t)
		if errors.Is(err, engine.ErrNoOwner) {
			c.detached(e, err)
			continue
		}
		if err != nil {
			return false, nil, opError(err)
		}
		res := make([]sluice.Decision, len(out))
		for i := range out {
			res[i] = wireDecision(&out[i])
		}
		return allowed, res, nil
	}
}

// wait is how long an operation under ctx may wait for locks: until ctx's
// deadline (at least a moment: a lock about to be freed is still taken),
// else the Client's LockWait.
func (c *Client) wait(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return max(time.Until(d), time.Nanosecond)
	}
	return c.lockWait // 0: the engine's default
}

// keyBytes returns key's bytes without copying them: the engine reads a
// key and copies what it keeps.
func keyBytes(key string) []byte { return unsafe.Slice(unsafe.StringData(key), len(key)) }

// statusError is an engine error as the socket client reports the same
// refusal: its text, and errors.Is the socket client's error for it.
type statusError struct {
	status error
	err    error
}

// Error says it as the socket client's *sluice.StatusError would, for
// people: "invalid cost: negative cost: -1".
func (e *statusError) Error() string {
	st := proto.StatusOf(e.status)
	msg := strings.TrimPrefix(e.err.Error(), "engine: ")
	msg = strings.TrimPrefix(msg, (&sluice.StatusError{Status: st}).Error()+": ") // said once
	return (&sluice.StatusError{Status: st, Message: msg}).Error()
}

func (e *statusError) Unwrap() error        { return e.err }
func (e *statusError) Is(target error) bool { return target == e.status }

// opError maps an engine error to the socket client's vocabulary: the
// sentinel of the status the sidecar answers it with.
func opError(err error) error {
	if err == nil {
		return nil
	}
	return &statusError{engine.Status(err).Err(), err}
}
