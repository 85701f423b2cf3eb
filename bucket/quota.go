package bucket

import "math"

// quota: a count per period of a calendar (calendar.go), like a fixed
// window whose windows are local days, weeks, months or years.

// quota State words.
const (
	qStart = 0 // Unix ns: the start of the stored period
	qCount = 1 // tokens counted in it
	qEnd   = 2 // Unix ns: its end, the next period's start
)

// quotaPeriod returns the period that applies at now and its count. The
// stored period applies while now is before its end, so the calendar is
// computed once per period, not per request; a stored period later than
// now's (time went backwards) still applies, so a backwards clock cannot
// open a fresh period.
func (l *Limit) quotaPeriod(now int64, s *State) (start, end, count int64) {
	if now < s[qEnd] {
		return s[qStart], s[qEnd], max(s[qCount], 0)
	}
	start, end = l.CalendarPeriod(now)
	if s[qStart] >= start {
		return s[qStart], s[qEnd], max(s[qCount], 0)
	}
	return start, end, 0
}

func (l *Limit) initQuota(now int64, s *State, count int64) {
	start, end := l.CalendarPeriod(now)
	*s = State{start, count, end}
}

func (l *Limit) applyQuota(now int64, s *State, cost int64, d *Decision) bool {
	start, end, count := l.quotaPeriod(now, s)
	resetDecision(d, l.Max)
	changed := false
	if cost <= l.Max-count { // count >= 0: no overflow
		d.Allowed = true
		if cost > 0 {
			count += cost
			*s = State{start, count, end}
			changed = true
		}
	} else if cost <= l.Max {
		d.RetryAfter = retryAfter(end, now) // the next period starts at 0
	}
	d.Remaining = max(l.Max-count, 0)
	if count > 0 {
		d.ResetAfter = resetAfter(end, now) // the next boundary
	}
	return changed
}

// quotaFreshAt returns the end of the period if it counted anything.
func quotaFreshAt(s *State) int64 {
	if s[qCount] <= 0 {
		return math.MinInt64
	}
	return s[qEnd]
}

func (l *Limit) refundQuota(now int64, s *State, amount int64) {
	start, end, count := l.quotaPeriod(now, s)
	if count > 0 {
		*s = State{start, count - min(amount, count), end}
	}
}
