package proto

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// limitVectors is the limit table's shared test vectors. The Python client
// reads the same file (clients/python/tests/test_limit_vectors.py), so the
// two copies of the algorithms' names, parameter names, order, defaults,
// durations and error messages cannot drift apart. One vector a line:
//
//	algorithm N NAME               an algorithm of this version: a reader must know every one
//	ok SPEC A P0 P1 P2 [TZ]        a canonical spec: it parses to the wire form, which formats back to SPEC
//	                               (TZ: a quota's time zone, when not UTC; parse and shadow lines too)
//	parse SPEC A P0 P1 P2          a spec that is not canonical (order, defaults, units) and its wire form
//	shadow SPEC A P0 P1 P2         a canonical spec with shadow=true: its wire form, and acquires of it are shadow requests
//	invalid SPEC MESSAGE...        a spec ParseLimit refuses: its error is `limit "SPEC": MESSAGE`
//
// Specs hold no whitespace; # starts a comment line.
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
		SlidingLogLimit(100, time.Minute),
		SlidingLogLimit(1, 250*time.Millisecond),
		WindowCountersLimit(100, time.Hour, DefaultCounters, false),
		WindowCountersLimit(1000, 24*time.Hour, 64, true),
		WindowCountersLimit(5, time.Second, 1, false),
		WindowCountersLimit(0, 0, 0, true),
		ConcurrencyLimit(10, 30*time.Second),
		ConcurrencyLimit(1, 1500*time.Microsecond),
		QuotaLimit(1000, QuotaMonth, 1, "", 0, 0),
		QuotaLimit(100, QuotaDay, 1, "Europe/Paris", 0, 0),
		QuotaLimit(5000, QuotaMonth, 3, "America/New_York", 15, 0),
		QuotaLimit(7, QuotaWeek, 2, "Asia/Kolkata", 0, 6),
		QuotaLimit(1, QuotaYear, 1, "America/Argentina/Buenos_Aires", 31, 0),
		QuotaLimit(0, QuotaDay, 1, "", 0, 0),
	}
}

// vectorParses are specs that are not canonical.
var vectorParses = []string{
	"token_bucket:refill_time=1s,max=5",
	"gcra:period=1500000000,count=+3,burst=0",
	"sliding_log:window=1us,limit=2",
	"window_counters:limit=100,window=1h",
	"window_counters:count_denied=false,counters=8,window=90s,limit=3",
	"window_counters:limit=1,window=1s,count_denied=true",
	"concurrency:lease=1500ms,limit=4",
	"gcra:shadow=false,burst=4,count=1,period=1s",
	"fixed_window:shadow=true,window=60s,limit=5",
	"sliding_window:limit=20,window=1d",
	"token_bucket:max=10,refill_time=1d12h,refill_amount=1",
	"window_counters:limit=1000,window=0.5d,counters=24",
	"concurrency:limit=2,lease=7d",
	"quota:period=day,limit=10",
	"quota:limit=10,period=1week,week_start=monday",
	"quota:limit=10,period=month,tz=UTC,anchor=1",
	"quota:tz=Etc/GMT+5,anchor=31,limit=3,period=12month",
}

// vectorShadows are canonical specs with shadow=true.
var vectorShadows = []string{
	"token_bucket:max=10,refill_time=1h0m0s,refill_amount=1,shadow=true",
	"sliding_log:limit=100,window=1m0s,shadow=true",
	"window_counters:limit=10,window=1m0s,counters=60,count_denied=true,shadow=true",
}

// vectorInvalid are specs ParseLimit refuses.
var vectorInvalid = []string{
	"gcra:burst=1,count=1,period=1s,shadow=yes",
	"pacer:rate=1,period=1s,max_delay=0s,shadow=true,shadow=false",
	"leaky:rate=1",
	"1abc",
	"gcra:burst=x,count=1,period=1s",
	"token_bucket:max=1",
	"fixed_window:limit=1,window=1s,p2=0",
	"sliding_log:limit=1",
	"sliding_log:limit=1,window=-1s",
	"window_counters:limit=1,window=1s,counters=256",
	"window_counters:limit=1,window=1s,counters=-1",
	"window_counters:limit=1,window=1s,counters=99999999999999999999",
	"window_counters:limit=1,window=1s,count_denied=yes",
	"window_counters:limit=1,window=1s,count_denied=True",
	"window_counters:limit=1,window=1s,counters=1,counters=1",
	"window_counters:window=1s,counters=1",
	"window_counters:limit=1,window=1s,count_denied",
	"concurrency:limit=1,window=1s",
	"concurrency:limit=1",
	"concurrency:limit=1,lease=1x",
	"sliding_window:limit=1,window=1D",
	"fixed_window:limit=1,window=d",
	"gcra:burst=1,count=1,period=106752d",
	"quota:limit=10",
	"quota:limit=10,period=fortnight",
	"quota:limit=10,period=2",
	"quota:limit=10,period=Day",
	"quota:limit=10,period=-1day",
	"quota:limit=10,period=99999999999999999999month",
	"quota:limit=10,period=day,tz=Europe/Paris,tz=UTC",
	"quota:limit=10,period=day,tz=Europe/Par!s",
	"quota:limit=10,period=week,week_start=mon",
	"quota:limit=10,period=month,anchor=256",
	"quota:limit=10,period=month,anchor=x",
	"quota:limit=10,period=1d",
}

// wireFields is a vector's wire form of l: A P0 P1 P2, then TZ if set.
func wireFields(l Limit) string {
	s := fmt.Sprintf("%d %d %d %d", l.Algorithm, l.P[0], l.P[1], l.P[2])
	if l.TZ != "" {
		s += " " + l.TZ
	}
	return s
}

func TestLimitVectors(t *testing.T) {
	var b strings.Builder
	b.WriteString("# Shared limit-spec vectors, written by go test ./proto -run TestLimitVectors -update;\n")
	b.WriteString("# proto/limit_vectors_test.go describes the lines.\n")
	for a := TokenBucket; a < numAlgorithms; a++ {
		fmt.Fprintf(&b, "algorithm %d %s\n", a, a)
	}
	covered := map[Algorithm]bool{}
	for _, l := range vectorLimits() {
		back, err := ParseLimit(l.String())
		if err != nil || back != l {
			t.Fatalf("%v does not parse back: %+v, %v", l, back, err)
		}
		covered[l.Algorithm] = true
		fmt.Fprintf(&b, "ok %s %s\n", l, wireFields(l))
	}
	for a := TokenBucket; a < numAlgorithms; a++ {
		if !covered[a] {
			t.Errorf("no canonical vector of %v", a)
		}
	}
	for _, spec := range vectorParses {
		l, err := ParseLimit(spec)
		if err != nil || l.String() == spec {
			t.Fatalf("%q: %v, or it is canonical", spec, err)
		}
		fmt.Fprintf(&b, "parse %s %s\n", spec, wireFields(l))
	}
	for _, spec := range vectorShadows {
		l, err := ParseLimit(spec)
		if err != nil || !l.Shadow || l.String() != spec {
			t.Fatalf("%q: %+v, %v: want it shadowed and canonical", spec, l, err)
		}
		fmt.Fprintf(&b, "shadow %s %s\n", spec, wireFields(l))
	}
	for _, spec := range vectorInvalid {
		_, err := ParseLimit(spec)
		prefix := "proto: limit " + strconv.Quote(spec) + ": "
		if !errors.Is(err, ErrInvalidLimit) || !strings.HasPrefix(err.Error(), prefix) {
			t.Fatalf("%q: %v", spec, err)
		}
		fmt.Fprintf(&b, "invalid %s %s\n", spec, strings.TrimPrefix(err.Error(), prefix))
	}
	for _, spec := range append(append(vectorParses, vectorInvalid...), vectorShadows...) {
		if strings.ContainsAny(spec, " \t") || spec == "" {
			t.Fatalf("vector %q: a spec in the file may not be empty or hold whitespace", spec)
		}
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
