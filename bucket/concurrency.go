package bucket

import (
	"math"

	"fmt"
)

// concurrency: nginx limit_conn's slots in flight. At most Max leases are
// held at once; a lease is held until it is released or its expiry passes.
// The extension holds Max entries of two words, ext[2i] the expiry (Unix ns;
// the entry is held iff expiry > now; 0 when released or never taken) and
// ext[2i+1] the lease's id.

// concurrency State word 0 is not read. Versions before lease ids were
// given by the caller kept the latest id there, and drew the next one from
// it: Init and Drained still seed it with now, as those versions
// expect of a bucket they open.

// scanLeases returns, at now, the number of free entries and the index of
// the first (-1 if none), the earliest expiry of a held entry
// (math.MaxInt64 if none) and the latest expiry of any entry.
func scanLeases(now int64, ext []int64) (free, first int, earliest, latest int64) {
	first, earliest, latest = -1, math.MaxInt64, math.MinInt64
	for i := 0; i+1 < len(ext); i += 2 {
		e := ext[i]
		latest = max(latest, e)
		if e > now {
			earliest = min(earliest, e)
		} else {
			if first < 0 {
				first = i / 2
			}
			free++
		}
	}
	return free, first, earliest, latest
}

// leasesFreshAt returns the FreshAt of entries whose latest expiry is
// latest: then every entry is free. math.MinInt64 if no entry expires after
// 0, the expiry of a released entry and of a new bucket's.
func leasesFreshAt(latest int64) int64 {
	if latest <= 0 {
		return math.MinInt64
	}
	return latest
}

func concurrencyFreshAt(ext []int64) int64 {
	_, _, _, latest := scanLeases(math.MaxInt64, ext)
	return leasesFreshAt(latest)
}

// peekConcurrency: Remaining is the number of free entries, Allowed whether
// there is one; otherwise RetryAfter is when the first held one expires.
func (l *Limit) peekConcurrency(now int64, ext []int64, d *Decision) {
	free, _, earliest, latest := scanLeases(now, ext)
	resetDecision(d, l.Max)
	d.Remaining = int64(free)
	if free > 0 {
		d.Allowed = true
	} else {
		d.RetryAfter = retryAfter(earliest, now)
	}
	d.ResetAfter = resetAfter(leasesFreshAt(latest), now)
}

// AcquireLease takes a concurrency lease at now if an entry is free: it is
// held until now+Lease (saturated) under the id id, the caller's handle for
// ReleaseLease. The caller draws id at random, so that no lease id can be
// told from another (this package reads no randomness); id 0, which no
// lease has, and an id an entry of the bucket has already are replaced by
// the next value that is neither. Then d is allowed, Remaining is the
// number of entries still free, and lease is the id the entry holds (never
// 0). Otherwise d is denied with RetryAfter the time until the first held
// entry expires, lease is 0, and nothing changes. changed reports whether s
// or ext was modified. An entry's expiry is absolute, so an earlier now
// finds only more entries held. l must be a concurrency limit that passed
// Validate; any other algorithm panics.
func (l *Limit) AcquireLease(now int64, s *State, ext []int64, id int64, d *Decision) (lease int64, changed bool) {
	l.checkLeases(ext)
	free, first, earliest, latest := scanLeases(now, ext)
	resetDecision(d, l.Max)
	if free == 0 {
		d.RetryAfter = retryAfter(earliest, now)
		d.ResetAfter = resetAfter(leasesFreshAt(latest), now)
		return 0, false
	}
	for id == 0 || hasLease(ext, id) { // at most Max+1 steps
		id++
	}
	expiry := satAdd(now, l.Lease)
	changed = setExt(s, ext, 2*first, expiry)
	if setExt(s, ext, 2*first+1, id) {
		changed = true
	}
	d.Allowed = true
	d.Remaining = int64(free - 1)
	d.ResetAfter = resetAfter(leasesFreshAt(max(latest, expiry)), now)
	return id, changed
}

// hasLease reports whether an entry of ext has the id id, held or not.
func hasLease(ext []int64, id int64) bool {
	for i := 1; i < len(ext); i += 2 {
		if ext[i] == id {
			return true
		}
	}
	return false
}

// ReleaseLease gives back the lease with id lease, if its entry is held at
// now: the entry is freed (expiry 0) and released and changed are true. A
// lease that is unknown, released already or expired changes nothing, and
// so does id 0, which no lease has (a drained bucket's entries have it). d
// describes the bucket afterwards, as Peek. l must be a concurrency limit
// that passed Validate; any other algorithm panics.
func (l *Limit) ReleaseLease(now int64, s *State, ext []int64, lease int64, d *Decision) (released, changed bool) {
	l.checkLeases(ext)
	if lease != 0 {
		for i := 0; i+1 < len(ext); i += 2 {
			if ext[i+1] == lease && ext[i] > now && setExt(s, ext, i, 0) {
				released = true
				break
			}
		}
	}
	l.peekConcurrency(now, ext, d)
	return released, released
}

// drainedConcurrency: every entry held until now+Lease under id 0, which no
// lease matches.
func (l *Limit) drainedConcurrency(now int64, s *State, ext []int64) {
	expiry := satAdd(now, l.Lease)
	for i := 0; i+1 < len(ext); i += 2 {
		ext[i], ext[i+1] = expiry, 0
	}
	s[0] = now
}

// checkLeases panics unless l is a concurrency limit and ext its block:
// only concurrency takes leases.
func (l *Limit) checkLeases(ext []int64) {
	if l.Algorithm.Valid() && l.Algorithm != Concurrency {
		panic(fmt.Sprintf("bucket: %v takes no leases: only concurrency does", l.Algorithm))
	}
	l.checkExt(ext)
	if l.Algorithm != Concurrency {
		badAlgorithm(l.Algorithm)
	}
}
