package bucket

import "math"

// sliding_log: the exact rolling window of CALLR's sorted-set limiter, as a
// ring of the last Max admission times in the extension, one entry per
// token. A request of cost c passes iff fewer than Max-c+1 entries are later
// than now-Window, which the (Max-c+1)-th most recent entry alone decides.

// sliding_log State word 0 packs the ring's position: bits 0-31 hold head,
// the index of ext the next entry is written to (the oldest entry once the
// ring is full), in [0, Max); bits 32-63 hold fill, the number of entries
// stored, in [0, Max]. The k-th most recent entry, 1 <= k <= fill, is
// ext[(head-k) mod Max]. Entries never decrease from the oldest to the
// newest: an admission is recorded at max(now, newest).
const logPos = 0

// packLog returns word 0 for a ring position.
func packLog(head, fill int) int64 {
	return int64(fill)<<32 | int64(head)
}

// logRing unpacks word 0 for a ring of n entries; a corrupt head is taken
// mod n and a corrupt fill clamped to n.
func logRing(s *State, n int) (head, fill int) {
	u := uint64(s[logPos])
	h := u & (1<<32 - 1)
	if h >= uint64(n) {
		h %= uint64(n)
	}
	return int(h), int(min(u>>32, uint64(n)))
}

// logIndex returns the index of the k-th most recent entry, 1 <= k <= n.
func logIndex(head, k, n int) int {
	if i := head - k; i >= 0 {
		return i
	}
	return head - k + n
}

// logLive reports whether an entry at e still counts at now: e > now-Window,
// exactly (an entry later than now, after time went backwards, counts).
func (l *Limit) logLive(e, now int64) bool {
	return satSub(e, now) > -l.Window
}

// logLiveCount returns how many entries count at now. They are the most
// recent ones, since entries only grow: a binary search.
func (l *Limit) logLiveCount(now int64, ext []int64, head, fill int) int {
	n := len(ext)
	switch {
	case fill == 0 || !l.logLive(ext[logIndex(head, 1, n)], now):
		return 0
	case l.logLive(ext[logIndex(head, fill, n)], now):
		return fill
	}
	// Entries 1..lo count; entries hi+1..fill do not.
	lo, hi := 1, fill-1
	for lo < hi {
		mid := int(uint(lo+hi+1) >> 1)
		if l.logLive(ext[logIndex(head, mid, n)], now) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// logVerdict sets d.Allowed, or d.RetryAfter, for a request of cost at now:
// allowed iff fewer than Max-cost+1 entries count, that is iff the ring holds
// fewer, or the (Max-cost+1)-th most recent entry e no longer counts; else
// the request passes when e leaves the window, at e+Window. A cost above Max
// never passes.
func (l *Limit) logVerdict(now int64, ext []int64, head, fill int, cost int64, d *Decision) {
	if cost > l.Max {
		return
	}
	k := int(l.Max-cost) + 1 // in [1, Max+1]
	if k > fill {
		d.Allowed = true
		return
	}
	e := ext[logIndex(head, k, len(ext))]
	if !l.logLive(e, now) {
		d.Allowed = true
		return
	}
	d.RetryAfter = retryAfter(satAdd(e, l.Window), now)
}

// logFreshAt returns when every entry has left the window: the newest plus
// Window, or math.MinInt64 for an empty ring.
func (l *Limit) logFreshAt(ext []int64, head, fill int) int64 {
	if fill == 0 {
		return math.MinInt64
	}
	return satAdd(ext[logIndex(head, 1, len(ext))], l.Window)
}

// logReport sets d.Remaining and d.ResetAfter for the ring as it stands.
func (l *Limit) logReport(now int64, ext []int64, head, fill int, d *Decision) {
	d.Remaining = l.Max - int64(l.logLiveCount(now, ext, head, fill))
	d.ResetAfter = resetAfter(l.logFreshAt(ext, head, fill), now)
}

// applySlidingLog: allowed, a request of cost > 0 writes cost entries at
// max(now, newest), so the ring stays in order and a backwards now records
// nothing earlier than what is stored. Denied: nothing changes.
func (l *Limit) applySlidingLog(now int64, s *State, ext []int64, cost int64, d *Decision) bool {
	n := len(ext)
	head, fill := logRing(s, n)
	resetDecision(d, l.Max)
	l.logVerdict(now, ext, head, fill, cost, d)
	changed := false
	if d.Allowed && cost > 0 { // cost <= Max = n
		at := now
		if fill > 0 {
			at = max(at, ext[logIndex(head, 1, n)])
		}
		for range cost {
			if setExt(s, ext, head, at) {
				changed = true
			}
			if head++; head == n {
				head = 0
			}
		}
		fill = min(fill+int(cost), n)
		if p := packLog(head, fill); p != s[logPos] {
			s[logPos], changed = p, true
		}
	}
	l.logReport(now, ext, head, fill, d)
	return changed
}

// peekSlidingLog: Allowed and RetryAfter for cost 1, the rest for cost 0.
func (l *Limit) peekSlidingLog(now int64, s *State, ext []int64, d *Decision) {
	head, fill := logRing(s, len(ext))
	resetDecision(d, l.Max)
	l.logVerdict(now, ext, head, fill, 1, d)
	l.logReport(now, ext, head, fill, d)
}

// refundSlidingLog un-admits the newest min(amount, counting) entries: the
// ring's head moves back over them. Entries older than the ring's Max are
// forgotten already, so they cannot come back.
func (l *Limit) refundSlidingLog(now int64, s *State, ext []int64, amount int64) bool {
	n := len(ext)
	head, fill := logRing(s, n)
	k := int(min(amount, int64(l.logLiveCount(now, ext, head, fill))))
	if k == 0 {
		return false
	}
	if head -= k; head < 0 {
		head += n
	}
	s[logPos] = packLog(head, fill-k)
	return true
}

// drainedSlidingLog fills the ring with Max entries at now.
func (l *Limit) drainedSlidingLog(now int64, s *State, ext []int64) {
	for i := range ext {
		ext[i] = now
	}
	s[logPos] = packLog(0, len(ext))
}

func (l *Limit) slidingLogFreshAt(s *State, ext []int64) int64 {
	head, fill := logRing(s, len(ext))
	return l.logFreshAt(ext, head, fill)
}
