// Package sluice is the Go client of Sluice, the per-host rate-limiting
// sidecar: it talks to sluiced over its Unix socket in the native protocol
// (package proto) and offers net/http middleware.
//
//	c, err := sluice.Dial("var/sluice.sock") // fails if nothing answers there
//	...
//	login := sluice.TokenBucket(10, time.Hour, 1) // 10 attempts, 1 more per hour
//	d, err := c.Acquire(ctx, login, "login:"+user, 1)
//	if err == nil && !d.Allowed {
//		// refuse; d.RetryAfter says when to try again
//	}
//
// A limit is an algorithm and its parameters (TokenBucket, GCRA,
// FixedWindow, SlidingWindow, SlidingLog, WindowCounters, Pacer,
// Concurrency, or ParseLimit of a spec such as
// "gcra:burst=4,count=1,period=1s"); a key names what is limited; the
// sidecar keeps one bucket per (limit, key), shared by every process on the
// host. Acquire, Peek, Refund, Reset and Multi act on buckets; Lease and
// Release on the buckets of concurrency limits; Scan lists them; Stats,
// Ping and Hello ask about the sidecar. GetRegister, SetRegister,
// CompareAndSwapRegister and DeleteRegister act on registers (protocol
// version 6): an int64 value per key with an expiry, on the sidecar's
// clock, each operation atomic across the host's processes, for a rate
// limiter that runs its algorithm in the process and keeps its state in
// the sidecar (throttled's GCRA store); the failure policy does not apply
// to them.
//
// # Leases
//
// A concurrency limit ("concurrency:limit=2,lease=1h") bounds the work in
// progress rather than its rate: at most limit leases of a bucket are held
// at once. Lease takes a slot and Release gives it back, usually deferred,
// as with a semaphore:
//
//	exports := sluice.Concurrency(2, time.Hour) // 2 at once; a lost lease expires after an hour
//	lease, err := c.Lease(ctx, exports, "exports:"+tenant)
//	if err != nil {
//		return err
//	}
//	defer lease.Release()
//	if !lease.Allowed {
//		// refuse: every slot is held
//	}
//
// A lease is tied to the connection it was taken on: when the client is
// closed, or its process exits or is killed, the sidecar gives its leases
// back at once. A holder that hangs (alive, connection open) loses its
// slot when the lease time passes, so the lease time should exceed the
// longest the work takes. Middleware leases a slot for each request when
// its limit is a concurrency limit, for as long as the handler runs.
//
// # Concurrency
//
// A Client is safe for concurrent use and is meant to be shared: every
// goroutine's requests go over one connection, pipelined. Whatever
// requests are queued go in one write, so concurrent callers share system
// calls, and the answers, which come in request order, are read together
// and handed each to its caller. Callers do this work themselves when
// nobody else is: a caller that finds the connection idle writes what is
// queued (after letting the other callers that are ready to run queue
// theirs) and reads until its own answer has come, and one that finds
// another reading writes what is queued and waits; a writer and a reader
// goroutine take over only what is left when a caller returns. A caller
// therefore wakes no other goroutine, and its process one thread per batch
// of answers rather than several. On Linux the connection reads and
// writes its socket with raw system calls through Go's poller.
// Handing a batch of answers to the callers that wait for them makes
// those callers runnable, and the Go runtime then wakes a thread for an
// idle processor (GOMAXPROCS above 1): a process whose goroutines mostly
// wait on the sidecar wakes a second thread for most batches, which the
// client cannot avoid. Where many such processes share a small host and
// each has little work of its own to run in parallel, GOMAXPROCS=1
// saves that thread: in BenchmarkFleet (internal/server, 32 client
// processes of 8 goroutines on a 2-core host,
// SLUICE_FLEET_CLIENT_GOMAXPROCS=1 against the default, 5 interleaved
// rounds, medians of the rounds' ratios) the clients spent 0.75x the CPU
// per leased decision, with half the context switches, and the fleet
// decided 1.2x as many.
// Every call honours its context; one that gives up (cancelled, past its
// deadline or past the Client's timeout) returns at once, and its answer
// is read and dropped when it comes. A lone caller reading its own answer
// notices a cancellation without a deadline within 2 ms. Calls reuse
// pooled buffers: a call allocates nothing but what it returns (Multi's,
// Scan's and Stats' results).
//
// # Failures
//
// Dial asks the sidecar before it returns (see Dial): nothing listening at
// the socket (a wrong path, an application started from another directory
// than the sidecar), no answer, or a sidecar that refuses this process
// (ErrDenied) is an error at once, naming the socket's absolute path, not
// a client that would let every request through. WithLazyStart skips the
// check for an application that may start before its sidecar; calls then
// fail until the sidecar has answered once.
//
// When the sidecar cannot be reached (not running, restarting, not
// answering within the call's timeout, or sending bytes the client cannot
// decode), calls fail with an error wrapping ErrUnavailable and its
// cause, and calls in flight on a broken connection fail the same way.
// A call waits for its answer at most DefaultTimeout (50 ms, WithTimeout),
// or until its context's deadline if that is sooner.
//
// Two mechanisms keep an unavailable sidecar from costing every call:
//
//   - Reconnect backoff: after a failed attempt to connect, calls fail at
//     once until the backoff (WithBackoff) has passed, so an absent
//     sidecar costs no system calls and the attempts never spin.
//   - Circuit breaker: a sidecar that accepts connections but does not
//     answer (stopped, overloaded) would cost each call its timeout. After
//     DefaultBreakerThreshold consecutive calls without an answer in time,
//     the breaker opens: calls fail at once for a period that starts at
//     DefaultBreakerMinOpen and doubles after each failed probe up to
//     DefaultBreakerMaxOpen, drawn at random from its upper half; then one
//     call probes the sidecar, and an answer closes the breaker
//     (WithBreaker). Healthy reports whether it is closed; the client logs
//     each opening and closing once.
//
// Acquire, Peek, Multi and Lease then follow the failure policy
// (WithFailurePolicy), if the sidecar has answered the client before:
// FailOpen, the default, allows, FailClosed denies, both with Degraded
// set, and FailError returns the error. A Degraded
// lease holds no slot (its ID is 0) and releasing it does nothing: under
// FailOpen the work runs unlimited while the sidecar is away. Every decision
// the policy makes is counted (Degraded) and logged at most every 10
// seconds with the count since the last line, so that a limiter silently
// allowing everything shows.
//
// A sidecar that refuses a connection (Busy at its connection limit,
// Denied for a peer it does not allow) writes its refusal and closes the
// connection; the client reports the refusal (ErrBusy, wrapped in
// ErrUnavailable: an outage; ErrDenied, not: a mistake the failure policy
// never answers), even when its request was written after the close.
//
// A request the sidecar rejects fails with a *StatusError, which
// errors.Is matches with the status's sentinel (ErrTableFull,
// ErrInvalidLimit, ...) and whose text keeps the sidecar's message; the
// connection goes on. Error texts are sentences for people ("invalid
// limit: ..."); programs match errors with errors.Is and errors.As. Keys and limits the sidecar's decoder would reject
// are refused by the client before they are sent, because the sidecar
// closes a connection that carries one.
//
// # Global limits
//
// A named limit the sidecar's config makes global is decided in Redis,
// which may be slow. A request on a named limit carries the call's
// deadline (its timeout or its context's, whichever is earlier) to a
// sidecar of protocol version 4, which the client learns with one HELLO
// per connection; the sidecar answers before it, by the limit's outage
// policy if Redis is late, so that the client's own failure policy does
// not decide for a sidecar that works. Decision.Outage names the policy
// ("local", "open", "closed") when it made the decision.
//
// A limit whose outage policy is closed stays closed when the sidecar's
// answer comes too late all the same (a host that stopped this process or
// the sidecar): every decision of such a limit says so
// (Decision.FailsClosed), the client remembers it per limit name, and its
// failure policy denies the name's requests the sidecar does not answer
// (Degraded, Outage "closed"), in Acquire, Peek, pipelines and Middleware;
// FailError still returns the error. A Multi's decisions carry both marks
// as an Acquire's (a sidecar of protocol version 7), teach the client
// alike, and a Multi with an item known to fail closed is denied so too.
//
// # Caveats
//
// A call that times out or is cancelled may still have been decided: an
// Acquire abandoned in flight may have consumed its cost. The client never
// retries a request that may have been sent. A Lease abandoned in flight
// that was granted is released by the client when its answer comes.
//
// When a connection breaks with leases taken on it, the sidecar gives
// them back while their holders still run (a sidecar that restarts is not
// a break: it keeps its leases): until they finish, the work in progress
// can exceed the limit, and releasing such a lease reports false.
//
// Time is the sidecar's clock unless a request carries At. Decisions are
// exact to the nanosecond; the HTTP fields round durations up to whole
// seconds.
package sluice
