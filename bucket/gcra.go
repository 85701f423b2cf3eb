package bucket

import (
	"fmt"
	"math"
	"math/bits"
)

// gcra: redis-cell's generic cell rate algorithm
// (reference/anchor-semantics.md section 2.2-2.4), exact in nanoseconds.

// gcra State words.
const gcraTAT = 0 // theoretical arrival time, Unix ns; the bucket is fresh once it is <= now

// interval returns the gcra emission interval T = Period/Count, in ns,
// truncated as redis-cell does. Validate ensures T >= 1 and records it, so
// the decision path does not divide.
func (l *Limit) interval() int64 {
	if l.step > 0 {
		return l.step
	}
	return l.Period / l.Count
}

// divStep returns n / t for n >= 0, where t is the limit's step (gcra T,
// pacer I): without a hardware division when Validate prepared one.
func (l *Limit) divStep(n, t int64) int64 {
	if l.stepD.d == uint64(t) && t > 1 {
		return int64(l.stepD.div(uint64(n)))
	}
	return n / t
}

// tau returns the gcra delay variation tolerance (Burst+1)*T, in ns.
// Validate ensures it fits in an int64.
func (l *Limit) tau() int64 {
	return (l.Burst + 1) * l.interval()
}

// validateGCRA checks the derived quantities of a gcra limit whose fields
// are in range.
func (l *Limit) validateGCRA() error {
	t := l.interval()
	if t == 0 {
		return fmt.Errorf("%w: gcra emission interval period/count = %d/%d truncates to 0 ns",
			ErrZeroRate, l.Period, l.Count)
	}
	if l.Burst == math.MaxInt64 {
		return fmt.Errorf("%w: gcra burst+1 with burst = %d", ErrOverflow, l.Burst)
	}
	if hi, lo := bits.Mul64(uint64(l.Burst+1), uint64(t)); hi != 0 || lo > uint64(MaxDuration) {
		return fmt.Errorf("%w: gcra tolerance (burst+1)*period/count = %d*%d ns, want <= %d ns (%d s)",
			ErrOverflow, l.Burst+1, t, MaxDuration, MaxDuration/1e9)
	}
	return nil
}

// applyGCRA: allowed iff max(tat-now, 0) + cost*T <= tau. Allowed:
// tat = max(tat, now) + cost*T. Denied: nothing changes. Unlike redis-cell,
// cost 0 is a peek that writes nothing. A request whose new tat would pass
// math.MaxInt64 is denied with RetryAfter -1.
func (l *Limit) applyGCRA(now int64, s *State, cost int64, d *Decision) bool {
	t := l.interval()
	limit := l.Burst + 1
	tau := limit * t
	tat := s[gcraTAT]
	ttl := max(satSub(tat, now), 0) // the bucket's debt at now, ns
	resetDecision(d, limit)
	changed := false
	if cost <= limit { // else cost*T > tau: never allowed, RetryAfter stays -1
		inc := cost * t // <= tau: no overflow
		switch {
		case ttl > tau-inc:
			// allow_at = max(tat, now) + inc - tau, after now.
			d.RetryAfter = ttl - (tau - inc)
		case now > math.MaxInt64-(ttl+inc):
			// The new tat would pass math.MaxInt64, and it only grows with
			// now: never allowed, rather than a saturated tat that forgets
			// the debt.
		default:
			d.Allowed = true
			if cost > 0 {
				ttl += inc
				s[gcraTAT] = now + ttl // = max(tat, now) + inc
				changed = s[gcraTAT] != tat
			}
		}
	}
	// Exact in ns, so never above Limit (redis-cell truncates T to whole
	// microseconds here and can report remaining > limit, issue #50).
	d.Remaining = l.divStep(max(tau-ttl, 0), t)
	d.ResetAfter = resetAfter(s[gcraTAT], now)
	return changed
}

// refundGCRACell is redis-cell's CL.THROTTLE with a negative quantity
// -amount, decided like any request (anchor-semantics.md 2.3): the new tat
// is max(tat, now) - amount*T, and the request is limited iff that is still
// more than tau ahead of now, and then nothing is written. Allowed, the tat
// moves back, but not before now: redis-cell writes a tat in the past and
// then fails to set the key's expiry; a refund here never makes a bucket
// more than fresh.
func (l *Limit) refundGCRACell(now int64, s *State, amount int64, d *Decision) bool {
	t := l.interval()
	tau := l.tau()
	tat := s[gcraTAT]
	newTAT := satSub(max(tat, now), satMul(amount, t))
	resetDecision(d, l.Burst+1)
	ttl := max(satSub(tat, now), 0)
	changed := false
	if ahead := satSub(newTAT, now); ahead > tau {
		d.RetryAfter = ahead - tau
	} else {
		d.Allowed = true
		if newTAT = max(newTAT, now); newTAT < tat {
			s[gcraTAT], changed = newTAT, true
		}
		ttl = max(satSub(s[gcraTAT], now), 0)
	}
	d.Remaining = l.divStep(max(tau-ttl, 0), t)
	d.ResetAfter = ttl
	return changed
}
