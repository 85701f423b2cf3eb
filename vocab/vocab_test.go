package vocab

import (
	"math/rand/v2"
	"testing"
)

// BlockSum is part of the state file's format: a block written by one
// version is verified by the next. Pin its value on a few blocks.
func TestBlockSum_format(t *testing.T) {
	for _, c := range []struct {
		w    []int64
		want uint64
	}{
		{nil, 0},
		{[]int64{0}, 0xe220a8397b1dcdaf},
		{[]int64{1, 2, 3}, 0x9e09f4c4c4b009a6},
		{[]int64{-1, 1 << 62, 0, 7}, 0xf53cb91b3b540e2},
	} {
		if got := uint64(BlockSum(c.w)); got != c.want {
			t.Errorf("BlockSum(%v) = %#x, want %#x", c.w, got, c.want)
		}
	}
}

// A word's term, added and subtracted, keeps the sum of a block whose words
// change one at a time: the algorithms' O(1) update.
func TestBlockTerm_updatesSum(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	w := make([]int64, 64)
	sum := BlockSum(w)
	for range 1000 {
		i, v := rng.IntN(len(w)), int64(rng.Uint64())
		sum = int64(uint64(sum) + BlockTerm(i, v) - BlockTerm(i, w[i]))
		w[i] = v
		if want := BlockSum(w); sum != want {
			t.Fatalf("updated sum %#x, want %#x", sum, want)
		}
	}
}

// Every algorithm has a name that names it back; Invalid and values past
// the last have none.
func TestAlgorithmNames(t *testing.T) {
	for a := range Algorithm(255) {
		name, ok := a.Name()
		if ok != a.Valid() {
			t.Errorf("%d: Name ok %v, Valid %v", a, ok, a.Valid())
		}
		if ok && Named(name) != a {
			t.Errorf("Named(%q) = %v, want %v", name, Named(name), a)
		}
	}
	if Named("invalid") != Invalid || Named("") != Invalid {
		t.Error("Named names Invalid")
	}
	if got := Algorithm(10).String(); got != "algorithm(10)" {
		t.Errorf("Algorithm(10) = %q", got)
	}
}

// Quota is of protocol version 5 and keeps its state in its slot.
func TestQuotaVersion(t *testing.T) {
	for v := uint8(1); v <= 5; v++ {
		if got := Quota.ValidIn(v); got != (v >= 5) {
			t.Errorf("Quota.ValidIn(%d) = %v", v, got)
		}
		if !Concurrency.ValidIn(max(v, 3)) {
			t.Errorf("Concurrency.ValidIn(%d) = false", max(v, 3))
		}
	}
	if Quota.Extended() || !Concurrency.Extended() {
		t.Error("Extended: quota keeps its state in its slot, concurrency in a block")
	}
}
