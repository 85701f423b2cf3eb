// Package ululestore is a github.com/ulule/limiter/v3 Store backed by the
// Sluice sidecar: a limiter's counts are shared by every process of the
// host, and each decision is one call to the sidecar, atomic across them.
//
//	c, err := sluice.Dial("var/sluice.sock")
//	...
//	rate, err := limiter.NewRateFromFormatted("10-M")
//	...
//	mw := stdlib.NewMiddleware(limiter.New(ululestore.New(c), rate))
//	http.Handle("/api/", mw.Handler(apiHandler))
//
// # Mapping
//
// A rate of N requests per period P is the sidecar's fixed_window limit of
// N+1 tokens per P (Limit), on the key Prefix+key (a key too long for the
// sidecar is replaced by its SHA-256). Get and Increment acquire, Peek
// peeks and Reset resets, each in one call. The extra token is the
// request that finds the limit reached: ulule's own stores count every
// request, refused or not, and report Reached once the count passes N; the
// sidecar counts only what it admits, so the (N+1)-th request of a window
// takes the last token and is reported Reached, as are all after it, and
// Peek can tell a window at exactly N (Remaining 0, not Reached) from one
// that refused a request (Reached). Each window therefore admits exactly N
// requests, whichever processes send them. Limit, Remaining and Reached
// read as ulule's stores report them; Reset is the end of the window, in
// Unix seconds.
//
// Windows are aligned to multiples of P since the Unix epoch (a 1-minute
// rate resets at every whole minute), where ulule's memory and Redis
// stores start a key's window at its first request.
//
// Increment of a count that does not fit what is left of the window is
// refused whole and counts nothing (Reached set): the sidecar decides all
// or nothing. ulule's stores add the count anyway, which then refuses the
// rest of the window. The middleware only ever counts one request.
//
// # Failures
//
// Get, Increment and Peek follow the failure policy of the client (see
// sluice.FailurePolicy) when the sidecar cannot be reached: with FailOpen,
// the default, the request is not Reached and Remaining is the rate's
// limit (nothing is being counted); with FailClosed it is Reached; with
// FailError the call returns the error, which ulule's middleware answers
// with its OnError handler (500 by default). Reset always returns the
// error.
package ululestore
