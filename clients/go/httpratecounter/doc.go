// Package httpratecounter is a github.com/go-chi/httprate LimitCounter
// backed by the Sluice sidecar: a rate limiter's counts are shared by every
// process of the host, and each request is decided in one call to the
// sidecar, atomic across them.
//
//	c, err := sluice.Dial("var/sluice.sock")
//	...
//	perIP := httprate.LimitBy(10, time.Minute, keyFunc, httprate.WithLimitCounter(httpratecounter.New(c)))
//	http.Handle("/api/", perIP(apiHandler))
//
// # Mapping
//
// httprate decides in the process: under a mutex of the process it calls
// Get for the counts of the current and the previous window, computes
// prev*(window-elapsed)/window + curr, refuses the request if that plus
// its increment passes the limit, and otherwise calls IncrementBy. Across
// processes that is check-then-increment: two processes can read the same
// counts and both admit the last request. This counter moves the decision
// into the sidecar, whose sliding_window is the same two-window estimate
// (Config sets requestLimit per windowLength, on the key Prefix+key; a key
// too long for the sidecar is replaced by its SHA-256):
//
//   - Get takes the request: one acquire of 1. If the sidecar admits it,
//     Get reports (limit-1-remaining, 0), which httprate admits, setting
//     X-RateLimit-Remaining to the sidecar's remaining; if the sidecar
//     refuses it, Get reports (limit, 0), which httprate refuses with
//     X-RateLimit-Remaining 0.
//   - The IncrementBy(key, window, 1) httprate then makes for an admitted
//     request asks nothing: the token is taken.
//
// So each window admits exactly what the sidecar's sliding window allows,
// whichever processes send the requests. X-RateLimit-Limit,
// X-RateLimit-Reset (the end of httprate's window, which is the sidecar's
// for windows that divide a day) and Retry-After (the window's length)
// are httprate's own.
//
// httprate's per-request values, which a counter cannot see:
//
//   - WithIncrement(ctx, n): Get took 1 token, and httprate admits the
//     request if n-1 more fit its counts; IncrementBy then takes the n-1 in
//     a second acquire, all or none, and if another process took them
//     meanwhile it gives the first back and returns ErrLimited, which
//     httprate's error handler answers (WithErrorHandler; 428 by default).
//     If httprate refuses the request, its token stays taken.
//   - WithRequestLimit(ctx, n): the sidecar decides with the counter's
//     limit. A request httprate refuses under a lower n keeps its token; a
//     request the sidecar refused but a higher n would admit meets
//     ErrLimited in IncrementBy: a per-request limit cannot raise the
//     counter's.
//
// Get is a decision: httprate's RateLimiter.Status, which calls it, takes
// a request too. One Counter serves one rate limiter (Config sets its
// limit, and IncrementBy follows the limiter's Get under the limiter's
// mutex). That mutex also means a rate limiter waits for one decision at a
// time in each process: see the benchmarks in the README.
//
// # Failures
//
// Get follows the failure policy of the client (see sluice.FailurePolicy)
// when the sidecar cannot be reached: with FailOpen, the default, it
// reports an empty window (admitted, X-RateLimit-Remaining limit-1); with
// FailClosed a full one (refused); with FailError it returns the error,
// which httprate's error handler answers (428 by default).
package httpratecounter
