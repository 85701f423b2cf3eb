package engine

import "github.com/sluicehq/sluice/bucket"

// Combine returns the decision of several limits decided together (a
// named limit that lists several, all or nothing) as one, and the index of
// the limit it reports: allowed iff every one is; the limit reported is,
// if any is denied, the denied one that allows last (the largest
// RetryAfter, a limit that never allows counting as the largest; the first
// of equals), else the one with the least Remaining (the first of equals).
// Limit is that limit's; Remaining is the least of all (what the caller can
// still use is bounded by every limit); RetryAfter is the reported one's
// (-1 if allowed); ResetAfter and Delay are the largest of all (every
// bucket is back to new only when the last is; a pacer's delay holds the
// whole request). ds must not be empty.
func Combine(ds []bucket.Decision) (bucket.Decision, int) {
	which := 0
	allowed := true
	for i := range ds {
		allowed = allowed && ds[i].Allowed
		if i > 0 && binds(&ds[i], &ds[which]) {
			which = i
		}
	}
	d := ds[which]
	d.Allowed = allowed
	for i := range ds {
		d.Remaining = min(d.Remaining, ds[i].Remaining)
		d.ResetAfter = max(d.ResetAfter, ds[i].ResetAfter)
		d.Delay = max(d.Delay, ds[i].Delay)
	}
	if allowed {
		d.RetryAfter = -1
	}
	return d, which
}

// binds reports whether a is more restrictive than b, the limit to report
// so far: a denial over an allowance, then the later retry (never latest),
// then, among allowances, the fewer remaining.
func binds(a, b *bucket.Decision) bool {
	switch {
	case a.Allowed != b.Allowed:
		return !a.Allowed
	case !a.Allowed:
		return retryRank(a.RetryAfter) > retryRank(b.RetryAfter)
	}
	return a.Remaining < b.Remaining
}

// retryRank orders retry times: -1 (never) after every other.
func retryRank(r int64) uint64 {
	if r < 0 {
		return ^uint64(0)
	}
	return uint64(r)
}
