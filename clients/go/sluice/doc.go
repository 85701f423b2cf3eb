// Package sluice is the Go client of Sluice, the per-host rate-limiting
// sidecar: it talks to sluiced over its Unix socket in the native protocol
// (package proto) and offers net/http middleware.
//
//	c, err := sluice.Dial("var/sluice.sock", sluice.WithFailurePolicy(sluice.FailOpen))
//	...
//	login := sluice.TokenBucket(10, time.Hour, 1) // 10 attempts, 1 more per hour
//	d, err := c.Acquire(ctx, login, "login:"+user, 1)
//	if err == nil && !d.Allowed {
//		// refuse; d.RetryAfter says when to try again
//	}
//
// A limit is an algorithm and its parameters (TokenBucket, GCRA,
// FixedWindow, SlidingWindow, Pacer, or ParseLimit of a spec such as
// "gcra:burst=4,count=1,period=1s"); a key names what is limited; the
// sidecar keeps one bucket per (limit, key), shared by every process on the
// host. Acquire, Peek, Refund, Reset and Multi act on buckets; Scan lists
// them; Stats, Ping and Hello ask about the sidecar.
//
// # Concurrency
//
// A Client is safe for concurrent use and is meant to be shared: every
// goroutine's requests go over one connection, pipelined. A writer
// goroutine writes whatever requests are queued in one write, so
// concurrent callers share system calls; a reader goroutine reads the
// answers, which come in request order, and hands each to its caller.
// Every call honours its context; one that gives up (cancelled, or past
// the Client's default timeout when its context has no deadline) returns
// at once, and its answer is read and dropped when it comes. Calls reuse
// pooled buffers: a call allocates nothing but what it returns (Multi's,
// Scan's and Stats' results).
//
// # Failures
//
// When the sidecar cannot be reached (not running, restarting, not
// answering within the default timeout, or sending bytes the client cannot
// decode), calls fail with an error wrapping ErrUnavailable and its
// cause, and calls in flight on a broken connection fail the same way.
// The next call reconnects; after a failed attempt, calls fail at once
// until the backoff (WithBackoff) has passed, so an absent sidecar costs
// no system calls, and the attempts never spin. Acquire, Peek and Multi
// then follow the failure policy (WithFailurePolicy): FailError returns the
// error, FailOpen allows and FailClosed denies, both with Degraded set.
//
// A request the sidecar rejects fails with a *StatusError, which
// errors.Is matches with the status's sentinel (ErrTableFull,
// ErrInvalidLimit, ...) and whose text keeps the sidecar's message; the
// connection goes on. Keys and limits the sidecar's decoder would reject
// are refused by the client before they are sent, because the sidecar
// closes a connection that carries one.
//
// # Caveats
//
// A call that times out or is cancelled may still have been decided: an
// Acquire abandoned in flight may have consumed its cost. The client never
// retries a request that may have been sent.
//
// Time is the sidecar's clock unless a request carries At. Decisions are
// exact to the nanosecond; the HTTP fields round durations up to whole
// seconds.
package sluice
