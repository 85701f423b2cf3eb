package bucket

import (
	"fmt"
	"math"
)

// window_counters: Figma's sliding window counters. Time is cut into
// sub-windows of w = ceil(Window/Counters) ns aligned to multiples of w
// since the Unix epoch, each with a counter; a request sees the sum of every
// counter whose sub-window overlaps (now-Window, now], which holds every
// admission of that span and some earlier ones: harsh, never lenient.
// Counters*w >= Window, so at most Counters+1 sub-windows overlap; the
// extension is a ring of Counters+1 counters, sub-window j at index
// j mod (Counters+1).

// window_counters State word 0: the number of the newest stored sub-window,
// floor(t/w) for the times t in it. The ring holds it and the Counters
// before it.
const wcTop = 0

// subWindow returns the sub-window width w = ceil(Window/Counters) ns, in
// [1, Window]. Validate records it, and prepares division by it.
func (l *Limit) subWindow() int64 {
	if l.step > 0 {
		return l.step
	}
	return ceilDiv(l.Window, l.Counters)
}

// validateCounters checks the derived quantity of window_counters whose
// fields are in range: the last sub-window a request counts in stops
// counting Window after it ends, up to Window plus one sub-window after the
// request.
func (l *Limit) validateCounters() error {
	if w := ceilDiv(l.Window, l.Counters); l.Window > MaxDuration-w {
		return fmt.Errorf("%w: window_counters window + window/counters = %d + %d ns, want <= %d ns (%d s)",
			ErrOverflow, l.Window, w, MaxDuration, MaxDuration/1e9)
	}
	return nil
}

// subWindowOf returns the number of the sub-window of width w that holds
// now: floor(now/w).
func (l *Limit) subWindowOf(now, w int64) int64 {
	if now >= 0 {
		return l.divStep(now, w)
	}
	return floorDiv(now, w)
}

// subWindowEnd returns the end of sub-window j, (j+1)*w, saturated (past
// math.MinInt64 it is later than the truth, never earlier).
func subWindowEnd(j, w int64) int64 {
	if j >= 0 {
		return satMul(satAdd(j, 1), w)
	}
	return -satMul(-(j + 1), w)
}

// ringIndex returns j mod m, in [0, m).
func ringIndex(j int64, m int) int {
	i := int(j % int64(m))
	if i < 0 {
		i += m
	}
	return i
}

// countersSpan returns how many stored sub-windows, from the newest (top)
// down, count at now: sub-window j counts until (j+1)*w + Window, so those
// numbered floor((now-Window)/w) or more, the newest included even when it
// is after now's (time went backwards). At most Counters+1.
func (l *Limit) countersSpan(now, top, w int64) int {
	lo := l.subWindowOf(satSub(now, l.Window), w)
	if top < lo {
		return 0
	}
	return int(min(uint64(top)-uint64(lo), uint64(l.Counters))) + 1 // exact even when top-lo overflows int64
}

// countersSum returns the sum of the span counters from index i down, each
// clamped at 0, or Max+1 as soon as it is more than Max (a request then
// fails whatever the rest). Unsigned, it needs no saturation: it is at most
// Max before each addition and a counter is below 2^63.
func (l *Limit) countersSum(ext []int64, i, span int) uint64 {
	limit := uint64(l.Max)
	sum := uint64(0)
	lo := i - span + 1 // the counters are ext[lo:i+1], or ext[lo+len(ext):] and ext[:i+1]
	if lo < 0 {
		for _, c := range ext[lo+len(ext):] {
			if sum += uint64(max(c, 0)); sum > limit {
				return limit + 1
			}
		}
		lo = 0
	}
	for _, c := range ext[lo : i+1] {
		if sum += uint64(max(c, 0)); sum > limit {
			return limit + 1
		}
	}
	return sum
}

// countersRetryAt returns when a request of cost <= Max, denied at now
// against the counters as they stand (sub-window top at index i), passes
// with no further traffic. The sub-windows leave oldest first, so it is when
// the newest sub-window j leaves whose counter, with the newer ones', is
// more than Max-cost.
func (l *Limit) countersRetryAt(now int64, ext []int64, top int64, i int, cost int64) int64 {
	w := l.subWindow()
	room := l.Max - cost
	sum := int64(0)
	for k := range l.countersSpan(now, top, w) {
		if sum = satAdd(sum, max(ext[i], 0)); sum > room {
			return satAdd(subWindowEnd(satSub(top, int64(k)), w), l.Window)
		}
		if i--; i < 0 {
			i = len(ext) - 1
		}
	}
	return math.MinInt64 // not denied: unreachable
}

// countersReport fills d but for Allowed, set by the caller, for the
// counters as they stand (sub-window top at index i): the RetryAfter of a
// denied request of cost, Remaining for count, their sum at now as
// countersSum gives it, and ResetAfter.
func (l *Limit) countersReport(now int64, ext []int64, top int64, i int, count uint64, cost int64, d *Decision) {
	if !d.Allowed && cost <= l.Max {
		d.RetryAfter = retryAfter(l.countersRetryAt(now, ext, top, i, cost), now)
	}
	d.Remaining = l.Max - int64(min(count, uint64(l.Max)))
	d.ResetAfter = resetAfter(l.countersFreshFrom(ext, top, i), now)
}

// applyCounters: allowed iff count+cost <= Max. An allowed request of cost
// > 0, and with CountDenied a denied one, adds cost to the counter of now's
// sub-window, or of the newest stored one if that is later (time went
// backwards), so a backwards now writes where it counts longest. Moving the
// ring to now's sub-window clears the counters of the sub-windows it enters.
// The denied request's RetryAfter is for the counters after it.
func (l *Limit) applyCounters(now int64, s *State, ext []int64, cost int64, d *Decision) bool {
	w := l.subWindow()
	m := len(ext)
	top := s[wcTop]
	span := l.countersSpan(now, top, w)
	i := ringIndex(top, m)
	count := l.countersSum(ext, i, span)
	resetDecision(d, l.Max)
	allowed := count+uint64(cost) <= uint64(l.Max) // both below 2^63: no overflow
	changed := false
	if cost > 0 && (allowed || l.CountDenied) {
		if cur := l.subWindowOf(now, w); cur > top {
			// The ring enters sub-windows top+1..cur; their slots held
			// sub-windows that no longer count.
			for range min(uint64(cur)-uint64(top), uint64(m)) {
				if i++; i == m {
					i = 0
				}
				if setExt(s, ext, i, 0) {
					changed = true
				}
			}
			top, i = cur, ringIndex(cur, m)
			s[wcTop], changed = cur, true
		}
		if setExt(s, ext, i, satAdd(max(ext[i], 0), cost)) {
			changed = true
		}
		count = min(count+uint64(cost), uint64(l.Max)+1)
	}
	d.Allowed = allowed
	l.countersReport(now, ext, top, i, count, cost, d)
	return changed
}

// peekCounters: Allowed and RetryAfter for cost 1, the rest for cost 0.
func (l *Limit) peekCounters(now int64, s *State, ext []int64, d *Decision) {
	top := s[wcTop]
	i := ringIndex(top, len(ext))
	count := l.countersSum(ext, i, l.countersSpan(now, top, l.subWindow()))
	resetDecision(d, l.Max)
	d.Allowed = count+1 <= uint64(l.Max)
	l.countersReport(now, ext, top, i, count, 1, d)
}

// countersFreshAt returns the end of the newest stored sub-window with a
// count, plus Window: then no counter counts any more. math.MinInt64 if
// every counter is 0.
func (l *Limit) countersFreshAt(s *State, ext []int64) int64 {
	return l.countersFreshFrom(ext, s[wcTop], ringIndex(s[wcTop], len(ext)))
}

// countersFreshFrom is countersFreshAt given sub-window top's index i.
func (l *Limit) countersFreshFrom(ext []int64, top int64, i int) int64 {
	for k := range len(ext) {
		if ext[i] > 0 {
			return satAdd(subWindowEnd(satSub(top, int64(k)), l.subWindow()), l.Window)
		}
		if i--; i < 0 {
			i = len(ext) - 1
		}
	}
	return math.MinInt64
}

// refundCounters takes amount off the counters that count at now, newest
// sub-window first.
func (l *Limit) refundCounters(now int64, s *State, ext []int64, amount int64) bool {
	top := s[wcTop]
	span := l.countersSpan(now, top, l.subWindow())
	i := ringIndex(top, len(ext))
	changed := false
	for range span {
		if c := ext[i]; c > 0 {
			take := min(c, amount)
			setExt(s, ext, i, c-take)
			changed = true
			if amount -= take; amount == 0 {
				break
			}
		}
		if i--; i < 0 {
			i = len(ext) - 1
		}
	}
	return changed
}

// drainedCounters: now's sub-window holds Max, the others 0.
func (l *Limit) drainedCounters(now int64, s *State, ext []int64) {
	cur := l.subWindowOf(now, l.subWindow())
	clear(ext)
	ext[ringIndex(cur, len(ext))] = l.Max
	s[wcTop] = cur
}
