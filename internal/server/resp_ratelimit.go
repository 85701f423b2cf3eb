package server

import (
	"errors"
	"math"
	"os"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/errtext"
	"github.com/sluicehq/sluice/proto"
	"github.com/sluicehq/sluice/proto/resp"
)

var pid = os.Getpid()

// smyte/ratelimit's error replies, byte for byte (no "ERR" prefix).
const (
	errValue  = "Value is not an integer or out of range"
	errSyntax = "Syntax error"
)

// redis-cell's error replies.
const (
	cellPrefix = "Cell error: Store error: "
	cellUsage  = cellPrefix + "Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]"
	cellZero   = cellPrefix + "Zero rates are not supported"
)

// rlRequest is a parsed rate-limit command (RL.* or CL.THROTTLE): what to
// ask the engine and how to word its answer.
type rlRequest struct {
	cell   bool // CL.THROTTLE: redis-cell's reply; else smyte/ratelimit's
	key    []byte
	limit  engine.Limit
	cost   int64 // tokens to take, or to give back if refund
	refund bool  // CL.THROTTLE with a negative quantity
	at     bool  // the client sent its own time (AT)
	when   engine.Time
	flags  bucket.Flags
}

// run decides a parsed request on its own and appends its reply.
func (rc *respConn) run(req *rlRequest) {
	r := engine.Request{Op: proto.OpAcquire, Key: req.key, Limit: &req.limit, N: req.cost, Flags: req.flags, Time: req.when, OwnTime: req.at}
	if req.refund {
		r.Op, r.Flags = proto.OpRefund, bucket.Cell
	}
	if route := rc.s.route(req.key); route != nil {
		r.Remote = rc.globalCall(req, route)
	}
	var res engine.Result
	if err := rc.s.engine.Do(&r, &res); err != nil {
		rc.failRequest(req, err)
		return
	}
	rc.reply(req, &res.Decision)
}

// parseRateLimit parses RL.REDUCE, RL.PREDUCE, RL.GET and RL.PGET with
// smyte/ratelimit's grammar and units into req, or returns the error reply:
//
//	RL.REDUCE key max refilltime [REFILL n] [TAKE n] [AT t] [STRICT]
//	RL.GET    key max refilltime [REFILL n] [AT t] [STRICT]
//
// refilltime and AT are seconds (milliseconds for the P variants). The
// bucket is a token_bucket identified by (key, max, refilltime, refill), so
// RL.REDUCE k 2 60 and RL.PREDUCE k 2 60000 share one. The reply is the
// count before this request's deduction; a request that finds too few
// tokens drains the bucket to 0.
func (rc *respConn) parseRateLimit(req *rlRequest, args [][]byte, name string, millis, get bool) string {
	maxArgs := 10
	if get {
		maxArgs = 8
	}
	if n := len(args) - 1; n < 3 || n > maxArgs {
		return "Wrong number of arguments for '" + name + "' command"
	}
	unit := int64(1000) // seconds to milliseconds
	if millis {
		unit = 1
	}
	max, ok1 := parseInt(args[2], 64)
	refill, ok2 := parseInt(args[3], 32) // smyte parses refilltime as int32
	if !ok1 || !ok2 {
		return errValue
	}
	refillMs := refill * unit
	amount, take, atMs, strict := max, int64(1), int64(-1), false
	if get {
		take = 0
	}
	for i := 4; i < len(args); {
		if is(args[i], "strict") {
			strict = true
			i++
			continue
		}
		if i+1 >= len(args) {
			return errSyntax
		}
		v, ok := parseInt(args[i+1], 64) // the value is parsed before the keyword is known
		if !ok {
			return errValue
		}
		switch opt := args[i]; {
		case is(opt, "refill"):
			amount = v
		case is(opt, "take") && !get:
			take = v
		case is(opt, "at"):
			// smyte multiplies without an overflow check; a time past
			// the range decisions are exact in (year 2190) is refused.
			if v < 0 || v > bucket.MaxTime/1_000_000/unit {
				return errValue
			}
			atMs = v * unit
		default:
			return errSyntax
		}
		i += 2
	}
	if max < 1 || refillMs < 1 || amount < 1 || take < 0 {
		return errValue
	}
	// smyte keeps time in milliseconds: so does the refill arithmetic here.
	req.when = rc.at(rc.now / 1_000_000 * 1_000_000)
	if atMs >= 0 {
		req.when.At, req.at = atMs*1_000_000, true
	}
	l, err := rc.limits.get(bucket.Limit{Algorithm: bucket.TokenBucket, Max: max, RefillTime: refillMs * 1_000_000, RefillAmount: amount}, engine.NewLimit)
	if err != nil {
		return errValue
	}
	req.cell, req.key, req.limit, req.cost = false, args[1], *l, take
	req.flags = bucket.Smyte
	if strict {
		req.flags |= bucket.Strict
	}
	return ""
}

// parseThrottle parses CL.THROTTLE key max_burst count period [quantity]
// into req, or returns the error reply. The bucket is a gcra bucket
// identified by the key alone, so its rate may change from call to call. A
// quantity of 0 is a peek; a negative quantity gives tokens back.
func (rc *respConn) parseThrottle(req *rlRequest, args [][]byte) string {
	if len(args) != 5 && len(args) != 6 {
		return cellUsage
	}
	var v [4]int64
	v[3] = 1
	for i, a := range args[2:] {
		n, ok := parseInt(a, 64)
		if !ok {
			return cellPrefix + "Couldn't parse as integer: " + printable(a)
		}
		v[i] = n
	}
	burst, count, period, qty := v[0], v[1], v[2], v[3]
	switch {
	case count == 0 || period == 0:
		return cellZero
	case burst < 0 || count < 0 || period < 0:
		// redis-cell answers these with replies that mean nothing; refuse.
		return cellPrefix + "max_burst, count and period must not be negative"
	case period > math.MaxInt64/1_000_000_000:
		return cellPrefix + "period too long"
	case period*1_000_000_000/count == 0:
		return cellZero
	}
	l, err := rc.limits.get(bucket.Limit{Algorithm: bucket.GCRA, Burst: burst, Count: count, Period: period * 1_000_000_000}, engine.NewLimit)
	if err != nil {
		return cellPrefix + errtext.String(err)
	}
	if qty == math.MinInt64 {
		return cellPrefix + "quantity out of range"
	}
	*req = rlRequest{cell: true, key: args[1], limit: *l, cost: qty, when: rc.at(rc.now)}
	if qty < 0 {
		// redis-cell decides a negative quantity like any request: limited,
		// and nothing written, if the bucket would still be past its
		// tolerance.
		req.refund, req.cost = true, -qty
	}
	return ""
}

// reply appends the reply to a decided request: smyte/ratelimit's integer,
// or redis-cell's [limited, limit, remaining, retry_after, reset_after],
// the durations in seconds rounded up at millisecond granularity, -1 where
// not applicable. Both are the same in RESP2 and RESP3.
func (rc *respConn) reply(req *rlRequest, d *bucket.Decision) {
	rc.count(d, req.limit.Bucket().Algorithm)
	if !req.cell {
		rc.out = resp.AppendInt(rc.out, d.Remaining)
		return
	}
	limited := int64(1)
	if d.Allowed {
		limited = 0
	}
	rc.out = resp.AppendArray(rc.out, 5)
	rc.out = resp.AppendInt(rc.out, limited)
	rc.out = resp.AppendInt(rc.out, d.Limit)
	rc.out = resp.AppendInt(rc.out, d.Remaining)
	rc.out = resp.AppendInt(rc.out, cellSeconds(d.RetryAfter))
	rc.out = resp.AppendInt(rc.out, cellSeconds(d.ResetAfter))
}

// failRequest answers an error of the engine for req.
func (rc *respConn) failRequest(req *rlRequest, err error) {
	var msg string
	switch {
	case errors.Is(err, engine.ErrRemoteTime):
		msg = "AT is not accepted for the key " + strconv.Quote(string(req.key)) + ": it is decided fleet-wide, in Redis, whose clock is the only clock"
	case !req.cell:
		rc.fail(err)
		return
	default:
		msg = errtext.String(err)
	}
	if req.cell {
		msg = cellPrefix + msg
	}
	rc.out = resp.AppendError(rc.out, msg)
	rc.n.errors++
}

// cellSeconds converts a duration in ns to redis-cell's whole seconds: the
// ceiling at millisecond granularity (1.9997 s and 2.0004 s are both 2), and
// -1 for -1.
func cellSeconds(ns int64) int64 {
	if ns < 0 {
		return -1
	}
	s := ns / 1e9
	if ns%1e9/1e6 > 0 {
		s++
	}
	return s
}

// parseInt parses a decimal integer of the given bit size (an optional sign,
// then digits; no spaces).
func parseInt(b []byte, bits int) (int64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	v, err := strconv.ParseInt(string(b), 10, bits)
	return v, err == nil
}

func (rc *respConn) count(d *bucket.Decision, alg bucket.Algorithm) {
	rc.s.record(nil, alg, d.Allowed, false, time.Time{})
	if d.Allowed {
		rc.n.allowed++
	} else {
		rc.n.denied++
	}
}

// fail answers an error of the engine that smyte/ratelimit has no words for.
func (rc *respConn) fail(err error) {
	rc.n.errors++
	switch statusFor(err) {
	case proto.StatusTableFull:
		rc.out = resp.AppendError(rc.out, "ERR table full")
	case proto.StatusInvalidKey:
		rc.out = resp.AppendError(rc.out, "ERR invalid key: "+errtext.String(err))
	default:
		rc.out = resp.AppendError(rc.out, "ERR "+errtext.String(err))
	}
}
