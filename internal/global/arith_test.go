package global

import (
	"context"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// helperScript is lua/wide.lua (with its includes) followed by a driver
// that applies one of its functions to every triple or quadruple of ARGV.
func helperScript(t *testing.T) string {
	t.Helper()
	h, err := loadScript("wide.lua")
	if err != nil {
		t.Fatal(err)
	}
	return h + `
fmod = math.fmod
local out = {}
if ARGV[1] == "muldiv" then
  for i = 2, #ARGV, 3 do
    out[#out + 1] = string.format("%d", muldiv(tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])))
  end
else
  for i = 2, #ARGV, 4 do
    local le = mulle(tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3]))
    out[#out + 1] = le and "1" or "0"
  end
end
return out
`
}

// Ensure that the script's exact products and quotients agree with
// math/big, on random operands up to their bounds and on exact multiples
// (where an off-by-one in a comparison shows).
func TestScriptArithmetic(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	src := helperScript(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 1))
	const two53, two52 = int64(1) << 53, int64(1) << 52
	operand := func(hi int64) int64 {
		switch r.IntN(4) {
		case 0:
			return r.Int64N(1000)
		case 1:
			return hi - 1 - r.Int64N(1000)
		}
		return r.Int64N(hi)
	}
	for round := range 20 {
		// muldiv: floor(a*b/c), saturated at 2^53.
		args := []any{"muldiv"}
		var want []int64
		for range 200 {
			a, b, c := operand(two53), operand(two53), 1+operand(two52)
			if round%2 == 1 { // an exact multiple of c, or one off
				q := operand(two53) % (two53/max(1, c) + 1)
				p := new(big.Int).Mul(big.NewInt(q), big.NewInt(c))
				p.Add(p, big.NewInt(r.Int64N(3)-1))
				// a*b = p with b = 1 keeps p below 2^53; use a factor when
				// p is even so the limb path runs.
				if p.Sign() < 0 || p.Cmp(big.NewInt(two53)) >= 0 {
					continue
				}
				a, b = p.Int64(), 1
				if a%2 == 0 && a > 0 {
					a, b = a/2, 2
				}
				// Scale up past 2^53: a*k and c*k keep the quotient.
				if k := int64(1) << r.IntN(20); c <= two52/k && a <= (two53-1)/k {
					a, c = a*k, c*k
				}
			}
			args = append(args, a, b, c)
			q := new(big.Int).Mul(big.NewInt(a), big.NewInt(b))
			q.Quo(q, big.NewInt(c))
			if q.Cmp(big.NewInt(two53)) > 0 {
				q.SetInt64(two53)
			}
			want = append(want, q.Int64())
		}
		got, err := rdb.Eval(ctx, src, nil, args...).StringSlice()
		if err != nil {
			t.Fatal(err)
		}
		for i, w := range want {
			if got[i] != big.NewInt(w).String() {
				t.Fatalf("muldiv(%v, %v, %v) = %s, want %d", args[1+3*i], args[2+3*i], args[3+3*i], got[i], w)
			}
		}
		// mulle: a*b <= c*d.
		args = []any{"mulle"}
		var wantLE []bool
		for range 200 {
			a, b, c, d := operand(two53), operand(two53), operand(two53), operand(two53)
			if round%2 == 1 { // equal products, or nearly
				c, d = b, a
				if r.IntN(2) == 0 && a > 0 {
					a--
				}
			}
			args = append(args, a, b, c, d)
			x := new(big.Int).Mul(big.NewInt(a), big.NewInt(b))
			y := new(big.Int).Mul(big.NewInt(c), big.NewInt(d))
			wantLE = append(wantLE, x.Cmp(y) <= 0)
		}
		got, err = rdb.Eval(ctx, src, nil, args...).StringSlice()
		if err != nil {
			t.Fatal(err)
		}
		for i, w := range wantLE {
			if (got[i] == "1") != w {
				t.Fatalf("mulle(%v, %v, %v, %v) = %s, want %v", args[1+4*i], args[2+4*i], args[3+4*i], args[4+4*i], got[i], w)
			}
		}
	}
}
