package sluice

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/proto"
)

// Decision is the sidecar's answer to Acquire, Peek or Refund, or to one
// item of Multi.
//
// Durations come from the wire's nanoseconds; where the wire says "not
// applicable" (-1) the duration is negative: RetryAfter is negative when
// the request was allowed or can never be (its cost is above the limit's
// capacity), and ResetAfter is negative only in a Degraded decision.
type Decision struct {
	Allowed    bool          // the request may proceed (for a pacer limit: after Delay)
	Remaining  int64         // cost-1 requests still allowed now, in [0, Limit]
	Limit      int64         // the largest Remaining can be
	RetryAfter time.Duration // until this request would be allowed; negative if allowed or never
	ResetAfter time.Duration // until the bucket is back to its fresh state; 0 if fresh
	Delay      time.Duration // pacer: the wait before acting; 0 for the other algorithms

	// Degraded is set when the sidecar could not be reached and the
	// decision is the client's failure policy's (FailOpen or FailClosed),
	// not the sidecar's. Remaining and Limit are then 0 and ResetAfter is
	// negative (unknown).
	Degraded bool

	// ShadowDenied is set on an allowed Acquire that a shadow limit (or
	// the Shadow option) would have denied: the caller lets the request
	// through, and may log it or answer it without doing the work (a
	// shadow ban).
	ShadowDenied bool

	// Outage is set when a global limit's outage policy made the decision
	// because Redis did not answer the sidecar in time: "local" (this
	// host's share of the limit), "open" (allowed) or "closed" (denied;
	// RetryAfter is when the sidecar asks Redis again). It needs a sidecar
	// of protocol version 4 (outage.go), and of version 5 on a Lease (the
	// Lease's Decision). With Degraded, "closed" says the
	// sidecar did not answer a request on a limit that fails closed
	// (FailsClosed), and the failure policy denied it.
	Outage string

	// FailsClosed is set on the decisions of a global limit whose outage
	// policy is closed, whoever made them (protocol version 4). The client
	// remembers it per limit name: while the last decision on a name says
	// so, the failure policy denies the name's requests that the sidecar
	// does not answer, even under FailOpen (FailError still returns the
	// error).
	FailsClosed bool

	// Limits is set on the decision of a named limit that lists several
	// limits (the sidecar's config file: "login: [SPEC, SPEC]"): each
	// one's decision of the request, in the list's order, which a sidecar
	// of protocol version 7 gives with Acquire, Peek and Refund. The
	// decision itself is their combination (allowed if each allows) with
	// the Limit and RetryAfter of Limits[Bound], the limit that binds,
	// the least Remaining and the largest ResetAfter and Delay. Limits is
	// nil for a limit that is one limit, and from an older sidecar. The
	// RateLimit header fields (SetRateLimitHeaders) list every limit.
	Limits []Decision
	// Bound is the index in Limits of the limit that binds.
	Bound int
}

func decisionOf(w *proto.Decision) Decision {
	return Decision{
		Allowed: w.Allowed, Remaining: w.Remaining, Limit: w.Limit,
		RetryAfter: time.Duration(w.RetryAfter), ResetAfter: time.Duration(w.ResetAfter),
		Delay: time.Duration(w.Delay),
	}
}

// A RequestOption modifies one request. Options are values: passing them
// allocates nothing.
type RequestOption struct {
	flags proto.Flags
	at    int64
}

// At decides the request as of t rather than the sidecar's clock, for
// replaying past events. The sidecar keeps whatever state it finds: a time
// before a bucket's last update counts as no time passing.
func At(t time.Time) RequestOption { return RequestOption{flags: proto.FlagAt, at: t.UnixNano()} }

// Strict makes a token_bucket request that leaves the bucket at 0, or is
// denied, restart the bucket's refill clock (smyte/ratelimit's STRICT).
// Other algorithms ignore it.
func Strict() RequestOption { return RequestOption{flags: proto.FlagStrict} }

// Smyte selects smyte/ratelimit compatibility for a token_bucket request: a
// denial drains the bucket to 0 and Remaining is the count before the
// deduction. Other algorithms ignore it.
func Smyte() RequestOption { return RequestOption{flags: proto.FlagSmyte} }

// Shadow makes an Acquire a shadow request: the sidecar decides and
// consumes as usual, but answers a denial as allowed with
// Decision.ShadowDenied set, and counts it. A limit the sidecar's config
// marks shadow does the same for every request.
func Shadow() RequestOption { return RequestOption{flags: proto.FlagShadow} }

func requestFlags(opts []RequestOption) (proto.Flags, int64) {
	var f proto.Flags
	var at int64
	for _, o := range opts {
		f |= o.flags
		if o.flags&proto.FlagAt != 0 {
			at = o.at
		}
	}
	return f, at
}

// checkKey rejects a key the sidecar's codec would reject: such a request
// would make it close the connection, failing every other call on it.
func checkKey(op proto.Opcode, key string) error {
	if len(key) == 0 || len(key) > proto.MaxKeyLen {
		return refused(op, proto.StatusInvalidKey, "a key is 1 to %d bytes, this one %d", proto.MaxKeyLen, len(key))
	}
	return nil
}

func checkLimit(op proto.Opcode, l Limit) error {
	if l.Name != "" {
		if err := proto.ValidName(l.Name); err != nil {
			return refused(op, proto.StatusInvalidLimit, "%s", strings.TrimPrefix(err.Error(), "proto: invalid limit: "))
		}
		return nil
	}
	if !l.Algorithm.Valid() {
		return refused(op, proto.StatusInvalidLimit, "no algorithm %d", uint8(l.Algorithm))
	}
	return nil
}

// encode checks an ACQUIRE, PEEK, REFUND, RESET, LEASE or RELEASE (n the
// lease id) and returns a call holding its request frame.
// deadline, if not 0, is the client's deadline to tell the sidecar
// (DEADLINE, outage.go); minV, if not 0, the oldest frame version to
// write (deadlineFor).
func (c *Client) encode(op proto.Opcode, l Limit, key string, n int64, opts []RequestOption, deadline int64, minV uint8) (*call, error) {
	if err := checkKey(op, key); err != nil {
		return nil, err
	}
	if err := checkLimit(op, l); err != nil {
		return nil, err
	}
	f, at := requestFlags(opts)
	if deadline != 0 && f&proto.FlagAt == 0 {
		f, at = f|proto.FlagDeadline, deadline
	}
	if minV >= proto.ListVersion && l.Name != "" && op >= proto.OpAcquire && op <= proto.OpRefund {
		f |= proto.FlagAll // a list's answer says each limit's decision
	}
	cl := getCall(op)
	cl.key = append(cl.key[:0], key...)
	// Each frame in the oldest version that holds it: a sidecar of an
	// older version keeps answering what it knows.
	v := max(proto.ItemVersion(op, f, &l), minV) // its answer says which outage policy made it, and whether the limit fails closed
	b, start := proto.BeginFrameVersion(cl.req[:0], v, proto.KindRequest, 0)
	switch op {
	case proto.OpLease:
		cl.limit = l // to give the lease back if its caller leaves
		b = proto.AppendLease(b, 0, l, cl.key)
	case proto.OpRelease:
		b = proto.AppendRelease(b, 0, l, uint64(n), cl.key)
	default:
		b = proto.AppendItem(b, op, f, l, n, at, cl.key)
	}
	cl.req = proto.EndFrame(b, start, 1)
	return cl, nil
}

// item sends an ACQUIRE, PEEK, REFUND, RESET, LEASE or RELEASE and returns
// its call, or an error (then the call is not the caller's).
func (c *Client) item(ctx context.Context, op proto.Opcode, l Limit, key string, n int64, opts []RequestOption) (*call, error) {
	deadline, minV := c.deadlineFor(ctx, op, &l)
	cl, err := c.encode(op, l, key, n, opts, deadline, minV)
	if err != nil {
		return nil, err
	}
	if err := c.roundTrip(ctx, cl); err != nil {
		return nil, err
	}
	if err := statusError(op, cl.res.Status, cl.res.Message); err != nil {
		putCall(cl)
		return nil, err
	}
	return cl, nil
}

// decide sends an ACQUIRE, PEEK or REFUND and returns its decision, or the
// failure policy's.
func (c *Client) decide(ctx context.Context, op proto.Opcode, l Limit, key string, n int64, opts []RequestOption, policy bool) (Decision, error) {
	cl, err := c.item(ctx, op, l, key, n, opts)
	if err != nil {
		if policy {
			return c.degraded(err, l.Name)
		}
		return Decision{}, err
	}
	d := c.decided(cl, l.Name)
	putCall(cl)
	return d, nil
}

// decided returns the decision an ACQUIRE, PEEK or REFUND call on the
// named limit (or "") holds, and learns whether the limit fails closed.
func (c *Client) decided(cl *call, name string) Decision {
	d := decisionOf(&cl.res.Decision)
	d.ShadowDenied = cl.res.ShadowDenied
	d.Outage = cl.res.Outage.String()
	d.FailsClosed = cl.res.FailsClosed
	if n := cl.res.NLimits; n > 0 {
		d.Limits, d.Bound = make([]Decision, n), cl.res.Bound
		for i := range d.Limits {
			d.Limits[i] = decisionOf(&cl.res.Limits[i])
		}
	}
	c.learn(name, cl)
	return d
}

// degraded returns the failure policy's decision for err, a request's on
// the named limit (or ""), if err means the sidecar is unavailable, it has
// answered this client before, and the policy is not FailError; else err
// (one that says so if the sidecar has never answered).
func (c *Client) degraded(err error, name string) (Decision, error) {
	if !errors.Is(err, ErrUnavailable) {
		return Decision{}, err
	}
	if !c.answered.Load() {
		return Decision{}, &neverAnsweredError{err}
	}
	return c.byPolicy(err, name)
}

// byPolicy returns the failure policy's decision for a request on the
// named limit (or "") that the sidecar could not decide because of err, or
// err under FailError: a denial, marked Outage "closed", if the last
// decision on the name said the limit fails closed. Every such decision is
// counted (Degraded) and, at most every degradedLogInterval, logged with
// the count since the last line.
func (c *Client) byPolicy(err error, name string) (Decision, error) {
	if c.opt.policy == FailError {
		return Decision{}, err
	}
	n := c.degradedN.Add(1)
	if last := c.degradedLog.Load(); time.Now().UnixNano()-last >= int64(degradedLogInterval) {
		if c.degradedLog.CompareAndSwap(last, time.Now().UnixNano()) {
			prev := c.degradedAt.Swap(n)
			c.opt.logger.Warn("decisions made by the client's failure policy, not by the Sluice sidecar",
				"policy", c.opt.policy.String(), "decisions", n-prev, "total", n, "socket", c.where, "error", err.Error())
		}
	}
	switch {
	case c.knownClosed(name):
		return Decision{RetryAfter: c.retryIn(), ResetAfter: -1, Degraded: true, Outage: "closed", FailsClosed: true}, nil
	case c.opt.policy == FailOpen:
		return Decision{Allowed: true, RetryAfter: -1, ResetAfter: -1, Degraded: true}, nil
	case c.opt.policy == FailClosed:
		return Decision{RetryAfter: c.retryIn(), ResetAfter: -1, Degraded: true}, nil
	}
	return Decision{}, err
}

// Acquire asks whether a request of cost tokens against key under limit l
// may proceed and, if it may, consumes cost. Cost 0 is a peek that neither
// creates nor changes the bucket. Options: At, Strict, Smyte.
//
// If the sidecar cannot be reached, the failure policy decides (see
// FailurePolicy). A rejected request (an invalid limit, a negative cost, a
// full table, ...) returns a *StatusError.
func (c *Client) Acquire(ctx context.Context, l Limit, key string, cost int64, opts ...RequestOption) (Decision, error) {
	return c.decide(ctx, proto.OpAcquire, l, key, cost, opts, true)
}

// Peek looks at key's bucket under l as it stands, changing and creating
// nothing: Remaining is what is left now (not what a cost-1 Acquire would
// leave), Allowed whether a cost-1 Acquire would be allowed, RetryAfter
// when it would be if it would not. Option: At. The failure policy
// applies as for Acquire.
func (c *Client) Peek(ctx context.Context, l Limit, key string, opts ...RequestOption) (Decision, error) {
	return c.decide(ctx, proto.OpPeek, l, key, 0, opts, true)
}

// Refund gives amount tokens back to key's bucket under l (capped at the
// limit's maximum; a bucket that does not exist is full already) and
// returns the bucket's state afterwards as a cost-0 decision. Option: At.
// The failure policy does not apply: an unreachable sidecar is an error.
func (c *Client) Refund(ctx context.Context, l Limit, key string, amount int64, opts ...RequestOption) (Decision, error) {
	return c.decide(ctx, proto.OpRefund, l, key, amount, opts, false)
}

// Reset forgets key's bucket under l, which then behaves as new, and
// reports whether it existed.
func (c *Client) Reset(ctx context.Context, l Limit, key string) (existed bool, err error) {
	cl, err := c.item(ctx, proto.OpReset, l, key, 0, nil)
	if err != nil {
		return false, err
	}
	existed = cl.res.Existed
	putCall(cl)
	return existed, nil
}

// Item is one acquire of a Multi.
type Item struct {
	Limit  Limit
	Key    string
	Cost   int64
	Strict bool // see the Strict option
	Smyte  bool // see the Smyte option
}

// Multi acquires every item or none: allowed is true only if every item is
// allowed, and then every item consumed its cost; if any is denied, nothing
// changed. ds has one decision per item, in order, each as if the item were
// alone (so the denied ones can be told apart). There may be 1 to
// proto.MaxMulti items. Options: At applies to every item; Strict and Smyte
// to every token_bucket item, as do the Item fields. Each decision of a
// named item has Outage and FailsClosed as an Acquire's (a sidecar of
// protocol version 7), and teaches the client whether its limit fails
// closed. The failure policy applies as for Acquire, every decision
// Degraded, and denies if the last decision on any item's name said it
// fails closed. A Multi the sidecar
// could not lock returns an error matching ErrContended: retry it.
func (c *Client) Multi(ctx context.Context, items []Item, opts ...RequestOption) (allowed bool, ds []Decision, err error) {
	if len(items) == 0 || len(items) > proto.MaxMulti {
		return false, nil, refused(proto.OpMulti, proto.StatusTooManyItems, "a multi has 1 to %d items, this one %d", proto.MaxMulti, len(items))
	}
	for i := range items {
		if err := checkKey(proto.OpMulti, items[i].Key); err != nil {
			return false, nil, fmt.Errorf("item %d, %w", i+1, err)
		}
		if err := checkLimit(proto.OpMulti, items[i].Limit); err != nil {
			return false, nil, fmt.Errorf("item %d, %w", i+1, err)
		}
	}
	f, at := requestFlags(opts)
	cl := getCall(proto.OpMulti)
	cl.key = cl.key[:0]
	for i := range items {
		cl.key = append(cl.key, items[i].Key...)
	}
	off := 0
	for i := range items {
		it := &items[i]
		fl := f & (proto.FlagStrict | proto.FlagSmyte)
		if it.Strict {
			fl |= proto.FlagStrict
		}
		if it.Smyte {
			fl |= proto.FlagSmyte
		}
		k := cl.key[off : off+len(it.Key) : off+len(it.Key)]
		off += len(it.Key)
		cl.items[i] = proto.MultiItem{Flags: fl, Limit: it.Limit, Cost: it.Cost, Key: k}
	}
	b, start := proto.BeginFrameVersion(cl.req[:0], c.multiVersion(ctx, cl.items[:len(items)]), proto.KindRequest, 0)
	b = proto.AppendMulti(b, f&proto.FlagAt, at, cl.items[:len(items)])
	cl.req = proto.EndFrame(b, start, 1)
	if err := c.roundTrip(ctx, cl); err != nil {
		name := "" // a named item known to fail closed denies the Multi
		for i := range items {
			if c.knownClosed(items[i].Limit.Name) {
				name = items[i].Limit.Name
				break
			}
		}
		d, err := c.degraded(err, name)
		if err != nil {
			return false, nil, err
		}
		ds = make([]Decision, len(items))
		for i := range ds {
			ds[i] = d
		}
		return d.Allowed, ds, nil
	}
	defer putCall(cl)
	if err := statusError(proto.OpMulti, cl.res.Status, cl.res.Message); err != nil {
		return false, nil, err
	}
	if cl.res.NDecisions != len(items) {
		return false, nil, garbled(fmt.Errorf("%d decisions for %d items: %w", cl.res.NDecisions, len(items), ErrMalformed))
	}
	ds = make([]Decision, cl.res.NDecisions)
	for i := range ds {
		ds[i] = decisionOf(&cl.res.Decisions[i])
		ds[i].Outage, ds[i].FailsClosed = cl.res.Marks[i].Outage.String(), cl.res.Marks[i].FailsClosed
	}
	c.learnMulti(items, cl)
	return cl.res.Allowed, ds, nil
}

// multiVersion returns the frame version to send a MULTI of items in: the
// oldest that holds them, or, if an item is named and the sidecar speaks
// version 7, 7, so that the answer marks each decision as an Acquire's.
func (c *Client) multiVersion(ctx context.Context, items []proto.MultiItem) uint8 {
	v := proto.MultiVersion(items)
	for i := range items {
		if items[i].Limit.Name != "" {
			d, ok, _ := callDeadline(ctx, time.Now(), c.opt.timeout)
			if c.sidecarSpeaks(ctx, d, ok) >= proto.ListVersion {
				v = proto.ListVersion
			}
			break
		}
	}
	return v
}

// simpleCall returns a call holding the request frame of an operation
// without arguments (HELLO, PING, STATS).
func simpleCall(op proto.Opcode) *call {
	cl := getCall(op)
	b, start := proto.BeginFrameVersion(cl.req[:0], proto.MinVersion, proto.KindRequest, 0)
	switch op {
	case proto.OpHello:
		b = proto.AppendHello(b)
	case proto.OpPing:
		b = proto.AppendPing(b)
	case proto.OpStats:
		b = proto.AppendStats(b)
	}
	cl.req = proto.EndFrame(b, start, 1)
	return cl
}

// simple sends an operation without arguments (HELLO, PING, STATS) and
// returns its call.
func (c *Client) simple(ctx context.Context, op proto.Opcode) (*call, error) {
	cl := simpleCall(op)
	if err := c.roundTrip(ctx, cl); err != nil {
		return nil, err
	}
	if err := statusError(op, cl.res.Status, cl.res.Message); err != nil {
		putCall(cl)
		return nil, err
	}
	return cl, nil
}

// Ping checks that the sidecar answers.
func (c *Client) Ping(ctx context.Context) error {
	cl, err := c.simple(ctx, proto.OpPing)
	if err != nil {
		return err
	}
	putCall(cl)
	return nil
}

// Hello is the sidecar's protocol version, its limits, and the geometry of
// its table.
type Hello = proto.Hello

// Hello returns the sidecar's protocol version and limits.
func (c *Client) Hello(ctx context.Context) (Hello, error) {
	cl, err := c.simple(ctx, proto.OpHello)
	if err != nil {
		return Hello{}, err
	}
	h := cl.res.Hello
	putCall(cl)
	return h, nil
}

// Stats returns the sidecar's counters by name (slot_count, used_slots,
// allowed, denied, ...). The set of names is the sidecar's and may change.
func (c *Client) Stats(ctx context.Context) (map[string]uint64, error) {
	cl, err := c.simple(ctx, proto.OpStats)
	if err != nil {
		return nil, err
	}
	defer putCall(cl)
	m := make(map[string]uint64, cl.res.NStats)
	for b := cl.res.Stats; len(b) > 0; {
		name, v, rest, err := proto.NextStat(b)
		if err != nil { // DecodeResult checked it already
			return nil, garbled(err)
		}
		m[string(name)] = v
		b = rest
	}
	return m, nil
}

// ScanEntry is one bucket that Scan lists.
type ScanEntry struct {
	Key       string
	Algorithm Algorithm
	FreshAt   time.Time // when the bucket is back to its fresh state (and its slot reclaimable)
}

// Scan lists up to count buckets whose key starts with prefix ("" lists
// every bucket), from cursor: 0 to start, then the next of the previous
// call, until next is 0. A call may return fewer than count entries, even
// none, before the scan is complete. count outside 1..proto.MaxScanCount
// is taken as proto.MaxScanCount. Buckets created or moved during a scan
// may be missed or listed twice. Scan needs a sidecar whose table keeps
// keys inline (slot size 128 or 256), else it returns ErrUnsupported; keys
// longer than a slot keeps are not listed.
func (c *Client) Scan(ctx context.Context, prefix string, cursor uint64, count int) (entries []ScanEntry, next uint64, err error) {
	if len(prefix) > proto.MaxKeyLen {
		return nil, 0, refused(proto.OpScan, proto.StatusInvalidKey, "a prefix is at most %d bytes, this one %d", proto.MaxKeyLen, len(prefix))
	}
	if count <= 0 || count > proto.MaxScanCount {
		count = proto.MaxScanCount
	}
	cl := getCall(proto.OpScan)
	cl.key = append(cl.key[:0], prefix...)
	b, start := proto.BeginFrameVersion(cl.req[:0], proto.ScanVersion, proto.KindRequest, 0)
	b = proto.AppendScan(b, cursor, uint16(count), cl.key)
	cl.req = proto.EndFrame(b, start, 1)
	if err := c.roundTrip(ctx, cl); err != nil {
		return nil, 0, err
	}
	defer putCall(cl)
	if err := statusError(proto.OpScan, cl.res.Status, cl.res.Message); err != nil {
		return nil, 0, err
	}
	entries = make([]ScanEntry, 0, cl.res.NEntries)
	for b := cl.res.Entries; len(b) > 0; {
		alg, freshAt, key, rest, err := proto.NextScanEntry(b)
		if err != nil { // DecodeResult checked it already
			return nil, 0, garbled(err)
		}
		entries = append(entries, ScanEntry{Key: string(key), Algorithm: alg, FreshAt: time.Unix(0, freshAt)})
		b = rest
	}
	return entries, cl.res.Next, nil
}
