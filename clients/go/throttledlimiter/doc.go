// Package throttledlimiter is a github.com/throttled/throttled/v2 rate
// limiter that decides in the Sluice sidecar: a key's bucket is shared by
// every process of the host, and each decision is one call to the sidecar,
// atomic across them. It goes wherever throttled takes a RateLimiterCtx,
// such as HTTPRateLimiterCtx:
//
//	c, err := sluice.Dial("var/sluice.sock")
//	...
//	l, err := throttledlimiter.Limit(throttled.RateQuota{MaxRate: throttled.PerMin(10), MaxBurst: 4})
//	...
//	httpLimiter := throttled.HTTPRateLimiterCtx{
//		RateLimiter: throttledlimiter.New(c, l),
//		VaryBy:      &throttled.VaryBy{RemoteAddr: true},
//	}
//	http.Handle("/api/", httpLimiter.RateLimit(apiHandler))
//
// # Mapping
//
// throttled's GCRARateLimiterCtx runs the generic cell rate algorithm in
// the process, over a GCRAStoreCtx that gets a key's theoretical arrival
// time and writes it back with a compare-and-swap, retried on conflict.
// The sidecar runs the same algorithm itself (its gcra limit is redis-cell's,
// which is throttled's), so a RateLimiter sends each request as one acquire
// on the key Prefix+key (a key too long for the sidecar is replaced by its
// SHA-256) and reports the sidecar's decision as throttled's RateLimitResult:
// Limit, Remaining, ResetAfter and RetryAfter are what throttled's own rate
// limiter reports for the same requests at the same times (the package's
// tests compare them), but for a quantity above the burst, which can never
// pass: throttled then reports Remaining as the limit and ResetAfter 0
// whatever the state, and the sidecar the bucket's state. Limit turns a throttled.RateQuota into that gcra
// limit; New takes any Sluice limit (a token_bucket, a sliding_window, a
// limit the sidecar's configuration names, ...), whose decision is reported
// the same way. A quantity of 0 peeks, as in throttled.
//
// # Store
//
// Store is a throttled.GCRAStoreCtx, for a service that keeps throttled's
// own GCRARateLimiterCtx: its registers are the sidecar's (a value with an
// expiry per key, on the sidecar's clock; sluice.Client.GetRegister and
// the rest), so every process of the host shares a key's theoretical
// arrival time, and each read, set-if-absent and compare-and-swap is one
// call, atomic across them:
//
//	rl, err := throttled.NewGCRARateLimiterCtx(throttledlimiter.NewStore(c, ""), quota)
//
// throttled then takes two calls per request, and more when processes race
// for a key (its compare-and-swap retries), where RateLimiter takes one:
// prefer RateLimiter unless the rate limiter must be throttled's. A time to
// live below MinStoreTTL is raised to it. The store returns the client's
// errors, the failure policy aside: a store cannot admit or deny, so an
// unreachable sidecar is an error, which throttled's middleware answers
// with its Error handler.
//
// # Failures
//
// RateLimitCtx follows the failure policy of the client (see
// sluice.FailurePolicy) when the sidecar cannot be reached: with FailOpen,
// the default, the request is not limited; with FailClosed it is, with
// RetryAfter the time until the client next asks the sidecar; in both, the
// other fields are -1 (unknown), so throttled's middleware sets no
// X-RateLimit headers. With FailError it returns the error, which
// HTTPRateLimiterCtx answers with its Error function (500 by default).
package throttledlimiter
