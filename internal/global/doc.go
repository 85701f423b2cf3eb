// Package global decides requests on limits shared by a fleet of hosts,
// kept in Redis, Redis Sentinel or Redis Cluster.
//
// Every decision is made in Redis by one Lua script (decide.lua), loaded
// by SHA and reloaded after a restart or failover, that applies package
// bucket's algorithms with the same semantics: token_bucket (with Strict
// and Smyte), gcra, fixed_window, sliding_window and pacer, acquire and
// refund. A Store batches the concurrent requests for each shard into one
// pipeline (exact mode); Eval is one script call, as an application calling
// Redis + Lua itself makes. Leases take tokens from a global bucket in
// leases and decide from them locally (leased mode), journaled (Journal)
// so that a killed process's leases are returned by the next. Fallback
// applies a limit's outage policy (local share, open, closed) to a request
// Redis does not decide in time; a Store tells one slow call (a miss) from
// a shard that is down (refused, or three misses in a row), fails the
// requests of a shard that is down at once, and probes it back within
// about 100 ms of its answering. Members counts the hosts sharing the
// Redis, for the default share of a limit. docs/global.md is the full
// description.
//
// # Clock
//
// One clock: Redis's TIME, read inside the script, so the hosts' clocks
// never enter a decision and skew between them cannot mint tokens. It has
// microsecond resolution; a decision is then exact in nanoseconds from that
// time. Request.At gives an explicit time instead, for tests and replays.
//
// # Format
//
// A bucket is one Redis string under the key
//
//	<prefix>{<key>}:<algorithm>[:<identity>...]
//
// (see AppendKey; the identity is SPEC's: token_bucket max, refill_time,
// refill_amount; the windows their window; gcra and pacer nothing). Its
// value is three decimal integers separated by spaces, package bucket's
// State words, times in Unix ns. It expires (PX) when the bucket is full
// again. docs/global.md describes the layout and the script's arguments.
//
// # Exactness
//
// Lua numbers are doubles. The script computes every time as a
// nanosecond offset from now and every product that could pass 2^53 with
// 24-bit limbs, and Check refuses limits whose counts pass MaxCount or
// whose derived durations pass MaxDuration (about 52 days): within them,
// the script and package bucket agree on every field of every decision
// (the conformance tests check it on random sequences). Two differences
// remain: a state fresh at now is a new bucket (the table may reclaim it
// too; here always), and a pacer request whose slots would end more than
// about 104 days ahead is denied (package bucket: past year 2262).
//
// The lease journal is a file of its own, <state file>.leases; its layout
// is documented in journal.go (version 1).
//
// # Concurrency
//
// A Store, Leases, a Fallback, Members and a Journal are safe for
// simultaneous use by multiple goroutines.
package global
