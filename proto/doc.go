// Package proto is Sluice's native wire format: the binary frames a client
// and the sidecar exchange over a Unix stream socket, and the limit spec,
// the textual form of a limit used by the CLI, configuration, logs and
// clients. It encodes and decodes bytes and does no I/O.
//
// Encoders are append-style: AppendItem(dst, ...) returns dst extended by
// one operation. BeginFrame and EndFrame wrap a batch of them in a frame.
// Decoders (SplitFrame, DecodeOp, DecodeResult, NextScanEntry, NextStat)
// allocate nothing: the slices they return alias their input and are valid
// until the buffer is reused. They check every length before using it and
// return an error wrapping a sentinel of errors.go for any malformed bytes;
// they never panic. Encoders trust their caller and panic only on values a
// field cannot hold.
//
// # Format
//
// This section is the protocol's specification, version 7: an
// implementation in another language needs nothing else. Version 7 is
// version 6 with flag bit 6, ALL, of ACQUIRE, PEEK and REFUND: a named
// limit that lists several limits is answered with each one's decision
// too (see Lists below), and a MULTI's decisions carry the outage and
// fails-closed marks (see MULTI below); nothing else of version 6
// changed. Version 6 is
// version 5 with registers: four more operations (12 REGGET, 13 REGSET,
// 14 REGCAS, 15 REGDEL) on a small value with an expiry per key (see
// Registers below); nothing of version 5 changed. Version 5 is
// version 4 with one more algorithm, 9 quota, whose limit field carries a
// time zone after its three parameters (see below), and the outage mark
// (bits 2-3 of a decision's first byte) on the decisions of LEASE and
// RELEASE too. Version 4 is
// version 3 with the client's deadline (flag bit 5, DEADLINE, of ACQUIRE,
// PEEK, REFUND and RESET), the mark of a decision that a global limit's
// outage policy made (bits 2-3 of a decision's first byte) and the mark of
// a limit that fails closed (bit 4). Version 3 is
// version 2 with three more algorithms (6 sliding_log, 7 window_counters,
// 8 concurrency) and the operations that lease a concurrency limit's slots
// (10 LEASE, 11 RELEASE). Version 2 is version 1 with named limits (flag
// bit 3, NAMED, is reserved in version 1) and shadowing (flag bit 4,
// SHADOW). A server speaks all seven and answers each request frame in its
// version, so clients of versions 1 to 6 keep working unchanged: in a
// frame of version 1 or 2, opcodes 10 and 11 are unknown opcodes and
// algorithms 6 to 8 unknown algorithms, and before version 5 algorithm 9
// is unknown, and before version 6 opcodes 12 to 15 are unknown opcodes,
// exactly as any other value outside that version's sets; flag
// bit 5 is reserved before version 4 and bit 6 before version 7, and a server never marks a decision
// of an older version's frame. A client
// learns the server's version from HELLO before it writes frames of a
// newer version than the server may speak. The files in testdata/golden are byte-exact
// examples, each with a field-by-field description.
//
// Conventions. All integers are little-endian. u8, u16, u32 and u64 are
// unsigned; i64 is a two's complement int64. Times are i64 Unix
// nanoseconds and durations i64 nanoseconds; -1 means "not applicable". A
// boolean is a u8 that is 0 or 1; any other value is malformed. A key is 1
// to MaxKeyLen arbitrary bytes. Offsets are in bytes from the start of the
// structure they describe.
//
// Frames. Every message, in either direction, is a frame:
//
//	+-----------+-----------+--------+-----------+-----------+---------------------+
//	| length    | version   | kind   | count     | id        | body                |
//	| u32       | u8        | u8     | u16       | u32       | count operations    |
//	|           |           |        |           |           | or count results    |
//	+-----------+-----------+--------+-----------+-----------+---------------------+
//	0           4           5        6           8           12 = HeaderLen
//
//	offset size field
//	0      4    length   bytes after this field: 8 + body length; 8 <= length <= MaxFrameLen
//	4      1    version  1 to 7 (Version); a response has its request's version
//	5      1    kind     1 request (client to server), 2 response (server to client)
//	6      2    count    operations (request) or results (response) in the body: 1..MaxBatch
//	8      4    id       chosen by the client; a response carries its request's id
//	12     ...  body     count operations, or count results, back to back, no padding
//
// The limits, the same in every version (HELLO reports them too):
//
//	HeaderLen     12        bytes of the header, length field included
//	MaxFrameLen   1048576   largest length field (1 MiB); a whole frame is at most 4+MaxFrameLen bytes
//	MaxBatch      256       operations per request frame, results per response frame
//	MaxKeyLen     1024      bytes of a key or a scan prefix
//	MaxMulti      16        items of a MULTI
//	MaxMessageLen 1024      bytes of an error message
//	MaxScanCount  1000      the largest count of a SCAN
//
// Responses obey the same limits as requests. A reader takes 12 bytes, checks the version, the kind, the length (before
// allocating or reading the body) and the count, then takes length-8 more
// bytes. A client may pipeline: send any number of frames without waiting.
// The server answers each request frame with one response frame of the same
// id, in the order the requests arrived; its results are in the order of
// the operations, one each. Ids need not be unique; a client that matches
// responses by order can send 0. Example, a PING and its answer (id 1):
//
//	request:  09000000 07 01 0100 01000000 | 02
//	response: 0a000000 07 02 0100 01000000 | 02 00
//
// Operations. An operation is an opcode u8 and its body:
//
//	opcode      body              result body (status OK)
//	1 HELLO     empty             the server's version and limits
//	2 PING      empty             empty
//	3 ACQUIRE   item              decision: decide for cost n and, if allowed, consume n
//	4 PEEK      item              the bucket as it stands, changing and creating nothing; n is ignored
//	5 REFUND    item              the bucket, as PEEK reports it, after giving n tokens back (capped at the limit's maximum)
//	6 RESET     item              existed u8: forget the bucket; n is ignored
//	7 MULTI     multi             up to MaxMulti acquires, all or nothing
//	8 SCAN      scan              buckets whose key starts with a prefix
//	9 STATS     empty             the server's counters
//	10 LEASE    item              version 3: decision and lease id: take one slot of a concurrency limit
//	11 RELEASE  item              version 3: released u8 and decision: give a lease's slot back
//	12 REGGET   register          version 6: the register, if it exists, and the server's clock
//	13 REGSET   register          version 6: set a register that does not exist
//	14 REGCAS   register          version 6: swap a register's value if it holds old
//	15 REGDEL   register          version 6: delete a register
//
// PEEK's decision describes the bucket as it stands: remaining and
// reset_after as they are now (remaining is what RL.GET reports), and
// allowed, retry_after and delay as a request of cost 1 would get them.
// Any other opcode, LEASE and RELEASE in a frame of version 1 or 2, and
// REGGET to REGDEL in a frame of versions 1 to 5, is rejected (status
// UnknownOpcode). The item body (offsets from the opcode
// byte; total 45 + keylen bytes):
//
//	offset size field
//	0      1    opcode   3, 4, 5, 6, 10 or 11
//	1      1    flags    bit 0 STRICT, bit 1 SMYTE, bit 2 AT, bit 3 NAMED and bit 4 SHADOW (version 2),
//	                     bit 5 DEADLINE (version 4), bit 6 ALL (version 7); bit 7 must be 0 (bits 6-7
//	                     in versions 4 to 6, bits 5-7 in versions 2 and 3, bits 3-7 in version 1).
//	                     LEASE and RELEASE: bit 3 NAMED only, the
//	                     others must be 0. AT and DEADLINE together are Malformed
//	2      25   limit    see below (with NAMED: the limit's name instead, 1 + namelen bytes,
//	                     and every later offset moves by namelen - 24)
//	27     8    n        i64: the cost (ACQUIRE, >= 0; 0 peeks), the amount (REFUND); 0 for PEEK and RESET;
//	                     1 for LEASE (any other value is Malformed); for RELEASE, the lease id, a u64
//	                     that is not 0 (0 is Malformed), its 64 bits stored as they are
//	35     8    at       i64: the request time, read only with AT (else the server's clock); with
//	                     DEADLINE the client's deadline instead; else 0. A time decides this
//	                     request only, and must lie in [0, 2190-01-01T00:00:00Z]
//	                     (6942585600000000000): the server answers Malformed for a time outside.
//	                     LEASE and RELEASE cannot set AT (a lease is about real time): 0
//	43     2    keylen   u16: 1..MaxKeyLen
//	45     k    key
//
// STRICT: a request that leaves a token_bucket at 0, or is denied, restarts
// its refill clock. SMYTE: smyte/ratelimit compatibility for token_bucket: a
// denial drains the bucket to 0 and remaining is the count before the
// deduction. The other algorithms ignore both, and LEASE and RELEASE may
// not set them. DEADLINE (version 4): at is the moment, Unix ns on the
// host's clock (client and server share it), at which the client stops
// waiting for this answer. A local limit's decision takes microseconds and
// ignores it, unless its bucket's lock is kept by another process (a
// stopped direct client): it then waits no later than the deadline before
// it is answered Contended; a global limit's request (one a server decides in Redis) is
// answered before it: if Redis has not answered by then, less a margin of
// a quarter of the time the client gave (1 ms to 20 ms), the limit's
// outage policy decides it, and the decision says so. A request without DEADLINE
// is answered within 4/5 of the server's own Redis timeout. SHADOW (ACQUIRE): decide and consume as usual, but answer a
// denial as allowed and shadow-denied (the decision's first byte is 3), as
// a shadow limit's are; the server counts it. NAMED: the limit field holds
// the name of a limit the server's configuration defines (its config file),
// as a u8 length (1..MaxNameLen = 64) and that many bytes: ASCII letters,
// digits, '_', '-' and '.', starting with a letter. A name the server does
// not define is answered InvalidLimit. Without NAMED, a limit (25 bytes) is
// an algorithm and three parameters; a parameter an algorithm does not use
// is 0. A quota's limit (version 5) is 26 + tzlen bytes: the 25, then its
// time zone, and every later offset moves by 1 + tzlen:
//
//	offset size field
//	0      1    algorithm  1..9 below (1..5 in versions 1 and 2, 1..8 in 3 and 4); any other value is rejected (InvalidLimit)
//	1      8    p0         i64
//	9      8    p1         i64
//	17     8    p2         i64
//	25     1    tzlen      quota only: u8, 0..64 (MaxZoneLen; more is InvalidLimit); 0 means UTC
//	26     z    tz         quota only: an IANA time zone name, "Europe/Paris"
//
//	algorithm            p0       p1               p2
//	1 token_bucket       max      refill_time ns   refill_amount
//	2 gcra               burst    count            period ns
//	3 fixed_window       limit    window ns        0
//	4 sliding_window     limit    window ns        0
//	5 pacer              rate     period ns        max_delay ns
//	6 sliding_log        limit    window ns        0                                     (version 3)
//	7 window_counters    limit    window ns        bits 0-7 counters, bit 8 count_denied (version 3)
//	8 concurrency        limit    lease ns         0                                     (version 3)
//	9 quota              limit    period           bits 0-7 anchor, bits 8-15 week_start (version 5)
//
// sliding_log counts limit tokens over any window exactly, from a log of
// the requests' times. window_counters counts them over any window in
// counters sub-windows (the server accepts 1 to 64); with count_denied a
// denied request counts too. Its p2 packs both, counters | count_denied<<8;
// bits 9-63 must be 0. concurrency holds at most limit leases at once, each
// until RELEASE gives its slot back or, failing that, until lease after it
// was taken: a lease a client never releases (it crashed) expires.
//
// quota counts limit tokens per period of a calendar in a time zone. Its
// p1 is the period: the unit in bits 0-7 (1 day, 2 week, 3 month, 4 year),
// how many units one period spans in bits 8-63 (the server accepts periods
// of up to about 68 years). Its p2: the anchor, the day of the month on
// which months and years start (1-31; 0 means 1; a month shorter than the
// anchor starts on its last day), in bits 0-7, only for months and years;
// the first day of a week, in days after Monday (0 Monday .. 6 Sunday), in
// bits 8-15, only for weeks; bits 16-63 are 0. A year starts on the
// anchor's day of January. Periods of several units count from 1970: days
// from 1970-01-01, weeks from the week holding it, months from January
// 1970 (3month: January, April, July, October). A period starts at the
// first instant of its local day in the zone (midnight, or where a
// transition that skips midnight lands), so a day lasts 23 or 25 hours
// across a DST change. The server refuses a zone it does not know
// (InvalidLimit); it knows every name of the IANA database it was built
// with. A quota decision: remaining the tokens left in the period, limit
// the limit, retry_after (denied) the time until the next period starts,
// reset_after the same once the period has counted anything (0 while it is
// untouched), delay 0.
//
// The codec checks only that the algorithm is one of the frame's version;
// the server validates the parameters (StatusInvalidLimit; a
// window_counters p2 with a bit above 8 set included) and the cost
// (StatusInvalidCost).
//
// Concurrency limits (version 3) are taken and given back with LEASE and
// RELEASE, on the server's clock. A LEASE decides as an ACQUIRE of cost 1
// and, if allowed, holds one slot under a new lease id: 64 random bits,
// never 0, that tell nothing of any other lease's id (a client must not
// expect them to be ordered; servers before this rule drew them from a
// counter). A RELEASE of a lease still held frees its slot. A RELEASE is
// served from the connection that took the lease, or from a peer of the
// same uid (SO_PEERCRED) on another connection; a peer of another uid is
// refused with status Denied, and the slot stays held. A lease that no
// connection of this server holds (taken through an earlier server process,
// or expired) is released by whoever brings its id. RESET stays the
// override: it forgets every lease of the key, whoever holds them. Denied
// is a status of every version, so this rule needs no new version: a
// client of version 3 reads the refusal as it reads any error result. Only a concurrency limit may be
// leased or released: a LEASE or RELEASE of any other algorithm (or a named
// limit that is not a concurrency limit) is answered InvalidLimit, with a
// message saying so (the codec cannot tell: a name hides the algorithm).
// PEEK reports a concurrency limit as it stands (remaining: the slots
// free) and RESET forgets every lease of it; ACQUIRE, REFUND and a MULTI item of a
// concurrency limit are answered InvalidLimit ("concurrency limits take
// LEASE and RELEASE"). A RELEASE names the limit and key its LEASE named:
// a lease id released under another limit or key is not held there
// (released 0). A concurrency decision: remaining the slots still free,
// limit the limit, retry_after (denied) until the earliest held lease
// expires (a RELEASE may free a slot sooner), reset_after until the last
// held lease expires (0 when none is held), delay 0. The server gives back
// the leases a connection holds when the connection closes (its client
// went away), but not when the server itself stops: they stay in its state
// file, to be released through the next server or to expire. A connection
// holding leases is not closed as idle before they expire; it may hold
// 4096 at once, and a LEASE beyond that is answered Busy.
//
// A MULTI is all-or-nothing across its items: allowed only if every item is
// allowed, and then every item consumes; if any is denied, nothing changes.
// Its body (total 11 + the items):
//
//	offset size field
//	0      1    opcode   7
//	1      1    flags    bit 2 AT only; the others must be 0
//	2      8    at       i64: the time of every item, read only with AT; else 0
//	10     1    n        u8: items, 1..MaxMulti (more is TooManyItems)
//	11     ...  n items, each 36 + keylen bytes:
//	            0   1   flags   bit 0 STRICT, bit 1 SMYTE, bit 3 NAMED (version 2); the others must be 0
//	            1   25  limit   (with NAMED: 1 + namelen bytes, the name, as for an item)
//	            26  8   cost    i64
//	            34  2   keylen  u16: 1..MaxKeyLen
//	            36  k   key
//
// A SCAN lists buckets whose key starts with prefix, without blocking the
// table. Start with cursor 0 and pass each result's next until it is 0. It
// needs a table that keeps keys inline (slot size 128 or 256, keeping keys
// of up to 64 or 192 bytes), else StatusUnsupported; a bucket whose key is
// longer than its slot keeps is not listed. Its body (total 13 + prefixlen):
//
//	offset size field
//	0      1    opcode     8
//	1      8    cursor     u64: 0 to start, then the previous result's next
//	9      2    count      u16: the most entries to return, 1..MaxScanCount
//	11     2    prefixlen  u16: 0..MaxKeyLen (0 lists every bucket)
//	13     p    prefix
//
// Registers (version 6). A register is an i64 value under a key, with an
// expiry: the storage of a rate limiter that runs its algorithm in the
// client and keeps its state in the server, such as a GCRA's theoretical
// arrival time, read and written back with compare-and-swap. The server
// keeps registers in its table as it keeps buckets (a register takes one
// slot, and a register and a bucket of the same key are apart), decides
// each operation atomically, under the slot's lock, against every other
// process deciding in the table, and decides on its own clock, which it
// reports: a register expires ttl after it was last written, and its slot
// is then reclaimable by any bucket or register, as an idle bucket's is.
// Expired, a register does not exist for any operation. A register whose
// slot the server found torn after a crash does not exist either. SCAN
// does not list registers. The four operations share one body (total 28 +
// keylen bytes):
//
//	offset size field
//	0      1    opcode   12, 13, 14 or 15
//	1      1    flags    0; any other value is Malformed
//	2      8    old      i64: REGCAS: the value the register must hold; else 0 (Malformed otherwise)
//	10     8    value    i64: REGSET, REGCAS: the value to write; REGGET, REGDEL: 0 (Malformed otherwise)
//	18     8    ttl      i64 ns: REGSET, REGCAS: how long the written register lives, 1 to
//	                     2^31 s (2147483648000000000; else the server answers InvalidCost);
//	                     REGGET, REGDEL: 0 (Malformed otherwise)
//	26     2    keylen   u16: 1..MaxKeyLen
//	28     k    key
//
// REGGET reads the register. REGSET writes value, to expire ttl from now,
// if the register does not exist; a register that exists is left as it
// is. REGCAS writes value, to expire ttl from now, if the register exists
// and holds old; otherwise it changes nothing (a register that does not
// exist is never swapped). REGDEL deletes the register. Only REGSET takes
// a slot (TableFull if none is free or reclaimable).
//
// Results. A result is the opcode u8 of its operation, a status u8, then a
// body. If the status is not 0 (OK) the body is the same for every opcode
// (total 4 + msglen):
//
//	offset size field
//	0      1    opcode   the operation's opcode byte, even if unknown; 0 for a frame-level error
//	1      1    status   1..16, see Status codes
//	2      2    msglen   u16: 0..MaxMessageLen
//	4      m    message  UTF-8 for people; do not parse it
//
// If the status is OK, the body depends on the opcode. HELLO (total 22):
//
//	offset size field
//	2      1    version    u8: the newest protocol version the server speaks
//	3      4    maxFrame   u32: MaxFrameLen
//	7      2    maxBatch   u16: MaxBatch
//	9      2    maxKey     u16: MaxKeyLen
//	11     1    maxMulti   u8: MaxMulti
//	12     8    slotCount  u64: slots in the table, the most buckets it holds
//	20     2    slotSize   u16: bytes per slot; 128 or 256 keep keys inline (SCAN)
//
// PING: no body (total 2). RESET: existed, a boolean u8 at offset 2 (total
// 3). ACQUIRE, PEEK and REFUND: a decision at offset 2 (total 43). A
// decision is 41 bytes:
//
//	offset size field
//	0      1    allowed      bit 0: the request may proceed (pacer: after delay). Version 2, ACQUIRE
//	                         only: bit 1, shadow-denied (a shadow limit or SHADOW answered a denial
//	                         as allowed; bit 0 is then set). Version 4, ACQUIRE, PEEK and REFUND:
//	                         bits 2-3, the outage policy that made the decision because Redis did
//	                         not answer a global limit's request in time: 0 none (the limit's own
//	                         decision), 1 local (this host's share), 2 open, 3 closed. Version 4,
//	                         ACQUIRE, PEEK and REFUND: bit 4, fails closed: the limit is a global
//	                         limit whose outage policy is closed, set on each of its decisions,
//	                         whoever made it (see below). Version 5, LEASE and RELEASE: bits
//	                         2-3 as well (bit 4 stays 0). Version 7, ACQUIRE, PEEK and
//	                         REFUND: bit 5, the decisions of a list's limits follow (see Lists
//	                         below). Version 7, MULTI: bits 2-3 and 4 as well (bit 5 stays 0; see
//	                         MULTI below). Bits 6-7 are 0 (bit 5 too before version 7); in other
//	                         results (a list's limits; MULTI before version 7; LEASE and RELEASE
//	                         before version 5) the byte is a boolean
//	1      8    remaining    i64: cost-1 requests still allowed now (after this request, if it took any), 0..limit
//	9      8    limit        i64: the largest remaining can be
//	17     8    retry_after  i64 ns until this request would be allowed; -1 if allowed or never
//	25     8    reset_after  i64 ns until the bucket is back to its fresh state; 0 if fresh
//	33     8    delay        i64 ns to wait before acting (pacer); 0 for the other algorithms
//
// Fails closed (bit 4). A client gives up on a request at its deadline and
// then decides by its own failure policy, which may admit (fail open). A
// server answers a global limit's request before the deadline, but a host
// may stop the server or the client for longer than the margin. So the
// server sets bit 4 on every decision (ACQUIRE, PEEK, REFUND; frames of
// version 4; MULTI items, frames of version 7) of a named global limit
// whose outage policy is closed, and a
// client remembers, per limit name, what the last decision it received
// said: while the last said the limit fails closed, the client's failure
// policy denies the name's requests the server does not answer, whatever
// the policy would do otherwise (an application that asked for an error
// still gets one). A decision without the bit (the configuration changed)
// makes the client forget it; before a name's first decision reaches it, a
// client knows nothing of the name. A client that knows the server speaks
// version 4 sends its requests on named limits in version-4 frames, so
// that their answers carry the bit.
//
// LEASE (version 3; total 51):
//
//	offset size field
//	2      41   decision   as an ACQUIRE of cost 1 gets it (allowed is 0 or 1: a lease is never shadowed)
//	43     8    lease      u64: the lease's id when allowed, never 0; 0 when denied (nothing to release)
//
// RELEASE (version 3; total 44):
//
//	offset size field
//	2      1    released   boolean: 1 if the lease was held and its slot is free now; 0 if the
//	                       server holds no such lease (unknown, already released, or expired).
//	                       A lease held by a peer of another uid is not released: status Denied
//	3      41   decision   the limit as PEEK reports it afterwards
//
// REGGET, REGSET, REGCAS and REGDEL (version 6; total 27):
//
//	offset size field
//	2      1    ok         boolean: REGGET: the register exists; REGSET: it was set; REGCAS: it
//	                       was swapped; REGDEL: it existed (and is deleted now)
//	3      8    value      i64: the register's value after the operation; 0 if it does not exist
//	11     8    ttl        i64 ns until it expires after the operation; -1 if it does not exist
//	                       (any other negative value is Malformed)
//	19     8    now        i64: the server's clock, Unix ns, when it decided
//
// Lists (version 7). A named limit may list several limits ("5 per second
// and 1,000 per day"); the server decides an ACQUIRE on it all or nothing,
// as a MULTI of the limits on the one key, and applies a PEEK, REFUND or
// RESET to each. Its decision is their combination: allowed if each
// allows; the limit and retry_after of the limit that binds (the denied
// one that allows last, one that never allows first; if all allow, the one
// with the least remaining; the first of equals), the least remaining of
// all, the largest reset_after and delay. With flag ALL, an ACQUIRE, PEEK
// or REFUND on such a name is answered with each limit's decision too:
// bit 5 of the decision's first byte is set, and after the 41 bytes of the
// decision come (total 45 + 41n):
//
//	offset size field
//	43     1    n          u8: the limits of the list, 1..MaxMulti
//	44     1    bound      u8: the index of the limit that binds, below n: the decision above has its limit and retry_after
//	45     41n  limits     one decision per limit, in the list's order; each first byte a boolean
//
// Each limit's decision is the one MULTI would report for it as an item
// (a shadowed ACQUIRE shows the denials the combined decision answered as
// allowed). A name that is one limit, or a limit given by its parameters,
// is answered as without ALL (bit 5 clear): its decision is the only one.
// RESET ignores ALL. A server sets bit 5 only in answer to ALL, so a
// client of version 6 or older never sees it. A client that knows the
// server speaks version 7 sends ALL on every named ACQUIRE, PEEK and
// REFUND whose policies it reports (the RateLimit header fields list each
// limit of a list): the answer costs 43 + 41n bytes more only for a list.
//
// A REGSET that did not set and a REGCAS that did not swap report the
// register as it stands, so a client learns the value it lost to without
// another REGGET.
//
// MULTI (total 4 + 41n):
//
//	offset size field
//	2      1    allowed    boolean: every item was allowed and consumed
//	3      1    n          u8: decisions, 1..MaxMulti, one per item in the request's order
//	4      41n  decisions  each first byte a boolean before version 7; marked in version 7
//
// In a frame of version 7, each item's decision carries the marks an
// ACQUIRE of the item would in a frame of version 7: bits 2-3, the outage
// policy that made the decision (the same for every item: when Redis does
// not answer in time, a MULTI of global limits is decided by the strictest
// of its items' policies, closed before local before open), and bit 4, set
// when the item is a named global limit whose outage policy is closed. A
// client learns from them, per item name, as from an ACQUIRE's decision
// (see Fails closed). Bits 1 and 5-7 stay 0. In frames of versions 1 to 6
// the byte is a boolean.
//
// SCAN (total 12 + the entries). The server returns at most count
// entries, and fewer (possibly none) when it stopped early to answer
// quickly or to keep the response within MaxFrameLen; next = 0 only when
// the scan is complete. Buckets created or moved during a scan may be
// missed or listed twice.
//
//	offset size field
//	2      8    next       u64: the cursor to continue from; 0 when the scan is complete
//	10     2    n          u16: entries, 0..MaxScanCount
//	12     ...  n entries, each 11 + keylen bytes:
//	            0   1   algorithm  u8: 1..9; in a frame of version 1 or 2 the server leaves
//	                                   out buckets of algorithms 6-9, in 3 or 4 of algorithm 9,
//	                                   which that version lacks
//	            1   8   fresh_at   i64: when the bucket is back to its fresh state (reclaimable)
//	            9   2   keylen     u16: 1..MaxKeyLen
//	            11  k   key
//
// STATS (total 4 + the counters). Names are ASCII snake_case, 1..255 bytes;
// the set of names is the server's and may change without a version.
//
//	offset size field
//	2      2    n          u16: counters
//	4      ...  n counters, each 9 + namelen bytes:
//	            0        1  namelen  u8: 1..255
//	            1        l  name
//	            1+l      8  value    u64
//
// Status codes. A closed set: a value above 16 is malformed. Status.Err
// maps each to an exported error (StatusTableFull to ErrStatusTableFull),
// and StatusOf maps errors back.
//
//	0  OK             success; the body is the opcode's
//	1  Malformed      bad frame or operation bytes: truncated, reserved flag bits, a count out of range
//	2  BadVersion     the frame's version is not one the server speaks
//	3  FrameTooLarge  the length field is above MaxFrameLen
//	4  BatchTooLarge  the count field is above MaxBatch
//	5  UnknownOpcode  an opcode the frame's version does not define
//	6  InvalidLimit   unknown algorithm, parameters the algorithm rejects, a limit the operation does not take
//	7  InvalidKey     a key of 0 or more than MaxKeyLen bytes, or a prefix above MaxKeyLen
//	8  InvalidCost    a negative cost or refund amount, or a register's ttl out of range
//	9  TableFull      no free slot for a new bucket; existing buckets still work
//	10 TooManyItems   a MULTI of more than MaxMulti items
//	11 Contended      the slots could not be locked; retry: a MULTI's kept being reclaimed, or
//	                  another process (a direct client) kept one locked past the server's lock
//	                  wait; the message then names it ("the bucket is locked by process 1234,
//	                  which has held it for at least 1s: ..."). Any operation on buckets may
//	                  get it; the operation changed nothing
//	12 Unsupported    not possible on this server (SCAN on a table without inline keys)
//	13 ShuttingDown   the server is stopping; reconnect later
//	14 Internal       a server bug or I/O failure
//	15 Busy           the connection limit is reached
//	16 Denied         the peer's uid or gid is not allowed; for RELEASE, the lease is held by a
//	                  connection of another uid
//
// Errors and the connection. An operation that decodes but fails (the
// server rejects its limit's parameters or its cost, the table is full, a
// MULTI is contended, a SCAN is unsupported, ...) gets an error result in
// its place, and the connection goes on. Bytes the server cannot trust
// close the connection after the server's answer:
//
//   - A frame whose header fails its checks (version, kind, length, count),
//     or a response frame sent to the server, is answered by a response
//     frame with the request's id (as read), count 1 and one error result
//     of opcode 0 (BadVersion, Malformed, FrameTooLarge or BatchTooLarge).
//   - An operation the codec rejects (Malformed, UnknownOpcode, an
//     algorithm byte outside the frame version's as InvalidLimit, a key
//     length as InvalidKey, TooManyItems) hides where the next one starts: it and
//     every later operation of the frame are answered with its error
//     result; the earlier ones are answered normally.
//   - Bytes after the last operation of a frame make it malformed; its
//     operations are answered.
//
// Busy and Denied arrive unsolicited, as the first and only frame of a
// connection, with id 0, count 1 and opcode 0. A client fails every
// outstanding request when it receives a frame-level error or when the
// connection closes, and closes the connection itself on a response it
// cannot decode.
//
// Versioning. The version byte names everything above: layouts, opcodes,
// flag bits, algorithms, statuses, limits. Any change a version-1 peer
// would misread takes a new version; nothing is optional or negotiated
// within a version (only the STATS names may change). Two things stay the
// same in every version, so that peers of different versions can always
// tell each other so: the 12-byte header, and the layout of an error
// result. A server answers a frame of a version it does not speak with a
// frame-level BadVersion error in a frame of the oldest version it speaks, then closes;
// a client learns the server's version from that frame or from HELLO. A
// server may speak several versions, answering each frame in its version.
//
// # Limit spec
//
// A limit's textual form, used by the CLI, configuration, logs and both
// clients, is the algorithm's name, a colon, and comma-separated
// name=value parameters, with no spaces:
//
//	token_bucket:max=10,refill_time=1h,refill_amount=1
//	gcra:burst=4,count=1,period=1s
//	fixed_window:limit=100,window=1m
//	sliding_window:limit=100,window=1m
//	pacer:rate=4,period=1s,max_delay=2s
//	sliding_log:limit=100,window=1m
//	window_counters:limit=100,window=1h,counters=60,count_denied=true
//	concurrency:limit=10,lease=30s
//	quota:limit=1000,period=month,tz=Europe/Paris,anchor=15
//
// The parameters are those of the wire, by name: token_bucket max,
// refill_time, refill_amount; gcra burst, count, period; fixed_window,
// sliding_window and sliding_log limit, window; pacer rate, period,
// max_delay; window_counters limit, window, counters, count_denied (the
// two parts of p2); concurrency limit, lease; quota limit, period, tz,
// anchor, week_start. They may come in any order,
// each at most once; all are required except token_bucket's
// refill_amount, which defaults to max, window_counters' counters and
// count_denied, which default to 60 and false, and quota's tz, anchor and
// week_start, which default to UTC, the 1st and monday. Names are lower
// case. A quota's period is a unit, day, week, month or year, after an
// optional decimal multiple ("2week", "3month"); tz is a zone's name (1 to
// 64 ASCII letters, digits and '/', '_', '-', '+', '.'; "UTC" is the
// default, and the wire carries it as tzlen 0); week_start is monday,
// tuesday, ... or sunday; anchor a decimal integer.
// refill_time, window, period, max_delay and lease are durations: a Go
// duration (time.ParseDuration: decimal numbers with units ns, us or µs,
// ms, s, m, h, in sequence: "1h30m", "1.5s", "250ms", "10us") with one more
// unit, d for 24 hours ("1d", "7d", "1d12h"; ParseDuration), or a bare
// integer of nanoseconds. count_denied is true or false. The others are
// decimal integers; counters is at most 255, what its 8 bits hold. No value
// may be negative. ParseLimit checks the syntax only, not whether the
// server will accept the values (counters 0, or above 64, parses).
//
// The canonical form (Limit.String) lists every parameter in wire order,
// refill_amount and counters included, count_denied only when true,
// a quota's tz, anchor and week_start only when not their defaults, its
// period without a multiple of 1,
// durations as time.Duration.String writes them ("1h0m0s", "1.5s", "10µs"
// with U+00B5, "0s"); ParseLimit reads it back to the same Limit.
// testdata/limits.txt holds canonical, other and invalid specs with their
// wire forms and errors, for other implementations to check against.
//
// A spec without a colon that is not an algorithm's name is the name of a
// limit the sidecar's configuration defines ("login"): ParseLimit returns
// Named(name), which the wire carries with NAMED.
//
// # Concurrency
//
// Every function is safe for concurrent use on distinct buffers. An Op or
// a Result is written by the decoder it is passed to: one per goroutine.
//
// # Caveats
//
// proto checks structure, not meaning: a decoded ACQUIRE may carry a
// negative cost or a zero period, and the server must reject it. Encoders
// write what they are given, so tests can build malformed frames; callers
// keep keys within MaxKeyLen and frames within MaxFrameLen.
package proto
