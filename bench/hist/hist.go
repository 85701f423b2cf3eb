// Package hist is a fixed-size log-linear latency histogram for the load
// generator: recording is a few instructions and never allocates, merging
// is a sum, and a quantile is exact to within 1/64 (1.6%) of its value.
//
// Values are nanoseconds. A value v lands in the bucket of its top 7
// significant bits: below 128 each value has its own bucket; above, each
// power of two is split into 64 equal buckets.
package hist

import (
	"math/bits"
	"time"
)

const (
	subBits  = 6
	subCount = 1 << subBits // buckets per power of two
	// Values up to 2^63-1 need (63-subBits) groups of subCount buckets
	// above the linear range of 2*subCount values.
	buckets = (64-subBits)*subCount + subCount
)

// A Histogram counts values. The zero value is empty and ready to use. It
// is not safe for concurrent use: give each goroutine its own and Merge.
type Histogram struct {
	counts [buckets]uint64
	n      uint64
	sum    uint64
	max    uint64
}

func index(v uint64) int {
	if v < 2*subCount {
		return int(v)
	}
	e := bits.Len64(v) - subBits - 1 // shift that leaves the top subBits+1 bits
	return (e+1)*subCount + int(v>>uint(e)) - subCount
}

// lowest returns the smallest value that lands in bucket i.
func lowest(i int) uint64 {
	if i < 2*subCount {
		return uint64(i)
	}
	e := i/subCount - 1
	return uint64(i%subCount+subCount) << uint(e)
}

// Record counts one value.
func (h *Histogram) Record(d time.Duration) { h.RecordN(d, 1) }

// RecordN counts n occurrences of one value: a pipelined batch records its
// round trip once for each of its requests.
func (h *Histogram) RecordN(d time.Duration, n uint64) {
	v := uint64(0)
	if d > 0 {
		v = uint64(d)
	}
	h.counts[index(v)] += n
	h.n += n
	h.sum += v * n
	if v > h.max {
		h.max = v
	}
}

// Merge adds o's counts to h.
func (h *Histogram) Merge(o *Histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	if o.max > h.max {
		h.max = o.max
	}
}

// Reset empties h.
func (h *Histogram) Reset() { *h = Histogram{} }

// Count is the number of values recorded.
func (h *Histogram) Count() uint64 { return h.n }

// Max is the largest value recorded, exactly.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Mean is the average value, exactly; 0 when empty.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / h.n)
}

// Quantile returns the value below which a fraction q (0 to 1) of the
// values lie: the midpoint of the bucket holding the value of rank
// ceil(q*n), never above Max. It returns 0 when h is empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.999999)
	if rank < 1 {
		rank = 1
	}
	if rank > h.n {
		rank = h.n
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo := lowest(i)
			hi := lowest(i + 1)
			mid := lo + (hi-lo)/2
			if i < 2*subCount {
				mid = lo
			}
			if mid > h.max {
				mid = h.max
			}
			return time.Duration(mid)
		}
	}
	return time.Duration(h.max)
}
