package proto

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// Fixed time anchors, so the vectors never change.
const (
	t0  = int64(1_700_000_000_000_000_000) // 2023-11-14T22:13:20Z
	sec = int64(time.Second)
)

// encodeOp appends op with the encoder of its opcode: the inverse of
// DecodeOp, used to check decode(encode(x)) == x both ways.
func encodeOp(dst []byte, op *Op) []byte {
	switch op.Code {
	case OpHello:
		return AppendHello(dst)
	case OpPing:
		return AppendPing(dst)
	case OpStats:
		return AppendStats(dst)
	case OpAcquire, OpPeek, OpRefund, OpReset, OpLease, OpRelease:
		l := op.Limit
		if op.Name != nil { // decoded: the name aliases the frame
			l = Named(string(op.Name))
		}
		n := op.N
		if op.Code == OpRelease {
			n = int64(op.Lease)
		}
		at := op.At
		if op.Flags&FlagDeadline != 0 {
			at = op.Deadline
		}
		return AppendItem(dst, op.Code, op.Flags, l, n, at, op.Key)
	case OpMulti:
		items := op.Items[:op.NItems]
		if slices.ContainsFunc(items, func(it MultiItem) bool { return it.Name != nil }) {
			items = slices.Clone(items) // decoded names alias the frame
			for i := range items {
				if items[i].Name != nil {
					items[i].Limit = Named(string(items[i].Name))
				}
			}
		}
		return AppendMulti(dst, op.Flags, op.At, items)
	case OpScan:
		return AppendScan(dst, op.Cursor, op.Count, op.Prefix)
	case OpRegGet, OpRegSet, OpRegCAS, OpRegDel:
		return AppendRegister(dst, op.Code, op.Old, op.N, op.TTL, op.Key)
	}
	panic(fmt.Sprintf("encodeOp: %v", op.Code))
}

// encodeResult appends r with the encoders of its opcode and status: the
// inverse of DecodeResult.
func encodeResult(dst []byte, r *Result) []byte {
	if r.Status != StatusOK {
		return AppendError(dst, r.Code, r.Status, string(r.Message))
	}
	switch r.Code {
	case OpHello:
		return AppendHelloResult(dst, &r.Hello)
	case OpPing:
		return AppendPong(dst)
	case OpAcquire, OpPeek, OpRefund:
		if r.ShadowDenied {
			dst = MarkOutage(AppendShadowDecision(dst, r.Code, &r.Decision), r.Outage)
		} else {
			dst = MarkOutage(AppendDecision(dst, r.Code, &r.Decision), r.Outage)
		}
		if r.FailsClosed {
			dst = MarkFailsClosed(dst)
		}
		if r.NLimits > 0 {
			dst = AppendLimits(dst, r.Bound, r.Limits[:r.NLimits])
		}
		return dst
	case OpReset:
		return AppendReset(dst, r.Existed)
	case OpLease:
		return MarkLeaseOutage(AppendLeaseResult(dst, &r.Decision, r.Lease), r.Code, r.Outage)
	case OpRelease:
		return MarkLeaseOutage(AppendReleaseResult(dst, r.Released, &r.Decision), r.Code, r.Outage)
	case OpMulti:
		dst = AppendMultiResult(dst, r.Allowed, r.Decisions[:r.NDecisions])
		for i := range r.NDecisions {
			dst = MarkMulti(dst, r.NDecisions, i, r.Marks[i])
		}
		return dst
	case OpScan:
		b, start := BeginScanResult(dst, 0)
		for e := r.Entries; len(e) > 0; {
			alg, freshAt, key, rest, err := NextScanEntry(e)
			if err != nil {
				panic(err)
			}
			b, e = AppendScanEntry(b, alg, freshAt, key), rest
		}
		return EndScanResult(b, start, r.Next, r.NEntries)
	case OpStats:
		b, start := BeginStatsResult(dst)
		for s := r.Stats; len(s) > 0; {
			name, v, rest, err := NextStat(s)
			if err != nil {
				panic(err)
			}
			b, s = AppendStat(b, string(name), v), rest
		}
		return EndStatsResult(b, start, r.NStats)
	case OpRegGet, OpRegSet, OpRegCAS, OpRegDel:
		return AppendRegisterResult(dst, r.Code, &r.Register)
	}
	panic(fmt.Sprintf("encodeResult: %v", r.Code))
}

// opView is the part of an Op that applies to its opcode, comparable with
// reflect.DeepEqual (nil and empty keys alike).
type opView struct {
	Code     Opcode
	Flags    Flags
	Limit    Limit
	N, At    int64
	Deadline int64
	Key      string
	Lease    uint64
	Old, TTL int64
	Items    []itemView
	Cursor   uint64
	Count    uint16
	Prefix   string
}

type itemView struct {
	Flags Flags
	Limit Limit
	Cost  int64
	Key   string
}

func viewOp(op *Op) opView {
	v := opView{Code: op.Code, Flags: op.Flags, Limit: op.Limit, N: op.N, At: op.At, Deadline: op.Deadline, Key: string(op.Key),
		Lease: op.Lease, Old: op.Old, TTL: op.TTL, Cursor: op.Cursor, Count: op.Count, Prefix: string(op.Prefix)}
	if op.Name != nil { // decoded: a named limit's name is apart
		v.Limit = Named(string(op.Name))
	}
	if v.Limit.Name != "" { // the encoders set NAMED from the limit
		v.Flags |= FlagNamed
	}
	for _, it := range op.Items[:op.NItems] {
		v.Items = append(v.Items, itemView{it.Flags, it.Limit, it.Cost, string(it.Key)})
	}
	return v
}

// resultView is the part of a Result that applies, with the scan entries
// and counters decoded.
type resultView struct {
	Code      Opcode
	Status    Status
	Message   string
	Decision  Decision
	Shadow    bool
	Outage    Outage
	Closed    bool // FailsClosed
	Existed   bool
	Lease     uint64
	Released  bool
	Allowed   bool
	Decisions []Decision
	Marks     []Marks
	Limits    []Decision
	Bound     int
	Hello     Hello
	Next      uint64
	Entries   []entryView
	Stats     []statView
	Register  Register
}

type entryView struct {
	Alg     Algorithm
	FreshAt int64
	Key     string
}

type statView struct {
	Name  string
	Value uint64
}

func viewResult(r *Result) resultView {
	v := resultView{Code: r.Code, Status: r.Status, Message: string(r.Message), Decision: r.Decision,
		Shadow: r.ShadowDenied, Outage: r.Outage, Closed: r.FailsClosed, Existed: r.Existed, Lease: r.Lease, Released: r.Released, Allowed: r.Allowed, Hello: r.Hello, Next: r.Next, Register: r.Register}
	v.Decisions = append(v.Decisions, r.Decisions[:r.NDecisions]...)
	v.Marks = append(v.Marks, r.Marks[:r.NDecisions]...)
	v.Limits, v.Bound = append(v.Limits, r.Limits[:r.NLimits]...), r.Bound
	for e := r.Entries; len(e) > 0; {
		alg, freshAt, key, rest, err := NextScanEntry(e)
		if err != nil {
			panic(err)
		}
		v.Entries, e = append(v.Entries, entryView{alg, freshAt, string(key)}), rest
	}
	for s := r.Stats; len(s) > 0; {
		name, val, rest, err := NextStat(s)
		if err != nil {
			panic(err)
		}
		v.Stats, s = append(v.Stats, statView{string(name), val}), rest
	}
	return v
}

// Constructors for test values.

func item(code Opcode, f Flags, l Limit, n, at int64, key string) Op {
	if f&FlagDeadline != 0 && f&FlagAt == 0 { // as DecodeOp gives it
		return Op{Code: code, Flags: f, Limit: l, N: n, Deadline: at, Key: []byte(key)}
	}
	return Op{Code: code, Flags: f, Limit: l, N: n, At: at, Key: []byte(key)}
}

// lease returns a LEASE as DecodeOp gives it: n is 1.
func lease(f Flags, l Limit, key string) Op {
	return Op{Code: OpLease, Flags: f, Limit: l, N: 1, Key: []byte(key)}
}

// release returns a RELEASE as DecodeOp gives it: the id in Lease, n 0.
func release(f Flags, l Limit, id uint64, key string) Op {
	return Op{Code: OpRelease, Flags: f, Limit: l, Lease: id, Key: []byte(key)}
}

func multi(f Flags, at int64, items ...MultiItem) Op {
	op := Op{Code: OpMulti, Flags: f, At: at, NItems: len(items)}
	copy(op.Items[:], items)
	return op
}

func register(code Opcode, old, value, ttl int64, key string) Op {
	return Op{Code: code, Old: old, N: value, TTL: ttl, Key: []byte(key)}
}

func scan(cursor uint64, count uint16, prefix string) Op {
	return Op{Code: OpScan, Cursor: cursor, Count: count, Prefix: []byte(prefix)}
}

func errResult(code Opcode, s Status, msg string) Result {
	return Result{Code: code, Status: s, Message: []byte(msg)}
}

func decisionResult(code Opcode, d Decision) Result { return Result{Code: code, Decision: d} }

func leaseResult(d Decision, id uint64) Result { return Result{Code: OpLease, Decision: d, Lease: id} }

func releaseResult(released bool, d Decision) Result {
	return Result{Code: OpRelease, Released: released, Decision: d}
}

func multiResult(allowed bool, ds ...Decision) Result {
	r := Result{Code: OpMulti, Allowed: allowed, NDecisions: len(ds)}
	copy(r.Decisions[:], ds)
	return r
}

func scanResult(next uint64, entries ...entryView) Result {
	b, start := BeginScanResult(nil, 0)
	for _, e := range entries {
		b = AppendScanEntry(b, e.Alg, e.FreshAt, []byte(e.Key))
	}
	return Result{Code: OpScan, Next: next, Entries: b[start+12:], NEntries: len(entries)}
}

func statsResult(stats ...statView) Result {
	b, start := BeginStatsResult(nil)
	for _, s := range stats {
		b = AppendStat(b, s.Name, s.Value)
	}
	return Result{Code: OpStats, Stats: b[start+4:], NStats: len(stats)}
}

var testHello = Hello{Version: 1, MaxFrame: MaxFrameLen, MaxBatch: MaxBatch, MaxKey: MaxKeyLen,
	MaxMulti: MaxMulti, SlotCount: 1 << 20, SlotSize: 128}

// sampleOps returns one or more operations of every opcode, with edge values.
func sampleOps() []Op {
	long := strings.Repeat("k", MaxKeyLen)
	items := make([]MultiItem, MaxMulti)
	for i := range items {
		items[i] = MultiItem{Flags: FlagStrict, Limit: GCRALimit(int64(i), 1, time.Second), Cost: int64(i), Key: []byte(fmt.Sprint("key", i))}
	}
	return []Op{
		{Code: OpHello}, {Code: OpPing}, {Code: OpStats},
		item(OpAcquire, FlagStrict|FlagAt, TokenBucketLimit(10, time.Hour, 1), 1, t0, "login:alice"),
		item(OpAcquire, FlagSmyte, Limit{Algorithm: TokenBucket, P: [3]int64{-1, 1<<63 - 1, -1 << 63}}, -5, -1, long),
		item(OpPeek, 0, GCRALimit(4, 1, time.Second), 0, 0, "k"),
		item(OpRefund, FlagAt, FixedWindowLimit(100, time.Minute), 3, t0, "upload:bob"),
		item(OpReset, 0, SlidingWindowLimit(100, time.Minute), 0, 0, "search:carol"),
		item(OpAcquire, 0, PacerLimit(4, time.Second, 2*time.Second), 1, 0, "\x00\xff binary"),
		item(OpAcquire, FlagAt, SlidingLogLimit(100, time.Minute), 2, t0, "search:carol"),
		item(OpRefund, 0, WindowCountersLimit(100, time.Hour, 60, true), 1, 0, "api:tenant-7"),
		item(OpReset, 0, Limit{Algorithm: WindowCounters, P: [3]int64{1, 1, 1<<63 - 1}}, 0, 0, "k"),
		item(OpPeek, 0, ConcurrencyLimit(10, 30*time.Second), 0, 0, "upload:erin"),
		item(OpAcquire, FlagDeadline|FlagStrict, TokenBucketLimit(10, time.Hour, 1), 1, t0, "login:alice"),
		item(OpReset, FlagDeadline, SlidingWindowLimit(100, time.Minute), 0, t0, "search:carol"),
		lease(0, ConcurrencyLimit(10, 30*time.Second), "upload:erin"),
		lease(0, ConcurrencyLimit(1<<63-1, 1<<63-1), long),
		release(0, ConcurrencyLimit(10, 30*time.Second), 7, "upload:erin"),
		release(0, ConcurrencyLimit(0, 0), 1<<64-1, "k"),
		{Code: OpRelease, Limit: ConcurrencyLimit(1, 1), Lease: 1, At: -1, Key: []byte("at is not read")},
		multi(FlagAt, t0,
			MultiItem{Flags: FlagStrict, Limit: TokenBucketLimit(10, time.Hour, 1), Cost: 1, Key: []byte("login:alice")},
			MultiItem{Flags: 0, Limit: GCRALimit(4, 1, time.Second), Cost: 2, Key: []byte("api:tenant-7")}),
		multi(0, 0, items...),
		scan(0, 100, "login:"), scan(1<<64-1, MaxScanCount, long), scan(7, 1, ""),
		register(OpRegGet, 0, 0, 0, "k"), register(OpRegDel, 0, 0, 0, long),
		register(OpRegSet, 0, -1<<63, 1<<63-1, "tat"), register(OpRegCAS, 1<<63-1, -5, -1, "\x00\xff binary"),
	}
}

// sampleResults returns one or more results of every opcode and status.
// listResult returns the result of op with FlagAll on a list: ds are its
// limits' decisions, and bound's is the result's.
func listResult(op Opcode, bound int, ds []Decision) Result {
	r := Result{Code: op, Decision: ds[bound], NLimits: len(ds), Bound: bound}
	copy(r.Limits[:], ds)
	return r
}

func sampleResults() []Result {
	ds := make([]Decision, MaxMulti)
	for i := range ds {
		ds[i] = Decision{Allowed: i%2 == 0, Remaining: int64(i), Limit: 16, RetryAfter: -1, ResetAfter: int64(i) * sec, Delay: 0}
	}
	long := strings.Repeat("k", MaxKeyLen)
	rs := []Result{
		{Code: OpHello, Hello: testHello},
		{Code: OpPing},
		decisionResult(OpAcquire, Decision{Allowed: true, Remaining: 9, Limit: 10, RetryAfter: -1, ResetAfter: 3600 * sec, Delay: 0}),
		{Code: OpAcquire, ShadowDenied: true, Decision: Decision{Allowed: true, Remaining: 0, Limit: 10, RetryAfter: -1, ResetAfter: 3600 * sec, Delay: 0}},
		{Code: OpAcquire, Outage: OutageClosed, Decision: Decision{Allowed: false, Remaining: 0, Limit: 10, RetryAfter: 5e6, ResetAfter: 0, Delay: 0}},
		{Code: OpPeek, Outage: OutageLocal, Decision: Decision{Allowed: true, Remaining: 2, Limit: 3, RetryAfter: -1, ResetAfter: 3600 * sec, Delay: 0}},
		{Code: OpAcquire, ShadowDenied: true, Outage: OutageLocal, Decision: Decision{Allowed: true, Remaining: 0, Limit: 3, RetryAfter: -1, ResetAfter: 3600 * sec, Delay: 0}},
		{Code: OpAcquire, FailsClosed: true, Decision: Decision{Allowed: true, Remaining: 9, Limit: 10, RetryAfter: -1, ResetAfter: 3600 * sec, Delay: 0}},
		{Code: OpRefund, Outage: OutageClosed, FailsClosed: true, Decision: Decision{Allowed: false, Remaining: 0, Limit: 10, RetryAfter: 5e6, ResetAfter: 0, Delay: 0}},
		{Code: OpAcquire, ShadowDenied: true, Outage: OutageClosed, FailsClosed: true, Decision: Decision{Allowed: true, Remaining: 0, Limit: 3, RetryAfter: -1, ResetAfter: 0, Delay: 0}},
		decisionResult(OpPeek, Decision{Allowed: false, Remaining: 0, Limit: 5, RetryAfter: 1 << 62, ResetAfter: -1 << 63, Delay: 1<<63 - 1}),
		listResult(OpAcquire, 3, ds[:MaxMulti]), listResult(OpPeek, 0, ds[:1]), listResult(OpRefund, 1, ds[2:4]),
		{Code: OpAcquire, ShadowDenied: true, Outage: OutageLocal, FailsClosed: true, NLimits: 2, Bound: 1, Limits: [MaxMulti]Decision{ds[0], ds[1]},
			Decision: Decision{Allowed: true, Remaining: 1, Limit: 16, RetryAfter: -1, ResetAfter: sec, Delay: 0}},
		decisionResult(OpRefund, Decision{Allowed: true, Remaining: 50, Limit: 100, RetryAfter: -1, ResetAfter: 42 * sec, Delay: 0}),
		{Code: OpReset, Existed: true}, {Code: OpReset},
		leaseResult(Decision{Allowed: true, Remaining: 9, Limit: 10, RetryAfter: -1, ResetAfter: 30 * sec, Delay: 0}, 7),
		leaseResult(Decision{Allowed: false, Remaining: 0, Limit: 10, RetryAfter: 12 * sec, ResetAfter: 30 * sec, Delay: 0}, 0),
		leaseResult(Decision{Allowed: true, Remaining: 0, Limit: 1 << 62, RetryAfter: -1, ResetAfter: 0, Delay: 0}, 1<<64-1),
		releaseResult(true, Decision{Allowed: true, Remaining: 10, Limit: 10, RetryAfter: -1, ResetAfter: 0, Delay: 0}),
		releaseResult(false, Decision{Allowed: false, Remaining: 0, Limit: 3, RetryAfter: 5 * sec, ResetAfter: 9 * sec, Delay: 0}),
		multiResult(true, Decision{Allowed: true, Remaining: 9, Limit: 10, RetryAfter: -1, ResetAfter: 3600 * sec, Delay: 0}, Decision{Allowed: true, Remaining: 2, Limit: 5, RetryAfter: -1, ResetAfter: 3 * sec, Delay: 0}),
		multiResult(false, ds...),
		scanResult(4096, entryView{TokenBucket, t0 + 3600*sec, "login:alice"}, entryView{Pacer, t0, long}),
		scanResult(0),
		statsResult(statView{"slot_count", 1 << 20}, statView{"ops", 1<<64 - 1}),
		statsResult(),
		errResult(OpAcquire, StatusTableFull, "shm: table full"),
		errResult(0, StatusBadVersion, ""),
		errResult(200, StatusUnknownOpcode, "proto: unknown opcode: 200"),
		errResult(OpScan, StatusUnsupported, strings.Repeat("é", MaxMessageLen/2)),
		{Code: OpRegGet, Register: Register{OK: true, Value: -7, TTL: 0, Now: t0}},
		{Code: OpRegSet, Register: Register{OK: false, Value: 1<<63 - 1, TTL: 1<<63 - 1, Now: -1}},
		{Code: OpRegCAS, Register: Register{OK: false, Value: 0, TTL: -1, Now: t0}},
		{Code: OpRegDel, Register: Register{OK: true, Value: 0, TTL: -1, Now: 0}},
	}
	for s := StatusMalformed; s < numStatuses; s++ {
		rs = append(rs, errResult(OpPing, s, s.String()))
	}
	return rs
}

// decodeAll splits the first frame of b and decodes its whole body, as a
// peer does, returning the first error: the header's, an operation's or
// result's, or ErrMalformed for bytes after the last one.
func decodeAll(b []byte) (h Header, ops []Op, rs []Result, err error) {
	frame, _, h, err := SplitFrame(b)
	if err != nil {
		return h, nil, nil, err
	}
	if frame == nil {
		return h, nil, nil, fmt.Errorf("%w: incomplete frame", ErrMalformed)
	}
	body := frame[HeaderLen:]
	for range h.Count {
		if h.Kind == KindRequest {
			ops = append(ops, Op{})
			body, err = DecodeOpVersion(body, h.Version, &ops[len(ops)-1])
		} else {
			rs = append(rs, Result{})
			body, err = DecodeResult(body, &rs[len(rs)-1])
		}
		if err != nil {
			return h, ops, rs, err
		}
	}
	if len(body) != 0 {
		return h, ops, rs, fmt.Errorf("%w: %d bytes after the last operation", ErrMalformed, len(body))
	}
	return h, ops, rs, nil
}

// frameOf wraps encoded operations or results in a frame.
func frameOf(kind Kind, id uint32, count int, body ...[]byte) []byte {
	b, start := BeginFrame(nil, kind, id)
	b = append(b, bytes.Join(body, nil)...)
	return EndFrame(b, start, count)
}

// checkErr fails t unless err wraps want (nil for no error) and, if an
// error, says where it comes from.
func checkErr(t *testing.T, err, want error) {
	t.Helper()
	switch {
	case want == nil && err != nil:
		t.Fatalf("unexpected error: %v", err)
	case want != nil && !errors.Is(err, want):
		t.Fatalf("error %v, want one wrapping %v", err, want)
	case err != nil && !strings.HasPrefix(err.Error(), "proto: "):
		t.Fatalf("error %q lacks the package prefix", err)
	}
}
