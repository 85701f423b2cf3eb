package sluice

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/proto"
)

// Deadlines and outage marks (protocol version 4). A global limit's
// request waits for Redis in the sidecar; the sidecar must answer it, by
// the limit's outage policy if Redis is late, before this client gives up
// and its own failure policy decides instead (FailOpen would admit what a
// closed limit denies). So a request on a named limit (global limits are
// named) carries the call's deadline, and the sidecar answers before it,
// marking a decision its outage policy made (Decision.Outage).
//
// A sidecar of an older version would refuse a frame of version 4, so the
// client first learns its version: the first named request on each
// connection sends a HELLO before it (one round trip per connection; the
// requests that come meanwhile wait for its answer). A request to an older
// sidecar goes without its deadline, in the older version: the sidecar
// then answers within 4/5 of its Redis timeout, which the default
// timeouts of both leave inside this client's.

// sidecarVersion is the protocol version of the sidecar at the other end
// of cn, 0 if its HELLO failed (the client then writes older versions);
// known once done is closed.
type sidecarVersion struct {
	cn   *conn
	v    uint8
	done chan struct{}
}

// deadlineFor returns the deadline (Unix ns) to tell the sidecar with a
// request op on l, or 0 for none: ACQUIRE, PEEK, REFUND and RESET of a
// named limit, with a timeout or a context deadline, to a sidecar of
// protocol version 4 or later.
func (c *Client) deadlineFor(ctx context.Context, op proto.Opcode, l *Limit) int64 {
	if l.Name == "" || op < proto.OpAcquire || op > proto.OpReset {
		return 0
	}
	d, ok, _ := callDeadline(ctx, time.Now(), c.opt.timeout)
	if !ok || c.sidecarSpeaks(ctx, d) < 4 {
		return 0
	}
	return d.UnixNano()
}

// sidecarSpeaks returns the protocol version of the sidecar on the
// current connection, asking it with a HELLO the first time (callers that
// come meanwhile wait for its answer until their deadline); 0 while
// unknown.
func (c *Client) sidecarSpeaks(ctx context.Context, deadline time.Time) uint8 {
	cn := c.cur.Load()
	if cn == nil || cn.failed.Load() {
		return 0 // the request connects; the next one asks
	}
	sv := c.sidecar.Load()
	if sv == nil || sv.cn != cn {
		mine := &sidecarVersion{cn: cn, done: make(chan struct{})}
		if !c.sidecar.CompareAndSwap(sv, mine) {
			return c.sidecarSpeaks(ctx, deadline) // another caller asks
		}
		h, err := c.Hello(ctx)
		if err == nil {
			mine.v = h.Version
		} // else 0, once per connection: a sidecar that does not answer is not asked again
		close(mine.done)
		return mine.v
	}
	select {
	case <-sv.done:
		return sv.v
	default:
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-sv.done:
		return sv.v
	case <-t.C:
		return 0
	case <-ctx.Done():
		return 0
	}
}
