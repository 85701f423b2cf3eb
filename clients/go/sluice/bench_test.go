package sluice_test

import (
	"context"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clients/go/sluice"
	"github.com/sluicehq/sluice/proto"
)

// benchLimit never runs out: the sidecar's clock stands still in tests.
var benchLimit = sluice.TokenBucket(1<<50, time.Second, 1)

// BenchmarkClient measures a round trip through the client to an
// in-process sidecar: one goroutine (serial), and many sharing the client
// (parallel), whose requests the client batches into shared writes. The
// baseline, raw/serial, is the same round trip on a bare connection with
// no client: one write and one read per request.
func BenchmarkClient(b *testing.B) {
	sc := startSidecar(b)
	c := dial(b, sc.cfg.SocketPath, sluice.WithFailurePolicy(sluice.FailError)) // an outage must fail the benchmark, not allow
	cx := context.Background()
	b.Run("acquire/serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.Acquire(cx, benchLimit, "bench:serial", 1); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("acquire/parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := c.Acquire(cx, benchLimit, "bench:parallel", 1); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	// The latency each caller sees with the host's cores saturated: 64
	// callers per core against a sidecar sharing the cores. Its tail
	// (p99.9, max) is what DefaultTimeout must stay well above.
	b.Run("acquire/saturated", func(b *testing.B) {
		b.SetParallelism(64)
		var mu sync.Mutex
		var all []time.Duration
		b.RunParallel(func(pb *testing.PB) {
			var mine []time.Duration
			for pb.Next() {
				start := time.Now()
				if _, err := c.Acquire(cx, benchLimit, "bench:saturated", 1); err != nil {
					b.Error(err)
					return
				}
				mine = append(mine, time.Since(start))
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		})
		if len(all) == 0 {
			return
		}
		slices.Sort(all)
		at := func(q float64) float64 { return float64(all[int(q*float64(len(all)-1))].Microseconds()) }
		b.ReportMetric(at(0.5), "p50-µs")
		b.ReportMetric(at(0.99), "p99-µs")
		b.ReportMetric(at(0.999), "p99.9-µs")
		b.ReportMetric(at(1), "max-µs")
	})
	b.Run("raw/serial", func(b *testing.B) {
		b.ReportAllocs()
		nc, err := net.Dial("unix", sc.cfg.SocketPath)
		if err != nil {
			b.Fatal(err)
		}
		defer nc.Close()
		req, start := proto.BeginFrame(nil, proto.KindRequest, 1)
		req = proto.EndFrame(proto.AppendItem(req, proto.OpAcquire, 0, benchLimit, 1, 0, []byte("bench:raw")), start, 1)
		resp := make([]byte, 4096)
		var r proto.Result
		for b.Loop() {
			if _, err := nc.Write(req); err != nil {
				b.Fatal(err)
			}
			n, err := nc.Read(resp)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := proto.DecodeResult(resp[proto.HeaderLen:n], &r); err != nil || r.Status != proto.StatusOK {
				b.Fatal(err, r.Status)
			}
		}
	})
}

// A call allocates nothing once the pools are warm (the in-process sidecar
// included).
func TestClient_allocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items")
	}
	sc := startSidecar(t)
	c := dial(t, sc.cfg.SocketPath)
	cx := context.Background()
	deadline, cancel := context.WithTimeout(cx, time.Minute)
	defer cancel()
	key := "a key longer than thirty-two bytes, so converting it would allocate"
	p := c.Pipeline()
	for range 100 {
		c.Acquire(cx, benchLimit, key, 1)
		p.Acquire(benchLimit, key, 1)
	}
	p.Exec(cx)
	for name, f := range map[string]func(){
		"acquire":                 func() { c.Acquire(cx, benchLimit, key, 1) },
		"acquire with a deadline": func() { c.Acquire(deadline, benchLimit, key, 1, sluice.Strict()) },
		"peek at":                 func() { c.Peek(cx, benchLimit, key, sluice.At(time.Unix(0, t0))) },
		"ping":                    func() { c.Ping(cx) },
		"pipeline of 16": func() {
			for range 16 {
				p.Acquire(benchLimit, key, 1)
			}
			p.Exec(cx)
		},
	} {
		if n := testing.AllocsPerRun(1000, f); n > 0 {
			t.Errorf("%s: %v allocations per call, want 0", name, n)
		}
	}
}
