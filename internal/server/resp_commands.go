package server

import (
	"errors"
	"math"
	"os"
	"strconv"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/engine"
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

// rateLimit runs RL.REDUCE, RL.PREDUCE, RL.GET and RL.PGET with
// smyte/ratelimit's grammar, units and replies:
//
//	RL.REDUCE key max refilltime [REFILL n] [TAKE n] [AT t] [STRICT]
//	RL.GET    key max refilltime [REFILL n] [AT t] [STRICT]
//
// refilltime and AT are seconds (milliseconds for the P variants). The
// bucket is a token_bucket identified by (key, max, refilltime, refill), so
// RL.REDUCE k 2 60 and RL.PREDUCE k 2 60000 share one. The reply is the
// count before this request's deduction; a request that finds too few
// tokens drains the bucket to 0.
func (rc *respConn) rateLimit(args [][]byte, name string, millis, get bool) {
	maxArgs := 10
	if get {
		maxArgs = 8
	}
	if n := len(args) - 1; n < 3 || n > maxArgs {
		rc.out = resp.AppendError(rc.out, "Wrong number of arguments for '"+name+"' command")
		return
	}
	unit := int64(1000) // seconds to milliseconds
	if millis {
		unit = 1
	}
	max, ok1 := parseInt(args[2], 64)
	refill, ok2 := parseInt(args[3], 32) // smyte parses refilltime as int32
	if !ok1 || !ok2 {
		rc.out = resp.AppendError(rc.out, errValue)
		return
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
			rc.out = resp.AppendError(rc.out, errSyntax)
			return
		}
		v, ok := parseInt(args[i+1], 64) // the value is parsed before the keyword is known
		if !ok {
			rc.out = resp.AppendError(rc.out, errValue)
			return
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
				rc.out = resp.AppendError(rc.out, errValue)
				return
			}
			atMs = v * unit
		default:
			rc.out = resp.AppendError(rc.out, errSyntax)
			return
		}
		i += 2
	}
	if max < 1 || refillMs < 1 || amount < 1 || take < 0 {
		rc.out = resp.AppendError(rc.out, errValue)
		return
	}
	// smyte keeps time in milliseconds: so does the refill arithmetic here.
	when := engine.At(rc.now / 1_000_000 * 1_000_000)
	if atMs >= 0 {
		when.At = atMs * 1_000_000
	}
	l, err := rc.limits.get(bucket.Limit{Algorithm: bucket.TokenBucket, Max: max, RefillTime: refillMs * 1_000_000, RefillAmount: amount}, engine.NewLimit)
	if err != nil {
		rc.out = resp.AppendError(rc.out, errValue)
		return
	}
	f := bucket.Smyte
	if strict {
		f |= bucket.Strict
	}
	var d bucket.Decision
	if err := rc.s.engine.Acquire(&d, args[1], l, take, when, f); err != nil {
		rc.fail(err)
		return
	}
	rc.count(&d)
	rc.out = resp.AppendInt(rc.out, d.Remaining)
}

// throttle runs CL.THROTTLE key max_burst count period [quantity] with
// redis-cell's reply: [limited, limit, remaining, retry_after, reset_after],
// the durations in seconds rounded up at millisecond granularity, -1 where
// not applicable. The bucket is a gcra bucket identified by the key alone,
// so its rate may change from call to call. A quantity of 0 is a peek; a
// negative quantity gives tokens back.
func (rc *respConn) throttle(args [][]byte) {
	if len(args) != 5 && len(args) != 6 {
		rc.out = resp.AppendError(rc.out, cellUsage)
		return
	}
	var v [4]int64
	v[3] = 1
	for i, a := range args[2:] {
		n, ok := parseInt(a, 64)
		if !ok {
			rc.out = resp.AppendError(rc.out, cellPrefix+"Couldn't parse as integer: "+printable(a))
			return
		}
		v[i] = n
	}
	burst, count, period, qty := v[0], v[1], v[2], v[3]
	switch {
	case count == 0 || period == 0:
		rc.out = resp.AppendError(rc.out, cellZero)
		return
	case burst < 0 || count < 0 || period < 0:
		// redis-cell answers these with replies that mean nothing; refuse.
		rc.out = resp.AppendError(rc.out, cellPrefix+"max_burst, count and period must not be negative")
		return
	case period > math.MaxInt64/1_000_000_000:
		rc.out = resp.AppendError(rc.out, cellPrefix+"period too long")
		return
	case period*1_000_000_000/count == 0:
		rc.out = resp.AppendError(rc.out, cellZero)
		return
	}
	l, err := rc.limits.get(bucket.Limit{Algorithm: bucket.GCRA, Burst: burst, Count: count, Period: period * 1_000_000_000}, engine.NewLimit)
	if err != nil {
		rc.out = resp.AppendError(rc.out, cellPrefix+err.Error())
		return
	}
	var d bucket.Decision
	switch {
	case qty >= 0:
		err = rc.s.engine.Acquire(&d, args[1], l, qty, engine.At(rc.now), 0)
	case qty == math.MinInt64:
		rc.out = resp.AppendError(rc.out, cellPrefix+"quantity out of range")
		return
	default:
		// redis-cell decides a negative quantity like any request: limited,
		// and nothing written, if the bucket would still be past its
		// tolerance.
		err = rc.s.engine.Refund(&d, args[1], l, -qty, engine.At(rc.now), bucket.Cell)
	}
	if err != nil {
		rc.out = resp.AppendError(rc.out, cellPrefix+err.Error())
		rc.n.errors++
		return
	}
	rc.count(&d)
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

func (rc *respConn) count(d *bucket.Decision) {
	if d.Allowed {
		rc.n.allowed++
	} else {
		rc.n.denied++
	}
}

// fail answers an error of the engine that smyte/ratelimit has no words for.
func (rc *respConn) fail(err error) {
	rc.n.errors++
	switch {
	case errors.Is(err, engine.ErrTableFull):
		rc.out = resp.AppendError(rc.out, "ERR table full")
	case errors.Is(err, engine.ErrEmptyKey), errors.Is(err, engine.ErrKeyTooLong):
		rc.out = resp.AppendError(rc.out, "ERR invalid key: "+err.Error())
	default:
		rc.out = resp.AppendError(rc.out, "ERR "+err.Error())
	}
}
