package hist

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestIndexBounds(t *testing.T) {
	// Every value lands in the bucket whose range holds it, and buckets
	// are contiguous and increasing.
	vals := []uint64{0, 1, 127, 128, 129, 255, 256, 1000, 1 << 20, 1<<40 + 12345, 1<<63 - 1}
	for _, v := range vals {
		i := index(v)
		if i < 0 || i >= buckets {
			t.Fatalf("index(%d) = %d, out of [0, %d)", v, i, buckets)
		}
		if lo := lowest(i); lo > v {
			t.Errorf("value %d in bucket %d whose lowest is %d", v, i, lo)
		}
		if i+1 < buckets {
			if hi := lowest(i + 1); hi <= v {
				t.Errorf("value %d in bucket %d but bucket %d starts at %d", v, i, i+1, hi)
			}
		}
	}
	for i := 1; i < buckets; i++ {
		if lowest(i) <= lowest(i-1) {
			t.Fatalf("bucket %d starts at %d, not above bucket %d's %d", i, lowest(i), i-1, lowest(i-1))
		}
		if index(lowest(i)) != i {
			t.Fatalf("index(lowest(%d)) = %d", i, index(lowest(i)))
		}
	}
}

func TestQuantileAgainstSort(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h Histogram
	vals := make([]time.Duration, 100_000)
	for i := range vals {
		// Log-uniform from 50 ns to ~50 ms: the range a benchmark sees.
		v := time.Duration(float64(int64(50)<<uint(r.IntN(20))) * (1 + r.Float64()))
		vals[i] = v
		h.Record(v)
	}
	slices.Sort(vals)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999, 1} {
		want := vals[int(q*float64(len(vals))+0.999999)-1]
		got := h.Quantile(q)
		if diff := float64(got-want) / float64(want); diff > 1.0/64 || diff < -1.0/64 {
			t.Errorf("q%v = %v, sorted gives %v (%.2f%% off)", q, got, want, 100*diff)
		}
	}
	if h.Max() != vals[len(vals)-1] {
		t.Errorf("Max = %v, want %v", h.Max(), vals[len(vals)-1])
	}
}

func TestMergeAndRecordN(t *testing.T) {
	var a, b, all Histogram
	for i := range 1000 {
		d := time.Duration(i * 1000)
		if i%2 == 0 {
			a.RecordN(d, 3)
		} else {
			b.RecordN(d, 3)
		}
		all.RecordN(d, 3)
	}
	a.Merge(&b)
	if a != all {
		t.Fatal("merging two halves differs from recording everything in one")
	}
	if a.Count() != 3000 {
		t.Fatalf("Count = %d, want 3000", a.Count())
	}
	if m := a.Mean(); m != 499500 {
		t.Fatalf("Mean = %v, want 499.5µs", m)
	}
	var e Histogram
	if e.Quantile(0.5) != 0 || e.Mean() != 0 {
		t.Fatal("empty histogram must report 0")
	}
	e.Record(-5)
	if e.Quantile(1) != 0 {
		t.Fatal("negative durations count as 0")
	}
}

func BenchmarkRecord(b *testing.B) {
	var h Histogram
	d := time.Duration(1)
	for b.Loop() {
		h.Record(d)
		d = d*7 + 13&0xffffff
	}
}
