package bucket

import (
	"math/big"
	"testing"
)

// edges are the int64 values where saturating arithmetic goes wrong first.
var edges = []int64{minI64, minI64 + 1, minI64 / 2, -sec, -2, -1, 0, 1, 2, 3, sec, maxI64 / 2, maxI64/2 + 1, maxI64 - 1, maxI64}

// sat clamps an exact result to the int64 range.
func sat(x *big.Int) int64 {
	switch {
	case x.Cmp(big.NewInt(maxI64)) > 0:
		return maxI64
	case x.Cmp(big.NewInt(minI64)) < 0:
		return minI64
	}
	return x.Int64()
}

// TestSaturating checks every helper against math/big on all pairs and
// triples of edge values.
func TestSaturating(t *testing.T) {
	bi := big.NewInt
	for _, a := range edges {
		for _, b := range edges {
			if got, want := satAdd(a, b), sat(new(big.Int).Add(bi(a), bi(b))); got != want {
				t.Errorf("satAdd(%d, %d) = %d, want %d", a, b, got, want)
			}
			if got, want := satSub(a, b), sat(new(big.Int).Sub(bi(a), bi(b))); got != want {
				t.Errorf("satSub(%d, %d) = %d, want %d", a, b, got, want)
			}
			if a < 0 || b < 0 {
				continue
			}
			if got, want := satMul(a, b), sat(new(big.Int).Mul(bi(a), bi(b))); got != want {
				t.Errorf("satMul(%d, %d) = %d, want %d", a, b, got, want)
			}
			if b > 0 {
				q := new(big.Int).Add(bi(a), bi(b-1))
				if got, want := ceilDiv(a, b), q.Div(q, bi(b)).Int64(); got != want {
					t.Errorf("ceilDiv(%d, %d) = %d, want %d", a, b, got, want)
				}
			}
			for _, base := range edges {
				exact := new(big.Int).Mul(bi(a), bi(b))
				exact.Add(exact, bi(base))
				got, ok := addMul(base, a, b)
				if ok != exact.IsInt64() || (ok && got != exact.Int64()) {
					t.Errorf("addMul(%d, %d, %d) = %d, %v; want %v", base, a, b, got, ok, exact)
				}
				if got, want := satAddMul(base, a, b), sat(exact); got != want {
					t.Errorf("satAddMul(%d, %d, %d) = %d, want %d", base, a, b, got, want)
				}
			}
		}
	}
}

func TestU128(t *testing.T) {
	bi := big.NewInt
	for _, a := range edges {
		for _, b := range edges {
			if a < 0 || b < 0 {
				continue
			}
			p := mul128(a, b)
			exact := new(big.Int).Mul(bi(a), bi(b))
			got := new(big.Int).Lsh(new(big.Int).SetUint64(p.hi), 64)
			got.Or(got, new(big.Int).SetUint64(p.lo))
			if got.Cmp(exact) != 0 {
				t.Errorf("mul128(%d, %d) = %v, want %v", a, b, got, exact)
			}
			for _, d := range edges {
				if d < 1 {
					continue
				}
				q, r := new(big.Int).QuoRem(exact, bi(d), new(big.Int))
				if gotq, want := p.div(d), sat(q); gotq != want {
					t.Errorf("(%d*%d).div(%d) = %d, want %d", a, b, d, gotq, want)
				}
				if r.Sign() != 0 {
					q.Add(q, bi(1))
				}
				if gotq, want := p.ceilDiv(d), sat(q); gotq != want {
					t.Errorf("(%d*%d).ceilDiv(%d) = %d, want %d", a, b, d, gotq, want)
				}
				other := mul128(d, d)
				if got, want := p.lessEq(other), exact.Cmp(new(big.Int).Mul(bi(d), bi(d))) <= 0; got != want {
					t.Errorf("(%d*%d).lessEq(%d*%d) = %v, want %v", a, b, d, d, got, want)
				}
			}
		}
	}
}
