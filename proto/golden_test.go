package proto

import (
	"bytes"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from goldenCases")

const goldenDir = "testdata/golden"

// goldenCase is one shared test vector: a whole frame, built from ops or
// results (or, for some bad_* cases, by build), and the error a reader
// must find in it, nil for none.
type goldenCase struct {
	name, desc string
	kind       Kind
	id         uint32
	ops        []Op
	results    []Result
	build      func() []byte
	want       error
	version    uint8 // the frame's version; 0 for MinVersion, which every vector before version 2 has
}

func (c *goldenCase) frame() []byte {
	if c.build != nil {
		return c.build()
	}
	b, start := BeginFrameVersion(nil, max(c.version, MinVersion), c.kind, c.id)
	for i := range c.ops {
		b = encodeOp(b, &c.ops[i])
	}
	for i := range c.results {
		b = encodeResult(b, &c.results[i])
	}
	return EndFrame(b, start, len(c.ops)+len(c.results))
}

// patched returns a build function: c's frame, changed by f.
func patched(c goldenCase, f func(b []byte) []byte) func() []byte {
	return func() []byte { return f(c.frame()) }
}

var errNames = map[error]string{
	ErrMalformed: "ErrMalformed", ErrBadVersion: "ErrBadVersion", ErrFrameTooLarge: "ErrFrameTooLarge",
	ErrBatchTooLarge: "ErrBatchTooLarge", ErrUnknownOpcode: "ErrUnknownOpcode", ErrInvalidLimit: "ErrInvalidLimit",
	ErrInvalidKey: "ErrInvalidKey", ErrTooManyItems: "ErrTooManyItems",
}

func goldenCases() []goldenCase {
	req := func(name, desc string, id uint32, ops ...Op) goldenCase {
		return goldenCase{name: name, desc: desc, kind: KindRequest, id: id, ops: ops}
	}
	resp := func(name, desc string, id uint32, rs ...Result) goldenCase {
		return goldenCase{name: name, desc: desc, kind: KindResponse, id: id, results: rs}
	}
	tb := TokenBucketLimit(10, time.Hour, 1)
	gcra := GCRALimit(4, 1, time.Second)
	acquire := item(OpAcquire, FlagStrict|FlagAt, tb, 1, t0, "login:alice")
	ping := req("ping_request", "", 2, Op{Code: OpPing})
	v3 := func(c goldenCase) goldenCase { c.version = 3; return c }
	v4 := func(c goldenCase) goldenCase { c.version = 4; return c }
	v5 := func(c goldenCase) goldenCase { c.version = 5; return c }
	v6 := func(c goldenCase) goldenCase { c.version = 6; return c }
	v7 := func(c goldenCase) goldenCase { c.version = 7; return c }
	listResult := Result{Code: OpAcquire, NLimits: 2, Bound: 1,
		Decision: Decision{Allowed: false, Remaining: 0, Limit: 1000, RetryAfter: 36000 * sec, ResetAfter: 36000 * sec, Delay: 0}}
	listResult.Limits[0] = Decision{Allowed: true, Remaining: 4, Limit: 5, RetryAfter: -1, ResetAfter: 200 * int64(time.Millisecond), Delay: 0}
	listResult.Limits[1] = Decision{Allowed: false, Remaining: 0, Limit: 1000, RetryAfter: 36000 * sec, ResetAfter: 36000 * sec, Delay: 0}
	conc := ConcurrencyLimit(10, 30*time.Second)
	multiMarks := multiResult(false, Decision{Allowed: false, Remaining: 0, Limit: 5, RetryAfter: 5 * int64(time.Millisecond), ResetAfter: 0, Delay: 0},
		Decision{Allowed: false, Remaining: 0, Limit: 10, RetryAfter: 5 * int64(time.Millisecond), ResetAfter: 0, Delay: 0})
	multiMarks.Marks[0] = Marks{Outage: OutageClosed, FailsClosed: true}
	multiMarks.Marks[1] = Marks{Outage: OutageClosed}
	bad := func(name, desc string, want error, c goldenCase, f func([]byte) []byte) goldenCase {
		c.name, c.desc, c.want = name, desc, want
		if f != nil {
			c.build = patched(c, f)
		}
		return c
	}
	return []goldenCase{
		req("hello_request", "HELLO: ask the server's version and limits.", 1, Op{Code: OpHello}),
		resp("hello_response", "HELLO result: version 1, the version-1 limits, a table of 2^20 slots of 128 bytes.", 1,
			Result{Code: OpHello, Hello: testHello}),
		req("ping_request", "PING.", 2, Op{Code: OpPing}),
		resp("ping_response", "PING result: OK, no body.", 2, Result{Code: OpPing}),
		req("acquire_request", "ACQUIRE 1 token of token_bucket max=10 refill_time=1h refill_amount=1 for key \"login:alice\", flags STRICT|AT, at 2023-11-14T22:13:20Z.", 3, acquire),
		resp("acquire_response_allowed", "ACQUIRE result, allowed: 9 of 10 tokens left, no retry, full again in 1h.", 3,
			decisionResult(OpAcquire, Decision{Allowed: true, Remaining: 9, Limit: 10, RetryAfter: -1, ResetAfter: 3600 * sec, Delay: 0})),
		resp("acquire_response_denied", "ACQUIRE result, denied: 0 of 10 left, retry in 30m, full again in 10h.", 3,
			decisionResult(OpAcquire, Decision{Allowed: false, Remaining: 0, Limit: 10, RetryAfter: 1800 * sec, ResetAfter: 36000 * sec, Delay: 0})),
		req("peek_request", "PEEK gcra burst=4 count=1 period=1s for key \"api:tenant-7\": n and at are 0.", 4,
			item(OpPeek, 0, gcra, 0, 0, "api:tenant-7")),
		resp("peek_response", "PEEK result: allowed, 4 of 5 remaining, back to fresh in 800ms.", 4,
			decisionResult(OpPeek, Decision{Allowed: true, Remaining: 4, Limit: 5, RetryAfter: -1, ResetAfter: 800 * int64(time.Millisecond), Delay: 0})),
		req("refund_request", "REFUND 3 tokens to fixed_window limit=100 window=1m for key \"upload:bob\".", 5,
			item(OpRefund, 0, FixedWindowLimit(100, time.Minute), 3, 0, "upload:bob")),
		resp("refund_response", "REFUND result: 53 of 100 remaining, the window ends in 42s.", 5,
			decisionResult(OpRefund, Decision{Allowed: true, Remaining: 53, Limit: 100, RetryAfter: -1, ResetAfter: 42 * sec, Delay: 0})),
		req("reset_request", "RESET sliding_window limit=100 window=1m for key \"search:carol\".", 6,
			item(OpReset, 0, SlidingWindowLimit(100, time.Minute), 0, 0, "search:carol")),
		resp("reset_response", "RESET result: the bucket existed.", 6, Result{Code: OpReset, Existed: true}),
		req("multi_request", "MULTI of 2 items at 2023-11-14T22:13:20Z (flag AT): 1 token of token_bucket 10/1h/1 for \"login:alice\" (STRICT), 2 of gcra 4/1/1s for \"api:tenant-7\".", 7,
			multi(FlagAt, t0, MultiItem{Flags: FlagStrict, Limit: tb, Cost: 1, Key: []byte("login:alice")}, MultiItem{Flags: 0, Limit: gcra, Cost: 2, Key: []byte("api:tenant-7")})),
		resp("multi_response", "MULTI result: allowed, so both items consumed; one decision per item.", 7,
			multiResult(true, Decision{Allowed: true, Remaining: 8, Limit: 10, RetryAfter: -1, ResetAfter: 2 * 3600 * sec, Delay: 0}, Decision{Allowed: true, Remaining: 2, Limit: 5, RetryAfter: -1, ResetAfter: 3 * sec, Delay: 0})),
		req("scan_request", "SCAN from cursor 0, up to 100 buckets whose key starts with \"login:\".", 8, scan(0, 100, "login:")),
		resp("scan_response", "SCAN result: 2 entries; continue from cursor 4096.", 8,
			scanResult(4096, entryView{TokenBucket, t0 + 2*3600*sec, "login:alice"}, entryView{TokenBucket, t0 + 3600*sec, "login:bob"})),
		req("stats_request", "STATS.", 9, Op{Code: OpStats}),
		resp("stats_response", "STATS result: 3 counters.", 9,
			statsResult(statView{"slot_count", 1 << 20}, statView{"used_slots", 3}, statView{"ops", 42})),
		resp("error_response", "An error result: the ACQUIRE of acquire_request failed with TableFull; the message is for people.", 3,
			errResult(OpAcquire, StatusTableFull, "shm: table full: no free slot for a new bucket")),
		req("batch_request", "A batch of 3 operations: ACQUIRE pacer rate=4 period=1s max_delay=2s for \"send:dave\", ACQUIRE with a negative cost, PING.", 10,
			item(OpAcquire, 0, PacerLimit(4, time.Second, 2*time.Second), 1, 0, "send:dave"),
			item(OpAcquire, 0, tb, -1, 0, "login:alice"), Op{Code: OpPing}),
		resp("batch_response", "The 3 results of batch_request, in order: a pacer decision (wait 250ms), InvalidCost for the negative cost, PING.", 10,
			decisionResult(OpAcquire, Decision{Allowed: true, Remaining: 7, Limit: 9, RetryAfter: -1, ResetAfter: 500 * int64(time.Millisecond), Delay: 250 * int64(time.Millisecond)}),
			errResult(OpAcquire, StatusInvalidCost, "engine: negative cost"), Result{Code: OpPing}),
		resp("frame_error_response", "A frame-level error, the answer to bad_version: opcode 0, count 1, the request's id; the server then closes the connection.", 11,
			errResult(0, StatusBadVersion, "proto: unsupported protocol version: version 6, this side speaks 1 to 5")),
		v3(req("lease_request", "Version 3. LEASE a slot of concurrency limit=10 lease=30s for key \"upload:erin\": n is 1, at is 0 (no flag AT: a lease is on the server's clock).", 19,
			lease(0, conc, "upload:erin"))),
		v3(resp("lease_response_allowed", "Version 3. LEASE result, allowed: 9 of 10 slots still free, the last lease held expires in 30s; the lease's id is 7, to RELEASE.", 19,
			leaseResult(Decision{Allowed: true, Remaining: 9, Limit: 10, RetryAfter: -1, ResetAfter: 30 * sec, Delay: 0}, 7))),
		v3(resp("lease_response_denied", "Version 3. LEASE result, denied: no slot free, the earliest lease held expires in 12s (a RELEASE may free one sooner); lease 0: nothing to release.", 19,
			leaseResult(Decision{Allowed: false, Remaining: 0, Limit: 10, RetryAfter: 12 * sec, ResetAfter: 30 * sec, Delay: 0}, 0))),
		v3(req("release_request", "Version 3. RELEASE lease 7 of concurrency limit=10 lease=30s for key \"upload:erin\": n holds the lease id.", 20,
			release(0, conc, 7, "upload:erin"))),
		v3(resp("release_response", "Version 3. RELEASE result: the lease was held and is free now; the decision as PEEK reports it afterwards: 10 of 10 slots free, fresh.", 20,
			releaseResult(true, Decision{Allowed: true, Remaining: 10, Limit: 10, RetryAfter: -1, ResetAfter: 0, Delay: 0}))),
		v5(resp("lease_response_outage_local", "Version 5. LEASE result of a global concurrency limit whose Redis did not answer in time, decided by its outage policy, local (this host's share: 2 of 5 slots): allowed, 1 slot of the share still free, lease 7; the decision's first byte is 0x05, allowed and policy 1 in bits 2-3.", 31,
			Result{Code: OpLease, Outage: OutageLocal, Lease: 7, Decision: Decision{Allowed: true, Remaining: 1, Limit: 2, RetryAfter: -1, ResetAfter: 30 * sec, Delay: 0}})),
		v5(resp("release_response_outage_closed", "Version 5. RELEASE result of a global concurrency limit whose Redis did not answer in time, decided by its outage policy, closed: not released (the slot stays held in Redis until its lease time); the decision's first byte is 0x0c, policy 3 in bits 2-3.", 32,
			Result{Code: OpRelease, Outage: OutageClosed, Released: false, Decision: Decision{Allowed: false, Remaining: 0, Limit: 5, RetryAfter: -1, ResetAfter: 0, Delay: 0}})),
		v3(req("peek_version_3_algorithms_request", "Version 3. A batch of 3 PEEKs showing the limits of version 3: sliding_log limit=100 window=1m, window_counters limit=100 window=1h counters=60 count_denied=true (p2 = 60 | 1<<8), and concurrency limit=10 lease=30s (PEEK works on any algorithm).", 21,
			item(OpPeek, 0, SlidingLogLimit(100, time.Minute), 0, 0, "search:carol"),
			item(OpPeek, 0, WindowCountersLimit(100, time.Hour, 60, true), 0, 0, "api:tenant-7"),
			item(OpPeek, 0, conc, 0, 0, "upload:erin"))),

		v4(req("acquire_deadline_request", "Version 4. ACQUIRE 1 token of the named limit \"login\" for key \"login:alice\" with flag DEADLINE (and NAMED): at holds the client's deadline, 2023-11-14T22:13:20.05Z; the server answers before it.", 27,
			item(OpAcquire, FlagDeadline, Named("login"), 1, t0+50*int64(time.Millisecond), "login:alice"))),
		v4(resp("acquire_response_outage_closed", "Version 4. ACQUIRE result of a global limit whose Redis did not answer in time, decided by its outage policy, closed: denied, retry in 5ms (the next probe of Redis); the first byte is 0x1c, policy 3 in bits 2-3 and bit 4, the limit fails closed.", 27,
			Result{Code: OpAcquire, Outage: OutageClosed, FailsClosed: true, Decision: Decision{Allowed: false, Remaining: 0, Limit: 1000, RetryAfter: 5 * int64(time.Millisecond), ResetAfter: 0, Delay: 0}})),
		v4(resp("acquire_response_fails_closed", "Version 4. ACQUIRE result of a global limit whose outage policy is closed, decided in Redis: allowed, 999 of 1000 left; the first byte is 0x11, allowed and bit 4: were the server not to answer a later request on this limit, the client's failure policy must deny it.", 27,
			Result{Code: OpAcquire, FailsClosed: true, Decision: Decision{Allowed: true, Remaining: 999, Limit: 1000, RetryAfter: -1, ResetAfter: 3600 * sec, Delay: 0}})),
		v4(resp("acquire_response_outage_local", "Version 4. ACQUIRE result decided by the local outage policy (this host's share of the limit, 333 of 1000): allowed, 332 left; the first byte is 0x05, allowed and policy 1.", 27,
			Result{Code: OpAcquire, Outage: OutageLocal, Decision: Decision{Allowed: true, Remaining: 332, Limit: 333, RetryAfter: -1, ResetAfter: 3600 * sec, Delay: 0}})),

		v5(req("acquire_quota_request", "Version 5. ACQUIRE 1 token of quota limit=1000 period=month tz=Europe/Paris anchor=15 for key \"api:acme\": p1 = 3 (month) | 1<<8, p2 = 15 (the anchor), and after the 25 bytes of the limit the zone, u8 length 12 and \"Europe/Paris\".", 28,
			item(OpAcquire, 0, QuotaLimit(1000, QuotaMonth, 1, "Europe/Paris", 15, 0), 1, 0, "api:acme"))),
		v6(req("register_cas_request", "Version 6. REGCAS: if the register \"gcra:login:alice\" holds t0, write t0+1s to it, to live 1s.", 30,
			register(OpRegCAS, t0, t0+sec, sec, "gcra:login:alice"))),
		v6(resp("register_cas_response", "REGCAS result: swapped; the register holds t0+1s for 1s more; the server's clock read t0+200ms.", 30,
			Result{Code: OpRegCAS, Register: Register{OK: true, Value: t0 + sec, TTL: sec, Now: t0 + 200*int64(time.Millisecond)}})),
		v6(req("register_get_request", "Version 6. REGGET of the register \"gcra:login:bob\": old, value and ttl are 0.", 31,
			register(OpRegGet, 0, 0, 0, "gcra:login:bob"))),
		v6(resp("register_get_response_absent", "REGGET result: no such register (ok 0, value 0, ttl -1); the server's clock read t0.", 31,
			Result{Code: OpRegGet, Register: Register{OK: false, Value: 0, TTL: -1, Now: t0}})),
		v7(req("acquire_all_request", "Version 7. ACQUIRE 1 token of the named limit \"login\" for key \"login:alice\" with flag ALL (and NAMED): if the name lists several limits, answer with each one's decision too.", 34,
			item(OpAcquire, FlagAll, Named("login"), 1, 0, "login:alice"))),
		v7(resp("acquire_response_limits", "Version 7. The answer to acquire_all_request, \"login\" listing token_bucket max=5 refill_time=1s and quota limit=1000 period=day: denied, nothing consumed; the decision (its first byte 0x20: denied, bit 5, the limits follow) is the list's, with the limit and retry_after of the limit that binds; then n 2, bound 1 (the quota), and each limit's decision in the list's order: the token bucket allows (4 of 5 left), the quota denies until the next day starts, in 10h.", 34,
			listResult)),
		v7(resp("multi_response_outage_closed", "Version 7. MULTI result of two global limits on one hash tag whose Redis did not answer in time, decided by the strictest of their outage policies, closed: denied, nothing consumed; each item's decision is marked as an ACQUIRE of the item would be: the first item's limit fails closed (first byte 0x1c: policy 3 in bits 2-3 and bit 4), the second's own policy is local, so it does not fail closed (first byte 0x0c: policy 3, the one that decided, without bit 4).", 36,
			multiMarks)),
		v6(resp("multi_response_outage_unmarked", "Version 6. The same MULTI answered in a frame of version 6: each decision's first byte is a boolean (0x00), without marks.", 36,
			multiResult(false, multiMarks.Decisions[:2]...))),
		bad("bad_all_in_version_6", "A version-6 ACQUIRE with flag bit 6, ALL, which is version 7's: reserved in version 6.", ErrMalformed,
			v6(req("", "", 35, item(OpAcquire, FlagAll, Named("login"), 1, 0, "login:alice"))), nil),
		bad("bad_limits_bound", "An ACQUIRE result whose list of 2 limits says limit 2 binds: the bound is an index below n.", ErrMalformed,
			v7(resp("", "", 34, listResult)), func(b []byte) []byte { b[HeaderLen+2+41+1] = 2; return b }),
		bad("bad_register_in_version_5", "A version-5 frame with a REGGET: opcode 12 is version 6's, an unknown opcode in version 5.", ErrUnknownOpcode,
			v5(req("", "", 32, register(OpRegGet, 0, 0, 0, "gcra:login:bob"))), nil),
		bad("bad_register_get_value", "A REGGET whose value is 7: REGGET and REGDEL carry old, value and ttl 0.", ErrMalformed,
			v6(req("", "", 33, register(OpRegGet, 0, 7, 0, "gcra:login:bob"))), nil),
		bad("bad_version", "A PING frame with version 8.", ErrBadVersion, req("", "", 11, Op{Code: OpPing}),
			func(b []byte) []byte { b[4] = 8; return b }),
		bad("bad_kind", "A PING frame with kind 3.", ErrMalformed, ping,
			func(b []byte) []byte { b[5] = 3; return b }),
		bad("bad_length_too_large", "A header alone whose length is MaxFrameLen+1: refused before reading the body.", ErrFrameTooLarge, ping,
			func(b []byte) []byte { b[0], b[1], b[2], b[3] = 0x01, 0x00, 0x10, 0x00; return b[:HeaderLen] }),
		bad("bad_batch_too_large", "A frame whose count is MaxBatch+1 (257).", ErrBatchTooLarge, ping,
			func(b []byte) []byte { b[6], b[7] = 0x01, 0x01; return b }),
		bad("bad_truncated_op", "An ACQUIRE whose keylen says 11 bytes but whose frame ends after 5 of them.", ErrMalformed, req("", "", 14, acquire),
			func(b []byte) []byte { return EndFrame(b[:len(b)-6], 0, 1) }),
		bad("bad_unknown_opcode", "An operation with opcode 42.", ErrUnknownOpcode, ping,
			func(b []byte) []byte { b[HeaderLen] = 42; return b }),
		bad("bad_flags", "A version-1 ACQUIRE with flag bit 4, which is reserved in version 1 (SHADOW in version 2).", ErrMalformed,
			req("", "", 16, item(OpAcquire, 16, tb, 1, 0, "login:alice")), nil),
		bad("bad_named_in_version_1", "A version-1 frame with an ACQUIRE of the named limit \"login\": NAMED (flag bit 3) is version 2's.", ErrMalformed,
			req("", "", 16, item(OpAcquire, 0, Named("login"), 1, 0, "login:alice")), nil),
		bad("bad_lease_in_version_2", "A version-2 frame with a LEASE: opcode 10 is version 3's, an unknown opcode in version 2.", ErrUnknownOpcode,
			goldenCase{kind: KindRequest, id: 22, ops: []Op{lease(0, conc, "upload:erin")}, version: 2}, nil),
		bad("bad_algorithm_in_version_2", "A version-2 frame with an ACQUIRE of sliding_log (algorithm 6), which is version 3's: an unknown algorithm in version 2.", ErrInvalidLimit,
			goldenCase{kind: KindRequest, id: 23, ops: []Op{item(OpAcquire, 0, SlidingLogLimit(100, time.Minute), 1, 0, "search:carol")}, version: 2}, nil),
		bad("bad_lease_n", "A LEASE whose n is 2: a lease takes exactly one slot.", ErrMalformed,
			v3(req("", "", 24, item(OpLease, 0, conc, 2, 0, "upload:erin"))), nil),
		bad("bad_lease_at", "A LEASE with flag AT: a lease is on the server's clock, so AT is reserved for LEASE and RELEASE.", ErrMalformed,
			v3(req("", "", 25, item(OpLease, FlagAt, conc, 1, t0, "upload:erin"))), nil),
		bad("bad_release_lease_0", "A RELEASE of lease 0, which no LEASE returns.", ErrMalformed,
			v3(req("", "", 26, Op{Code: OpRelease, Limit: conc, Key: []byte("upload:erin")})), nil),
		bad("bad_deadline_in_version_3", "A version-3 ACQUIRE with flag bit 5, DEADLINE, which is version 4's: reserved in version 3.", ErrMalformed,
			v3(req("", "", 28, item(OpAcquire, FlagDeadline, tb, 1, t0, "login:alice"))), nil),
		bad("bad_deadline_with_at", "A version-4 ACQUIRE with flags AT and DEADLINE: both would use the at field.", ErrMalformed,
			v4(req("", "", 29, item(OpAcquire, FlagAt|FlagDeadline, tb, 1, t0, "login:alice"))), nil),
		bad("bad_empty_key", "An ACQUIRE with keylen 0.", ErrInvalidKey, req("", "", 17, item(OpAcquire, 0, tb, 1, 0, "")), nil),
		bad("bad_algorithm", "An ACQUIRE whose limit has algorithm 0.", ErrInvalidLimit,
			req("", "", 18, item(OpAcquire, 0, Limit{}, 1, 0, "login:alice")), nil),
		bad("bad_multi_too_many", "A MULTI whose n is 17 (the items are not read).", ErrTooManyItems, ping,
			func(b []byte) []byte {
				m := AppendMulti(nil, 0, 0, nil)
				m[len(m)-1] = MaxMulti + 1
				return EndFrame(append(b[:HeaderLen], m...), 0, 1)
			}),
		bad("bad_trailing_bytes", "A PING frame with one byte after its only operation.", ErrMalformed, ping,
			func(b []byte) []byte { return EndFrame(append(b, 0), 0, 1) }),
		bad("bad_result_status", "A response whose result has status 17, not in the closed set.", ErrMalformed,
			resp("", "", 2, errResult(OpPing, StatusInternal, "")), func(b []byte) []byte { b[HeaderLen+1] = 17; return b }),
		bad("bad_result_bool", "An ACQUIRE result whose allowed byte is 2.", ErrMalformed,
			resp("", "", 3, decisionResult(OpAcquire, Decision{Allowed: true, Remaining: 9, Limit: 10, RetryAfter: -1, ResetAfter: 3600 * sec, Delay: 0})),
			func(b []byte) []byte { b[HeaderLen+2] = 2; return b }),
	}
}

// describe returns the .txt of a case: what it holds, what a reader must
// conclude, and every field.
func (c *goldenCase) describe() string {
	expect := "decodes without error; re-encoding gives the same bytes."
	if c.want != nil {
		expect = fmt.Sprintf("error %s (status %d %v).", errNames[c.want], StatusOf(c.want), StatusOf(c.want))
	}
	frame := c.frame()
	return fmt.Sprintf("%s: %s\nExpect: %s\nFrame: %d bytes; %s.hex holds them as hex.\n\n%s",
		c.name, c.desc, expect, len(frame), c.name, describeFrame(frame))
}

func TestGolden(t *testing.T) {
	cases := goldenCases()
	if *update {
		writeGolden(t, cases)
	}
	names := []string{"README.md"}
	if readme, err := os.ReadFile(filepath.Join(goldenDir, "README.md")); err != nil || string(readme) != goldenReadme(cases) {
		t.Errorf("%s/README.md is stale (%v): run with -update", goldenDir, err)
	}
	for _, c := range cases {
		names = append(names, c.name+".hex", c.name+".txt")
		t.Run(c.name, func(t *testing.T) {
			text, err := os.ReadFile(filepath.Join(goldenDir, c.name+".hex"))
			if err != nil {
				t.Fatalf("%v (run go test ./proto -run TestGolden -update)", err)
			}
			got, err := hex.DecodeString(strings.Join(strings.Fields(string(text)), ""))
			if err != nil {
				t.Fatal(err)
			}
			if want := c.frame(); !bytes.Equal(got, want) {
				t.Fatalf("the encoders no longer produce the vector:\n got %x\nfile %x", want, got)
			}
			if desc, err := os.ReadFile(filepath.Join(goldenDir, c.name+".txt")); err != nil || string(desc) != c.describe() {
				t.Fatalf("%s.txt is stale (%v): run with -update", c.name, err)
			}
			h, ops, rs, err := decodeAll(got)
			checkErr(t, err, c.want)
			if c.want != nil {
				return
			}
			if h.Kind != c.kind || h.ID != c.id || int(h.Count) != len(c.ops)+len(c.results) {
				t.Fatalf("header %+v", h)
			}
			for i := range c.ops {
				if g, w := viewOp(&ops[i]), viewOp(&c.ops[i]); !reflect.DeepEqual(g, w) {
					t.Fatalf("op %d: %+v, want %+v", i, g, w)
				}
			}
			for i := range c.results {
				if g, w := viewResult(&rs[i]), viewResult(&c.results[i]); !reflect.DeepEqual(g, w) {
					t.Fatalf("result %d: %+v, want %+v", i, g, w)
				}
			}
		})
	}
	// Every file in the directory belongs to a case.
	entries, err := os.ReadDir(goldenDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !slices.Contains(names, e.Name()) {
			t.Errorf("%s/%s belongs to no case", goldenDir, e.Name())
		}
	}
}

// writeGolden regenerates the directory: vectors are never edited by hand.
func writeGolden(t *testing.T, cases []goldenCase) {
	if err := os.RemoveAll(goldenDir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(goldenDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(goldenDir, "README.md"), []byte(goldenReadme(cases)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		var hexText strings.Builder
		frame := c.frame()
		for i := 0; i < len(frame); i += 32 {
			hexText.WriteString(hex.EncodeToString(frame[i:min(i+32, len(frame))]) + "\n")
		}
		for name, data := range map[string]string{c.name + ".hex": hexText.String(), c.name + ".txt": c.describe()} {
			if err := os.WriteFile(filepath.Join(goldenDir, name), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// goldenReadme returns the directory's index.
func goldenReadme(cases []goldenCase) string {
	var b strings.Builder
	b.WriteString(`# Golden frames

Shared test vectors of every Sluice client and server, protocol versions 1 to 7,
each frame in the version its header's version byte says (the specification is
the package documentation of proto, proto/doc.go).

- NAME.hex: one whole frame, header included, as lowercase hex; whitespace is
  not significant.
- NAME.txt: what the frame holds, what a reader must conclude, and every field
  with its offset, size, value and bytes.

A conforming reader decodes every frame not named bad_* to the values its .txt
lists and re-encodes it to the same bytes; for each bad_* frame it reports the
error its .txt names (the Go sentinel, and the status a server answers with).

Generated by ` + "`go test ./proto -run TestGolden -update`" + ` from goldenCases in
proto/golden_test.go: change the cases, never these files.

| case | expect | holds |
|---|---|---|
`)
	for _, c := range cases {
		expect := "ok"
		if c.want != nil {
			expect = errNames[c.want]
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", c.name, expect, strings.ReplaceAll(c.desc, "|", "\\|"))
	}
	return b.String()
}
