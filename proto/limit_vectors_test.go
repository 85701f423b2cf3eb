package proto

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// limitVectors is the limit table's shared test vectors: every algorithm's
// canonical spec and its wire form, one per line, "SPEC ALGORITHM P0 P1
// P2". The Python client reads the same file (clients/python/tests/
// test_limit_vectors.py), so the two copies of the algorithms' names,
// parameter names, order and durations cannot drift apart.
const limitVectors = "testdata/limits.txt"

func vectorLimits() []Limit {
	return []Limit{
		TokenBucketLimit(10, time.Hour, 1),
		TokenBucketLimit(1, time.Millisecond, 1_000_000),
		GCRALimit(4, 1, time.Second),
		GCRALimit(0, 1000, 90*time.Minute),
		FixedWindowLimit(100, time.Minute),
		FixedWindowLimit(1, 1500*time.Microsecond),
		SlidingWindowLimit(100, 24*time.Hour),
		PacerLimit(4, time.Second, 2*time.Second),
		PacerLimit(1, 10*time.Nanosecond, 0),
	}
}

func TestLimitVectors(t *testing.T) {
	var b strings.Builder
	b.WriteString("# SPEC ALGORITHM P0 P1 P2: a canonical limit spec and its wire form (proto/limit_vectors_test.go)\n")
	for _, l := range vectorLimits() {
		back, err := ParseLimit(l.String())
		if err != nil || back != l {
			t.Fatalf("%v does not parse back: %+v, %v", l, back, err)
		}
		fmt.Fprintf(&b, "%s %d %d %d %d\n", l, l.Algorithm, l.P[0], l.P[1], l.P[2])
	}
	if *update {
		if err := os.WriteFile(limitVectors, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(limitVectors)
	if err != nil || string(got) != b.String() {
		t.Fatalf("%s is stale (%v): run go test ./proto -run TestLimitVectors -update", limitVectors, err)
	}
}
