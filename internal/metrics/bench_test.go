package metrics

import (
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/shm"
)

// BenchmarkRecord is what one decision adds to the decision path: the
// counter, the decision latency, the request latency and the probe length.
func BenchmarkRecord(b *testing.B) {
	r := New()
	l := r.Limit("login")
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			l.Decision(bucket.TokenBucket, Allowed)
			r.DecisionDuration(bucket.TokenBucket, 900*time.Nanosecond)
			r.Request(Native, 2*time.Microsecond)
			r.Probe(1)
		}
	})
	b.Run("by-name", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r.Decision("login", bucket.TokenBucket, Allowed, 900*time.Nanosecond)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				l.Decision(bucket.TokenBucket, Allowed)
				r.DecisionDuration(bucket.TokenBucket, 900*time.Nanosecond)
				r.Request(Native, 2*time.Microsecond)
			}
		})
	})
}

// BenchmarkAcquire compares an engine acquire on a heap table of 64K
// buckets alone, and with what the server records around it. Both read the
// clock once, as the server does for the decision's time. "counters" adds
// the outcome counter; "metrics" adds it, a second clock read for the
// latency and the histogram. On a VM whose clock read costs 30-55 ns, that
// read is most of the difference.
func BenchmarkAcquire(b *testing.B) {
	const keys = 1 << 16
	t, err := shm.NewHeap(shm.Options{SlotCount: keys * 10 / 7})
	if err != nil {
		b.Fatal(err)
	}
	e := engine.New(t)
	l, err := engine.NewLimit(bucket.Limit{Algorithm: bucket.GCRA, Burst: 1000, Count: 1_000_000, Period: int64(time.Second)})
	if err != nil {
		b.Fatal(err)
	}
	key := make([]byte, 0, 32)
	var d bucket.Decision
	for i := range keys { // every variant finds its buckets in place
		key = strconv.AppendInt(append(key[:0], "user:"...), int64(i), 10)
		if err := e.Acquire(&d, key, &l, 1, engine.At(time.Now().UnixNano()), 0); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("bare", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			key = strconv.AppendInt(append(key[:0], "user:"...), int64(i%keys), 10)
			now := time.Now().UnixNano()
			if err := e.Acquire(&d, key, &l, 1, engine.At(now), 0); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	// counters records the outcome; metrics the latency too (a second
	// clock read), as the server does for the decisions it times.
	for _, timed := range []bool{false, true} {
		name := "counters"
		if timed {
			name = "metrics"
		}
		b.Run(name, func(b *testing.B) {
			r := New()
			lm := r.Limit("api")
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				key = strconv.AppendInt(append(key[:0], "user:"...), int64(i%keys), 10)
				now := time.Now().UnixNano()
				err := e.Acquire(&d, key, &l, 1, engine.At(now), 0)
				o := Allowed
				switch {
				case err != nil:
					o = Failed
				case !d.Allowed:
					o = Denied
				}
				lm.Decision(bucket.GCRA, o)
				if timed {
					r.DecisionDuration(bucket.GCRA, time.Duration(time.Now().UnixNano()-now))
				}
				i++
			}
		})
	}
}
