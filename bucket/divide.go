package bucket

import "math/bits"

// divider divides unsigned 64-bit numbers by a divisor fixed when a Limit is
// validated, with a multiply and shifts instead of a hardware division (tens
// of cycles on the decision path). It is the round-up method of Granlund and
// Montgomery, "Division by invariant integers using multiplication" (1994),
// figure 4.1, exact for every dividend.
type divider struct {
	d     uint64 // the divisor; 0 means not prepared: divide directly
	m     uint64 // magic multiplier
	shift uint8  // post-shift, l-1 where 2^(l-1) < d <= 2^l
}

// newDivider prepares division by d >= 1.
func newDivider(d uint64) divider {
	if d <= 1 {
		return divider{d: d}
	}
	l := uint(bits.Len64(d - 1)) // ceil(log2 d), in [1, 64]
	// m = floor(2^64 * (2^l - d) / d) + 1; the high word 2^l - d < d.
	var hi uint64
	if l < 64 {
		hi = 1<<l - d
	} else {
		hi = -d // 2^64 - d
	}
	q, _ := bits.Div64(hi, 0, d)
	return divider{d: d, m: q + 1, shift: uint8(l - 1)}
}

// div returns n / dv.d.
func (dv divider) div(n uint64) uint64 {
	if dv.d <= 1 {
		if dv.d == 1 {
			return n
		}
		panic("bucket: divider used before Validate")
	}
	t, _ := bits.Mul64(dv.m, n)
	return (t + (n-t)>>1) >> dv.shift
}
