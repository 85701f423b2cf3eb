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

//
// A deadline makes the sidecar's answer come first, but a host may stop
// the sidecar or this process for longer than its margin. So the sidecar
// also marks every decision of a global limit whose outage policy is
// closed (Decision.FailsClosed), and the client remembers, per limit name,
// what the last decision in a frame of version 4 said: while it says the
// limit fails closed, the failure policy denies the name's requests the
// sidecar does not answer (Degraded, Outage "closed"), and FailError still
// returns the error. Named requests go in frames of version 4 whenever the
// sidecar speaks it, deadline or not, so that their answers carry the mark.

// sidecarVersion is the protocol version of the sidecar at the other end
// of cn, 0 if its HELLO failed (the client then writes older versions);
// known once done is closed.
type sidecarVersion struct {
	cn   *conn
	v    uint8
	done chan struct{}
}

// deadlineFor returns the deadline (Unix ns) to tell the sidecar with a
// request op on l, or 0 for none, and the oldest frame version to send it
// in (0: the request's own). A named limit's ACQUIRE, PEEK, REFUND and
// RESET go in frames of version 4 to a sidecar of version 4 or later (its
// ACQUIRE, PEEK and REFUND in frames of version 7, with flag ALL, to a
// sidecar of version 7, so that a list's answer gives each limit's),
// with the deadline if the call has one (a timeout or the context's); its
// LEASE and RELEASE in frames of version 5 to a sidecar of version 5 or
// later, so that their answers say which outage policy made them.
func (c *Client) deadlineFor(ctx context.Context, op proto.Opcode, l *Limit) (deadline int64, v uint8) {
	lease := op == proto.OpLease || op == proto.OpRelease
	if l.Name == "" || !lease && (op < proto.OpAcquire || op > proto.OpReset) {
		return 0, 0
	}
	d, ok, _ := callDeadline(ctx, time.Now(), c.opt.timeout)
	speaks := c.sidecarSpeaks(ctx, d, ok)
	v = 4
	if speaks >= proto.ListVersion && op != proto.OpReset {
		v = proto.ListVersion // with ALL: a list's answer says each limit's decision (encode)
	}
	switch {
	case lease && speaks >= 5:
		return 0, 5
	case lease || speaks < 4:
		return 0, 0
	case !ok:
		return 0, v
	}
	return d.UnixNano(), v
}

// sidecarSpeaks returns the protocol version of the sidecar on the
// current connection, asking it with a HELLO the first time (callers that
// come meanwhile wait for its answer until their deadline, if they have
// one); 0 while unknown.
func (c *Client) sidecarSpeaks(ctx context.Context, deadline time.Time, hasDeadline bool) uint8 {
	cn := c.cur.Load()
	if cn == nil || cn.failed.Load() {
		return 0 // the request connects; the next one asks
	}
	sv := c.sidecar.Load()
	if sv == nil || sv.cn != cn {
		mine := &sidecarVersion{cn: cn, done: make(chan struct{})}
		if !c.sidecar.CompareAndSwap(sv, mine) {
			return c.sidecarSpeaks(ctx, deadline, hasDeadline) // another caller asks
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
	var expired <-chan time.Time
	if hasDeadline {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-sv.done:
		return sv.v
	case <-expired:
		return 0
	case <-ctx.Done():
		return 0
	}
}

// failsClosed is the set of the names of the limits that fail closed, as
// the last decision on each said: replaced, never changed, so that a
// decision reads it without a lock.
type failsClosed = map[string]struct{}

// learn records what the decision of an ACQUIRE, PEEK or REFUND on the
// named limit said about its outage policy, if it came in a frame of
// version 4 (older ones cannot say).
func (c *Client) learn(name string, cl *call) {
	if cl.op < proto.OpAcquire || cl.op > proto.OpRefund || len(cl.req) <= 4 || cl.req[4] < 4 {
		return
	}
	c.learnClosed(name, cl.res.FailsClosed)
}

// learnMulti records what each decision of a MULTI said about its named
// item's outage policy, if it came in a frame of version 7 (older ones
// cannot say).
func (c *Client) learnMulti(items []Item, cl *call) {
	if len(cl.req) <= 4 || cl.req[4] < proto.ListVersion {
		return
	}
	for i := range items {
		c.learnClosed(items[i].Limit.Name, cl.res.Marks[i].FailsClosed)
	}
}

// learnClosed records whether the named limit (or "", nothing to record)
// fails closed, as its last decision said.
func (c *Client) learnClosed(name string, closed bool) {
	if name == "" {
		return
	}
	if m := c.closedNames.Load(); m != nil {
		if _, known := (*m)[name]; known == closed {
			return
		}
	} else if !closed {
		return
	}
	c.closedMu.Lock()
	defer c.closedMu.Unlock()
	next := failsClosed{}
	if m := c.closedNames.Load(); m != nil {
		for k := range *m {
			next[k] = struct{}{}
		}
	}
	if closed {
		next[name] = struct{}{}
	} else {
		delete(next, name)
	}
	c.closedNames.Store(&next)
}

// knownClosed reports whether the last decision on the named limit said
// it fails closed.
func (c *Client) knownClosed(name string) bool {
	if name == "" {
		return false
	}
	m := c.closedNames.Load()
	if m == nil {
		return false
	}
	_, ok := (*m)[name]
	return ok
}
