package bucket

import "math"

// fixed_window and sliding_window: counters over windows of Window ns
// aligned to multiples of Window since the Unix epoch.

// Window State words. Both algorithms store the start of their current
// window in word 0.
const (
	winStart = 0 // Unix ns, a multiple of Window: the start of the stored current window
	fwCount  = 1 // fixed_window: tokens counted in the stored window
	swPrev   = 1 // sliding_window: tokens counted in the window before the stored one
	swCurr   = 2 // sliding_window: tokens counted in the stored window
)

// fixedWindow returns the window that applies at now and its count. A
// stored window later than now's (time went backwards) still applies, so a
// backwards clock cannot open a fresh window.
func (l *Limit) fixedWindow(now int64, s *State) (start, count int64) {
	start = windowStart(now, l.Window)
	if s[winStart] >= start {
		return s[winStart], max(s[fwCount], 0)
	}
	return start, 0
}

func (l *Limit) applyFixedWindow(now int64, s *State, cost int64, d *Decision) bool {
	start, count := l.fixedWindow(now, s)
	resetDecision(d, l.Max)
	changed := false
	if cost <= l.Max-count { // count >= 0: no overflow
		d.Allowed = true
		if cost > 0 {
			count += cost
			s[winStart], s[fwCount] = start, count
			changed = true // the count grew, or a new window was written
		}
	} else if cost <= l.Max {
		d.RetryAfter = retryAfter(satAdd(start, l.Window), now) // the next window starts at 0
	}
	d.Remaining = max(l.Max-count, 0)
	d.ResetAfter = resetAfter(l.fixedFreshAt(start, count), now)
	return changed
}

// fixedFreshAt returns the end of the window if it counted anything.
func (l *Limit) fixedFreshAt(start, count int64) int64 {
	if count <= 0 {
		return math.MinInt64
	}
	return satAdd(start, l.Window)
}

func (l *Limit) refundFixedWindow(now int64, s *State, amount int64) {
	start, count := l.fixedWindow(now, s)
	if count > 0 {
		s[winStart], s[fwCount] = start, count-min(amount, count)
	}
}

// slidingWindow rolls s forward to now without writing it: the start of the
// window that applies, the counts of the previous and current windows, and
// the time elapsed in the current window, in [0, Window). If now is in the
// window after the stored one, the current count becomes the previous one;
// two or more windows later, both are 0. A stored window later than now's
// (time went backwards) still applies, with elapsed 0: its previous window
// keeps its full weight.
func (l *Limit) slidingWindow(now int64, s *State) (start, prev, curr, elapsed int64) {
	start = windowStart(now, l.Window)
	stored := s[winStart]
	p, c := max(s[swPrev], 0), max(s[swCurr], 0)
	switch {
	case stored >= start:
		start, prev, curr = stored, p, c
	case uint64(start)-uint64(stored) <= uint64(l.Window): // exact even when start-stored overflows int64
		prev = c
	}
	return start, prev, curr, max(satSub(now, start), 0)
}

// slidingPasses reports whether a request of cost passes a window with
// counts prev and curr after elapsed ns: exactly, in integers,
// prev*(Window-elapsed) + (curr+cost)*Window <= Max*Window.
func (l *Limit) slidingPasses(prev, curr, elapsed, cost int64) bool {
	if cost > l.Max-curr { // curr >= 0: no overflow
		return false
	}
	return mul128(prev, l.Window-elapsed).lessEq(mul128(l.Max-curr-cost, l.Window))
}

// slidingPassesFrom returns the smallest elapsed time in [0, Window) at
// which a request of cost passes a window with counts prev and curr, and
// false if there is none. The weighted count only falls as elapsed grows.
func (l *Limit) slidingPassesFrom(prev, curr, cost int64) (int64, bool) {
	if cost > l.Max-curr {
		return 0, false
	}
	if prev == 0 {
		return 0, true
	}
	// prev*(W-e) <= R*W  <=>  W-e <= floor(R*W/prev)
	q := mul128(l.Max-curr-cost, l.Window).div(prev)
	if q >= l.Window {
		return 0, true
	}
	e := l.Window - q // in [1, Window]
	return e, e < l.Window
}

func (l *Limit) applySlidingWindow(now int64, s *State, cost int64, d *Decision) bool {
	start, prev, curr, elapsed := l.slidingWindow(now, s)
	resetDecision(d, l.Max)
	changed := false
	if l.slidingPasses(prev, curr, elapsed, cost) {
		d.Allowed = true
		if cost > 0 {
			curr += cost
			s[winStart], s[swPrev], s[swCurr] = start, prev, curr
			changed = true // the current count grew
		}
	} else if cost <= l.Max {
		d.RetryAfter = retryAfter(l.slidingRetryAt(start, prev, curr, elapsed, cost), now)
	}
	// floor(Max - estimate) = Max - curr - ceil(prev*(W-elapsed)/W)
	weighted := mul128(prev, l.Window-elapsed).ceilDiv(l.Window)
	d.Remaining = max(satSub(l.Max-curr, weighted), 0)
	d.ResetAfter = resetAfter(l.slidingFreshAt(start, prev, curr), now)
	return changed
}

// slidingRetryAt returns the earliest time a request of cost <= Max, denied
// now, passes with no further traffic: later in the current window, else in
// the next one (whose previous count is curr), else at the start of the one
// after, where both counts are 0.
func (l *Limit) slidingRetryAt(start, prev, curr, elapsed, cost int64) int64 {
	if e, ok := l.slidingPassesFrom(prev, curr, cost); ok {
		return satAdd(start, max(e, elapsed))
	}
	next := satAdd(start, l.Window)
	if e, ok := l.slidingPassesFrom(curr, 0, cost); ok {
		return satAdd(next, e)
	}
	return satAdd(next, l.Window)
}

// slidingFreshAt returns when both counts have aged out: two windows after
// start if the current count is not 0, one window after if only the
// previous one is not, and math.MinInt64 if both are 0.
func (l *Limit) slidingFreshAt(start, prev, curr int64) int64 {
	switch {
	case curr > 0:
		return satAdd(satAdd(start, l.Window), l.Window)
	case prev > 0:
		return satAdd(start, l.Window)
	}
	return math.MinInt64
}

// refundSlidingWindow takes amount off the current window's count first,
// then off the previous window's.
func (l *Limit) refundSlidingWindow(now int64, s *State, amount int64) {
	start, prev, curr, _ := l.slidingWindow(now, s)
	if prev == 0 && curr == 0 {
		return
	}
	fromCurr := min(amount, curr)
	*s = State{start, prev - min(amount-fromCurr, prev), curr - fromCurr}
}
