package metrics

import (
	"sync/atomic"
)

// maxBuckets bounds a histogram's buckets, so they live in a fixed array.
const maxBuckets = 20

// histogram is a fixed-bucket histogram of int64 observations (nanoseconds
// or slots): one atomic add for the bucket and one for the sum. Counts are
// per bucket; the scrape accumulates them.
type histogram struct {
	upper  []int64 // inclusive upper bounds, ascending; the last bucket is +Inf
	div    float64 // divides a bound or the sum into the exported unit
	counts [maxBuckets + 1]atomic.Uint64
	sum    atomic.Int64
}

// bounds are a histogram's upper bounds and the divisor into the exported unit.
type bounds struct {
	upper []int64
	div   float64
}

var (
	// latencyBounds: 250 ns to 100 ms, in ns, exported in seconds. A local
	// decision takes about a microsecond; the top buckets catch stalls.
	latencyBounds = bounds{[]int64{250, 500, 1e3, 2.5e3, 5e3, 1e4, 2.5e4, 5e4, 1e5, 2.5e5, 1e6, 1e7, 1e8}, 1e9}
	// syncBounds: 100 µs to 10 s, in ns, exported in seconds.
	syncBounds = bounds{[]int64{1e5, 1e6, 5e6, 1e7, 2.5e7, 5e7, 1e8, 2.5e8, 1e9, 2.5e9, 1e10}, 1e9}
	// probeBounds: displacements from the home slot, in slots, up to the
	// default probe cap.
	probeBounds = bounds{[]int64{0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512}, 1}
)

func (h *histogram) init(b bounds) {
	if len(b.upper) > maxBuckets {
		panic("metrics: too many histogram buckets")
	}
	h.upper, h.div = b.upper, b.div
}

// observe records v.
func (h *histogram) observe(v int64) {
	i := 0
	for i < len(h.upper) && v > h.upper[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sum.Add(v)
}

// snapshot returns the count, the sum in the exported unit and the
// cumulative counts by upper bound, as client_golang's const histograms
// take them.
func (h *histogram) snapshot() (count uint64, sum float64, buckets map[float64]uint64) {
	buckets = make(map[float64]uint64, len(h.upper))
	for i, u := range h.upper {
		count += h.counts[i].Load()
		buckets[float64(u)/h.div] = count
	}
	count += h.counts[len(h.upper)].Load()
	return count, float64(h.sum.Load()) / h.div, buckets
}
