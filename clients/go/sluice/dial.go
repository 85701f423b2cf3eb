package sluice

import (
	"context"
	"errors"
	"syscall"
	"time"
)

// conn returns the connection in use, connecting if there is none and the
// backoff allows.
func (c *Client) conn() (*conn, error) { return c.connWithin(c.opt.dialTimeout) }

// connWithin is conn, giving a connection attempt up to timeout.
func (c *Client) connWithin(timeout time.Duration) (*conn, error) {
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
		var se *StatusError
		if errors.As(c.lastErr, &se) && refusal(se.Status) {
			return nil, c.lastErr // refused: a refusal, not an outage
		}
		next := "the next attempt to connect is in " + c.retryAt.Sub(now).Round(time.Millisecond).String()
		if ue, ok := c.lastErr.(*unavailableError); ok && ue.why != "" {
			return nil, unavailable(ue.why+"; "+next, ue.cause)
		}
		return nil, unavailable(next, c.lastErr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	nc, err := c.opt.dial(ctx, c.path)
	cancel()
	if err != nil {
		c.backoffLocked(now, err)
		why := "cannot connect to " + c.where
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			why = "nothing listens at " + c.where
		}
		err = unavailable(why, err)
		c.lastErr = err
		return nil, err
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

// retryIn is how long until the client next asks the sidecar: the
// RetryAfter of a FailClosed decision.
func (c *Client) retryIn() time.Duration {
	c.brk.mu.Lock()
	open := time.Until(c.brk.openUntil)
	if c.brk.state.Load() == breakerClosed {
		open = 0
	}
	c.brk.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if d := max(time.Until(c.retryAt), open); d > 0 {
		return d
	}
	return c.opt.minBackoff
}
