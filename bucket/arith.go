package bucket

import (
	"math"
	"math/bits"
)

// Integer helpers for the decision path. Every result that does not fit in an
// int64 saturates at math.MaxInt64 or math.MinInt64 instead of wrapping, so a
// time near the end of the int64 range (year 2262) or a huge cost can only
// make a decision more conservative, never flip it.

// satAdd returns a+b, saturated.
func satAdd(a, b int64) int64 {
	s := a + b
	switch {
	case a > 0 && b > 0 && s < 0:
		return math.MaxInt64
	case a < 0 && b < 0 && s >= 0:
		return math.MinInt64
	}
	return s
}

// satSub returns a-b, saturated.
func satSub(a, b int64) int64 {
	d := a - b
	switch {
	case a >= 0 && b < 0 && d < 0:
		return math.MaxInt64
	case a < 0 && b > 0 && d >= 0:
		return math.MinInt64
	}
	return d
}

// satMul returns a*b, saturated at math.MaxInt64. It requires a, b >= 0.
func satMul(a, b int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(lo)
}

// addMul returns a + k*m and true, or false if it does not fit an int64.
// It requires k, m >= 0. It is exact where satAdd(a, satMul(k, m)) is not:
// k*m may exceed math.MaxInt64 while a negative a brings the sum back.
func addMul(a, k, m int64) (int64, bool) {
	hi, lo := bits.Mul64(uint64(k), uint64(m))
	switch {
	case hi != 0: // k*m >= 2^64 > MaxInt64 - MinInt64
		return 0, false
	case lo <= math.MaxInt64:
		s := a + int64(lo)
		return s, a < 0 || s >= 0
	case a >= 0:
		return 0, false
	}
	r := lo - -uint64(a) // lo >= 2^63 >= -a: no underflow
	return int64(r), r <= math.MaxInt64
}

// satAddMul returns a + k*m saturated at math.MaxInt64. It requires k, m >= 0.
func satAddMul(a, k, m int64) int64 {
	if s, ok := addMul(a, k, m); ok {
		return s
	}
	return math.MaxInt64
}

// ceilDiv returns ceil(a/b) for a >= 0, b >= 1, without overflow.
func ceilDiv(a, b int64) int64 {
	// The common cases need no division (tens of cycles on the hot path).
	switch {
	case b == 1:
		return a
	case a > 0 && a <= b:
		return 1
	}
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}

// clamp returns v limited to [lo, hi]. It requires lo <= hi.
func clamp(v, lo, hi int64) int64 {
	return min(max(v, lo), hi)
}

// windowStart returns the start of the window of length w (ns, >= 1) that
// holds now: the largest multiple of w since the Unix epoch that is <= now
// (floor division, so it is also right for negative now). Near
// math.MinInt64, where that multiple is not representable, it saturates at
// math.MinInt64; every now in that partial window still maps to the same
// start.
func windowStart(now, w int64) int64 {
	m := now % w
	if m < 0 {
		m += w
	}
	return satSub(now, m)
}

// floorDiv returns floor(a/b) for b >= 1 (for negative a too).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// u128 is an unsigned 128-bit integer for exact comparisons of products of
// two int64 values (the sliding window's weighted counts).
type u128 struct{ hi, lo uint64 }

// mul128 returns a*b exactly. It requires a, b >= 0.
func mul128(a, b int64) u128 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	return u128{hi, lo}
}

// lessEq reports whether x <= y.
func (x u128) lessEq(y u128) bool {
	return x.hi < y.hi || (x.hi == y.hi && x.lo <= y.lo)
}

// div returns floor(x/d) saturated at math.MaxInt64. It requires d >= 1.
func (x u128) div(d int64) int64 {
	if x.hi >= uint64(d) {
		return math.MaxInt64 // the quotient needs more than 64 bits
	}
	q, _ := bits.Div64(x.hi, x.lo, uint64(d))
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

// ceilDiv returns ceil(x/d) saturated at math.MaxInt64. It requires d >= 1.
func (x u128) ceilDiv(d int64) int64 {
	if x.hi >= uint64(d) {
		return math.MaxInt64
	}
	q, r := bits.Div64(x.hi, x.lo, uint64(d))
	if q >= math.MaxInt64 {
		return math.MaxInt64
	}
	if r != 0 {
		q++
	}
	return int64(q)
}
