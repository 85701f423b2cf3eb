// Package config reads Sluice's config file: named limits that callers use
// instead of a limit spec, reloaded while the sidecar runs.
//
// # Format
//
// The file is YAML; docs/config.md is its reference and
// deploy/sluice.example.yaml an example. In short:
//
//	limits:
//	  login:
//	    limit: "token_bucket:max=10,refill_time=1h,refill_amount=1"
//	    description: "password attempts per account"
//	    shadow: false
//
// A name is 1 to 64 bytes of ASCII letters, digits, '_', '-' and '.',
// starting with a letter; it never contains ':', which is how a caller's
// LIMIT argument tells a name from a spec. The name "spec" is reserved: it
// labels the metrics of requests that bring an inline spec. Unknown fields
// are errors, so a misspelt option never silently does nothing.
//
// The fields scope, lease, lease_ttl, on_unavailable and fallback_share
// describe a global limit (shared by many hosts, decided in Redis: see
// internal/global); a local limit (the default scope) may not set them.
//
// # Concurrency
//
// A Set is immutable once Parse or Load returns it: any number of
// goroutines may read it. A Holder hands the current Set to readers with an
// atomic load, so a reload never blocks or fails a request in flight: a
// request decides under the Set it loaded. A Watcher reloads the file on
// demand (SIGHUP, wired by the command) and when its content changes,
// validates the new file whole and swaps it in atomically; a file that does
// not validate leaves the current Set in place. A reload on a change
// applies a content two polls agree on, and keeps in force the limits the
// file stopped defining (Set.Kept) until a reload on demand: a file caught
// half-written never takes a limit in use away.
//
// Only a regular file is read (opened without blocking, checked after the
// open), within a read timeout; a reload waiting for its turn or for the
// file returns as soon as its context is done, so it never holds up
// shutdown.
//
// # Caveats
//
// Changing a named limit's parameters follows the bucket identity rules:
// a token_bucket, fixed_window or sliding_window limit with new identity
// parameters names new buckets (the old ones expire unused), while a gcra
// or pacer limit keeps its buckets' state and reads it under the new
// parameters.
package config
