// Package global decides requests on limits shared by a fleet of hosts,
// kept in Redis, Redis Sentinel or Redis Cluster.
//
// Every decision is made in Redis by its algorithm's script, which applies
// package bucket's algorithm with the same semantics: token_bucket (with
// Strict and Smyte), gcra, fixed_window, sliding_window and pacer, acquire
// and refund; sliding_log and window_counters likewise, and concurrency's
// leases (Store.Hold, Store.Release). A Store sends them as functions of one library (FCALL),
// loaded where Redis lacks it, and as scripts (EVALSHA) where Redis refuses
// functions (before Redis 7.0, or an ACL without them). A Store batches
// the concurrent requests for each shard into one call of the library's
// batch function (lua/batch.lua; exact mode);
// Eval is one script call, as an application calling Redis + Lua itself
// makes. Store.Multi decides several requests whose keys share a Cluster
// slot together in one call of the library's multi function
// (lua/multi.lua): all or nothing, as a MULTI, or each in order, as a
// Redis transaction; Fallback.Multi applies the strictest of their outage
// policies to the whole. Leases take tokens from a global bucket in leases and decide from
// them locally (leased mode), journaled (Journal) so that a killed
// process's leases are returned by the next. Fallback applies a limit's
// outage policy (local share, open, closed) to a request Redis does not
// decide in time; a Store tells one slow call (a miss) from a shard that
// is down (refused, or three misses in a row), fails the requests of a
// shard that is down at once, and probes it back within about 100 ms of
// its answering. Members counts the hosts sharing the Redis, for the
// default share of a limit. docs/global.md is the full description.
//
// # Algorithms
//
// Each algorithm a global limit can use is a script, lua/<name>.lua (name
// as bucket.Algorithm.String), and an entry in the table algorithms
// (algorithms.go): its parameters, the words of bucket.Limit.Identity in
// its keys, its bounds (Check), its Decision.Limit, its share (Share) and
// whether it can be leased. Adding one (a calendar quota, say) is adding
// both: the script and the entry.
// A script includes the parts it shares with a line "-- #include FILE":
// clock.lua (the op, Redis's TIME, times as offsets from now), int.lua and
// wide.lua (exact integer arithmetic), window.lua, and state.lua, the
// request on a bucket kept as package bucket's three State words (what
// six algorithms keep, quota among them; sliding_log, window_counters and
// concurrency keep their block of state in a binary string and write their
// own request, times packed by times.lua). Each script defines
// run(keys, argv): its EVAL form ends
// with "return run(KEYS, ARGV)", and the library holds every script in a
// block of its own that registers run as <library>_<name>. Redis runs only
// the code of the request's algorithm, and the library's functions are
// built once, when Redis loads it.
//
// # Clock
//
// One clock: Redis's TIME, read inside the script, so the hosts' clocks
// never enter a decision and skew between them cannot mint tokens. It has
// microsecond resolution; a decision is then exact in nanoseconds from that
// time. Request.At gives an explicit time instead, for tests and replays.
// A quota's calendar is computed in Go (Redis knows no time zones): the
// request carries the boundaries of three consecutive periods around the
// host's time, and the script takes the one that holds its own, refusing
// the request if none does (docs/global.md, "Calendar quotas").
//
// # Format
//
// A bucket is one Redis string under the key
//
//	<prefix>{<key>}:<algorithm>[:<identity>...]
//
// (see AppendKey; the identity is SPEC's: token_bucket max, refill_time,
// refill_amount; the windows their window; sliding_log max and window;
// window_counters window and counters; concurrency max; gcra and pacer
// nothing). Its value is three decimal integers separated by single
// spaces, package bucket's State words, times in Unix ns, or for the
// three extended algorithms a binary string of their block (the scripts'
// headers, docs/global.md); anything else is refused as malformed. It
// expires no sooner than when the bucket is fresh again, and at most a
// quarter of that time later (a write keeps a late enough expiry: moving
// it costs Redis more than the rest of a decision). docs/global.md
// describes the layout and the scripts' arguments. The function library
// is named sluice_ and 12 hex digits of its code's SHA-1: every version
// has its own, so processes of different versions can share a Redis.
//
// # Exactness
//
// Lua numbers are doubles. The scripts compute every time as a
// nanosecond offset from now and every product that could pass 2^53 with
// 24-bit limbs, and Check refuses limits whose counts pass MaxCount or
// whose derived durations pass MaxDuration (about 52 days): within them,
// the scripts and package bucket agree on every field of every decision,
// run as functions and as scripts (the conformance tests check it on
// random sequences). Two differences
// remain: a state fresh at now is a new bucket (the table may reclaim it
// too; here always), and a pacer request whose slots would end more than
// about 104 days ahead is denied (package bucket: past year 2262).
//
// The lease journal is a file of its own, <state file>.leases; its layout
// is documented in journal.go (version 2; version 1 is read too).
//
// # Concurrency
//
// A Store, Leases, a Fallback, Members and a Journal are safe for
// simultaneous use by multiple goroutines.
package global
