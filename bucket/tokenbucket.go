package bucket

import "math"

// token_bucket: smyte/ratelimit's discrete-refill token bucket
// (reference/anchor-semantics.md section 1.5-1.8).

// token_bucket State words.
const (
	tbAmount     = 0 // tokens in the bucket as of tbRefilledAt, in [0, Max]
	tbRefilledAt = 1 // Unix ns of the last whole refill step (the refill phase)
)

// refill is smyte/ratelimit's adjustAmount: the tokens available at now and
// the refill clock after the whole refill steps that passed since the stored
// one. Time going backwards counts as zero elapsed time and leaves the clock
// where it was. The stored amount is clamped to [0, Max] (it is only outside
// after corruption); the refilled count saturates before the cap at Max.
func (l *Limit) refill(now int64, s *State) (adjusted, refilledAt int64) {
	amount := clamp(s[tbAmount], 0, l.Max)
	last := s[tbRefilledAt]
	elapsed := satSub(now, last)
	if elapsed < l.RefillTime { // no whole step: the common case needs no division
		return amount, last
	}
	refills := elapsed / l.RefillTime
	adjusted = min(l.Max, satAdd(satMul(refills, l.RefillAmount), amount))
	// refills*RefillTime <= elapsed, and last+elapsed <= now when elapsed did
	// not saturate (when it did, last < 0): no overflow.
	return adjusted, last + refills*l.RefillTime
}

func (l *Limit) applyTokenBucket(now int64, s *State, cost int64, f Flags, d *Decision) bool {
	adjusted, at := l.refill(now, s)
	allowed := adjusted >= cost
	strict := f&Strict != 0
	// amount, at: the bucket after the request (what is written, or an
	// equivalent view of the unchanged state).
	amount := adjusted
	write := false
	switch {
	case cost == 0:
		// A peek never writes, strict or not (smyte: GET never writes).
	case f&Smyte != 0:
		// smyte writes max(adjusted-cost, 0) whatever the outcome; STRICT
		// restarts the clock. smyte/ratelimit restarts it at the client's
		// time even when that is earlier than the stored clock, which
		// moves the clock back and refills the bucket early: time travel
		// would mint tokens, so the clock never moves back here.
		amount, write = max(adjusted-cost, 0), true
		if strict && amount == 0 {
			at = max(at, now)
		}
	case allowed:
		amount, write = adjusted-cost, true
		if strict && amount == 0 {
			at = max(at, now) // a backwards now must not move the clock back
		}
	case strict:
		at, write = max(at, now), true
	}
	changed := write && (s[tbAmount] != amount || s[tbRefilledAt] != at)
	if changed {
		s[tbAmount], s[tbRefilledAt] = amount, at
	}

	resetDecision(d, l.Max)
	d.Allowed, d.Remaining = allowed, amount
	if f&Smyte != 0 {
		d.Remaining = adjusted
	}
	if !allowed && cost <= l.Max {
		// Whole refill steps until amount+k*RefillAmount >= cost; the cap at
		// Max does not bind because cost <= Max.
		k := ceilDiv(cost-amount, l.RefillAmount)
		d.RetryAfter = retryAfter(satAddMul(at, k, l.RefillTime), now)
	}
	d.ResetAfter = resetAfter(l.fullAt(amount, at), now)
	return changed
}

// fullAt returns the time of the refill step that makes a bucket holding
// amount tokens (in [0, Max]) with refill clock at full again, or
// math.MinInt64 if it is full already.
func (l *Limit) fullAt(amount, at int64) int64 {
	if amount >= l.Max {
		return math.MinInt64
	}
	k := ceilDiv(l.Max-amount, l.RefillAmount)
	return satAddMul(at, k, l.RefillTime)
}

// refundTokenBucket adds amount tokens to what is available at now, capped at
// Max, and stores the refilled clock with them. A bucket already full at now
// is left as it is.
func (l *Limit) refundTokenBucket(now int64, s *State, amount int64) {
	adjusted, at := l.refill(now, s)
	if adjusted >= l.Max {
		return
	}
	s[tbAmount], s[tbRefilledAt] = min(l.Max, satAdd(adjusted, amount)), at
}
