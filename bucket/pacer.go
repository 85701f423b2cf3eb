package bucket

import "fmt"

// pacer: the leaky bucket as a queue (CALLR, "Rate limiting for distributed
// systems with Redis and Lua", 2018). Each request is given the next free
// slot at 1/rate spacing and told how long to wait for it.

// pacer State words.
const pacerNext = 0 // Unix ns of the next free slot; the bucket is fresh once it is <= now

// pacerInterval returns the spacing of slots, I = ceil(Period/Count) ns:
// rounded up, so two slots are never closer than 1/rate. It is >= 1.
func (l *Limit) pacerInterval() int64 {
	if l.step > 0 {
		return l.step
	}
	return ceilDiv(l.Period, l.Count)
}

// validatePacer checks the derived quantity of a pacer whose fields are in
// range: a request admitted with the longest delay ends its slot MaxDelay
// plus one interval after now.
func (l *Limit) validatePacer() error {
	if i := ceilDiv(l.Period, l.Count); l.MaxDelay > MaxDuration-i {
		return fmt.Errorf("%w: pacer max_delay + period/rate = %d + %d ns, want <= %d ns (%d s)",
			ErrOverflow, l.MaxDelay, i, MaxDuration, MaxDuration/1e9)
	}
	return nil
}

// pacerRemaining returns how many cost-1 requests would be admitted at a
// time when the next free slot is delay ns away: slots delay, delay+I, ...
// up to MaxDelay.
func (l *Limit) pacerRemaining(delay, interval int64) int64 {
	if delay > l.MaxDelay {
		return 0
	}
	return satAdd(l.divStep(l.MaxDelay-delay, interval), 1)
}

// applyPacer: the request's slot is max(next, now), its Delay slot-now.
// Allowed iff Delay <= MaxDelay; then the request takes cost slots:
// next = slot + cost*I. Denied: nothing changes. A request whose slots would
// end past math.MaxInt64 is denied with RetryAfter -1.
func (l *Limit) applyPacer(now int64, s *State, cost int64, d *Decision) bool {
	i := l.pacerInterval()
	next := s[pacerNext]
	delay := max(satSub(next, now), 0)
	resetDecision(d, l.pacerRemaining(0, i))
	changed := false
	newNext, fits := addMul(max(next, now), cost, i)
	switch {
	case delay > l.MaxDelay:
		d.RetryAfter = delay - l.MaxDelay
	case !fits:
		// The request's slots would run past math.MaxInt64, and its slot
		// only grows with now: never allowed.
	default:
		d.Allowed, d.Delay = true, delay
		if cost > 0 {
			s[pacerNext] = newNext
			changed = newNext != next
		}
	}
	wait := max(satSub(s[pacerNext], now), 0)
	d.Remaining = l.pacerRemaining(wait, i)
	d.ResetAfter = wait
	return changed
}
