package sluice

import (
	"context"

	"github.com/sluicehq/sluice/proto"
)

// Lease is a slot of a concurrency limit that Client.Lease took, or was
// refused: its Decision, and the id that gives the slot back. Release it
// when the work it guards is done, usually with defer:
//
//	lease, err := c.Lease(ctx, exports, "exports:"+tenant)
//	if err != nil {
//		return err
//	}
//	defer lease.Release()
//	if !lease.Allowed {
//		return errBusy // lease.RetryAfter: when a slot frees at the latest
//	}
//
// A Lease is a small value; copies of it name the same slot.
type Lease struct {
	// Decision is the sidecar's, or the failure policy's (Degraded).
	// Allowed: the slot is held; Remaining: the slots still free;
	// RetryAfter (denied): until the earliest held lease expires, though a
	// release may free a slot sooner; ResetAfter: until the last held
	// lease expires.
	Decision

	// ID is the sidecar's id of the lease, never 0 when the sidecar
	// granted it; 0 when it was denied, and for a Degraded decision (the
	// failure policy allowed or denied without the sidecar: no slot is
	// held, and releasing it does nothing).
	ID uint64

	c   *Client
	l   Limit
	key string
}

// Lease takes one slot of key's bucket under l, a concurrency limit
// (Concurrency, or the name of one in the sidecar's config), for the work
// about to be done: at most l's limit leases of the bucket are held at
// once, each until it is released (Lease.Release, Client.Release) or,
// failing that, until l's lease time after it was taken. A denied lease
// holds nothing.
//
// The sidecar also gives a lease back when the connection it was taken on
// closes: when the client is closed, or its process exits or dies. A
// process that crashes holding slots thus frees them at once, and one that
// hangs (alive, its connection open, never releasing) frees them when
// their lease time passes: choose a lease time above the longest the work
// may take.
//
// If the sidecar cannot be reached, the failure policy decides (see
// FailurePolicy): FailOpen allows, FailClosed denies, both with Degraded
// set and ID 0, so the work runs unlimited (or not at all) and its
// Release does nothing; FailError returns the error. A LEASE abandoned in
// flight (its context ended, or the client's timeout passed) that the
// sidecar granted is given back by the client when the answer comes. A
// limit that is not a concurrency limit is refused with ErrInvalidLimit.
func (c *Client) Lease(ctx context.Context, l Limit, key string) (Lease, error) {
	cl, err := c.item(ctx, proto.OpLease, l, key, 1, nil)
	if err != nil {
		d, err := c.degraded(err, l.Name)
		return Lease{Decision: d}, err
	}
	ls := Lease{Decision: c.decided(cl, l.Name), ID: cl.res.Lease, c: c, l: l, key: key}
	putCall(cl)
	return ls, nil
}

// Release gives the lease back, if it holds a slot, and reports whether
// the sidecar held it: false for a lease that was denied or Degraded (it
// holds nothing, and nothing is sent), released already, or expired. It
// waits at most the client's timeout (WithTimeout), or DefaultTimeout if
// the client has none, whatever the caller's context, so that a deferred
// Release runs even when the request that leased has been cancelled.
//
// A Release that fails (the sidecar unavailable) leaves the slot to come
// back when the client's connection closes or the lease expires. Call
// Client.Release for a context of your own.
func (ls Lease) Release() (released bool, err error) {
	if ls.ID == 0 || ls.c == nil {
		return false, nil
	}
	timeout := ls.c.opt.timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return ls.c.Release(ctx, ls.l, ls.key, ls.ID)
}

// Release gives back lease id of key's bucket under l, a concurrency
// limit, and reports whether the sidecar held it: false if it does not
// (an id never granted, released already, expired, or taken under another
// limit or key). Any client of the holder's user may release a lease, not
// only the one that took it: an id can be handed to another process of the
// same user. A client of another user is refused with ErrDenied, and the
// slot stays held; ids are 64 random bits, so none is released by
// guessing. id 0, a denied or
// Degraded lease's, holds nothing: Release returns false without asking
// the sidecar. The failure policy does not apply: an unreachable sidecar
// is an error, and the lease comes back when the connection it was taken
// on closes or it expires.
func (c *Client) Release(ctx context.Context, l Limit, key string, id uint64) (released bool, err error) {
	if id == 0 {
		return false, nil
	}
	cl, err := c.item(ctx, proto.OpRelease, l, key, int64(id), nil)
	if err != nil {
		return false, err
	}
	released = cl.res.Released
	putCall(cl)
	return released, nil
}
