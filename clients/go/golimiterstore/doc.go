// Package golimiterstore is a github.com/sethvargo/go-limiter Store backed
// by the Sluice sidecar: a key's bucket is shared by every process of the
// host, and each Take is one call to the sidecar, atomic across them.
//
//	c, err := sluice.Dial("var/sluice.sock")
//	...
//	store, err := golimiterstore.New(c, &golimiterstore.Config{Tokens: 10, Interval: time.Minute})
//	...
//	mw, err := httplimit.NewMiddleware(store, httplimit.IPKeyFunc())
//	...
//	http.Handle("/api/", mw.Handle(apiHandler))
//
// # Mapping
//
// go-limiter's Store is a whole limiter, so each key maps onto a Sluice
// limit: Config's Tokens per Interval (the sidecar's fixed_window), or any
// limit as Config.Limit, on the key Prefix+key (a key too long for the
// sidecar is replaced by its SHA-256).
//
//   - Take is an acquire of 1: tokens is the limit, remaining what is left,
//     reset (Unix ns) when a refused request would pass or, once allowed,
//     when the bucket is full again, which for a fixed window is the end of
//     the window.
//   - Get is a peek; a key never taken from has all its tokens
//     (memorystore answers 0 and 0 for it).
//   - Set(key, tokens, interval) gives key a fixed_window of its own in the
//     calling process, and resets its bucket in the sidecar so that it is
//     full. The override lives in the process, not the sidecar: each
//     process that limits the key must Set it alike (at start-up, from the
//     same configuration), or the processes count in different buckets
//     (a limit is part of a bucket's identity).
//   - Burst(key, tokens) refunds tokens to key's bucket, for every process,
//     capped at its limit: it returns what was taken and cannot raise a
//     bucket past its limit as memorystore's does until its next interval.
//     Raise a key's limit with Set.
//   - Close makes every later call return limiter.ErrStopped; the buckets
//     stay in the sidecar and the client stays open.
//
// memorystore's windows start at a key's first request; the sidecar's
// fixed windows are aligned to multiples of Interval since the Unix epoch.
//
// # Failures
//
// Take and Get follow the failure policy of the client (see
// sluice.FailurePolicy) when the sidecar cannot be reached: with FailOpen,
// the default, Take allows and reports the limit's tokens as remaining
// (nothing is being counted); with FailClosed it refuses, its reset when
// the client next asks the sidecar; with FailError it returns the error,
// which httplimit's middleware answers with 500. The tokens reported are
// Config's Tokens, or a Set limit's; 0 for a Config.Limit, which the store
// cannot read without the sidecar. Set and Burst return the error.
package golimiterstore
