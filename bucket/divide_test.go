package bucket

import (
	"math"
	"math/rand/v2"
	"testing"
)

// Ensure the divider agrees with hardware division for divisors and
// dividends across the whole range, including powers of two, their
// neighbours and the extremes.
func TestDivider(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	var divisors []uint64
	for k := range 64 {
		p := uint64(1) << k
		divisors = append(divisors, p, p-1, p+1)
	}
	for range 2000 {
		divisors = append(divisors, rng.Uint64()>>rng.IntN(64)|1, rng.Uint64N(1e12)+1)
	}
	divisors = append(divisors, 3, 7, 10, 1000, 1e9, math.MaxInt64, math.MaxUint64)
	for _, d := range divisors {
		if d == 0 {
			continue
		}
		dv := newDivider(d)
		check := func(n uint64) {
			if got, want := dv.div(n), n/d; got != want {
				t.Fatalf("%d / %d = %d, want %d", n, d, got, want)
			}
		}
		for _, n := range []uint64{0, 1, d - 1, d, d + 1, 2*d - 1, 2 * d, math.MaxInt64, math.MaxUint64, math.MaxUint64 - 1} {
			check(n)
		}
		for range 200 {
			check(rng.Uint64() >> rng.IntN(64))
		}
	}
}
