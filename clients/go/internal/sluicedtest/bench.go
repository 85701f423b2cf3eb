package sluicedtest

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clients/go/sluice"
)

// Decider makes one decision, through a store or through the client
// alone.
type Decider struct {
	Name   string
	Decide func() error
}

// parallelism is how many goroutines per GOMAXPROCS decide at once in the
// parallel benchmarks: many requests in flight, as in a busy server.
const parallelism = 32

// BenchOverhead starts a sidecar and measures, in turn and in the same
// run, acquires of 1 of l on key through the client alone ("client") and
// the deciders of adapters, which decide the same through an adapter of
// the client. Each runs from one goroutine ("serial/NAME") and from
// 32*GOMAXPROCS goroutines at once ("parallel/NAME"), and reports
// decisions/s beside ns/op: an adapter's cost over the client is the
// difference between its line and the client's. l should never deny.
func BenchOverhead(b *testing.B, l sluice.Limit, key string, adapters func(*sluice.Client) []Decider) {
	c := Start(b).Dial(b)
	ctx := context.Background()
	ds := append([]Decider{{"client", func() error { _, err := c.Acquire(ctx, l, key, 1); return err }}}, adapters(c)...)
	for _, d := range ds { // warm up the connection, the sidecar and the caches
		for range 1000 {
			if err := d.Decide(); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, d := range ds {
		b.Run("serial/"+d.Name, func(b *testing.B) {
			b.ReportAllocs()
			start := time.Now()
			for b.Loop() {
				if err := d.Decide(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "decisions/s")
		})
	}
	for _, d := range ds {
		b.Run("parallel/"+d.Name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(parallelism)
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := d.Decide(); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "decisions/s")
		})
	}
}
