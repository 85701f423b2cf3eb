package server

import (
	"net"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/global"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/proto"
)

// BenchmarkGlobalFrames is the native protocol's path for global limits on
// one connection, pipelined (pipelineDepth frames per write), on one
// Redis: frames of 16 ACQUIREs, half on a leased global limit (decided from
// its lease, in place) and half on a local named limit, which measures the
// frames' scan and decoding; and frames of one ACQUIRE on an exact global
// limit, a Redis call each (pipelined to Redis).
func BenchmarkGlobalFrames(b *testing.B) {
	redis := redistest.Start(b)
	set, err := config.Parse("sluice.yaml", []byte(`limits:
  leased: {limit: "token_bucket:max=1000000000000,refill_time=1s", scope: global, lease: 1000000}
  exact: {limit: "token_bucket:max=1000000000000,refill_time=1s", scope: global}
  local: {limit: "token_bucket:max=1000000000000,refill_time=1s"}
`))
	if err != nil {
		b.Fatal(err)
	}
	redistest.QuietClientLogs()
	sc := start(b, Config{Limits: config.NewHolder(set), Global: &global.Options{Addrs: []string{redis.Addr}, Timeout: time.Second}})
	frame := func(names ...string) []byte {
		f, start := proto.BeginFrame(nil, proto.KindRequest, 1)
		for _, n := range names {
			f = proto.AppendItem(f, proto.OpAcquire, 0, proto.Named(n), 1, 0, []byte("user:42"))
		}
		return proto.EndFrame(f, start, len(names))
	}
	var mixed []string
	for range 8 {
		mixed = append(mixed, "leased", "local")
	}
	b.Run("mixed16", func(b *testing.B) { framesPipelined(b, sc.cfg.SocketPath, frame(mixed...), len(mixed)) })
	b.Run("exact", func(b *testing.B) { framesPipelined(b, sc.cfg.SocketPath, frame("exact"), 1) })
}

// framesPipelined keeps the connection full of frame (ops operations
// each), pipelineDepth frames per write, while the reader counts the
// answers' frames; an op is one operation.
func framesPipelined(b *testing.B, path string, frame []byte, ops int) {
	c, err := net.Dial("unix", path)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	var batch []byte
	for range pipelineDepth {
		batch = append(batch, frame...)
	}
	frames := (b.N + ops - 1) / ops
	writes := (frames + pipelineDepth - 1) / pipelineDepth
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	errc := make(chan error, 1)
	go func() {
		for range writes {
			if _, err := c.Write(batch); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	var in []byte
	buf := make([]byte, 256<<10)
	for got := 0; got < writes*pipelineDepth; {
		n, err := c.Read(buf)
		if err != nil {
			b.Fatal(err)
		}
		in = append(in, buf[:n]...)
		for {
			f, rest, h, err := proto.SplitFrame(in)
			if err != nil {
				b.Fatal(err)
			}
			if f == nil {
				break
			}
			if h.Count != uint16(ops) {
				b.Fatalf("an answer of %d results, want %d", h.Count, ops)
			}
			got++
			in = rest
		}
		in = append(in[:0], in...)
	}
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(writes*pipelineDepth*ops)/time.Since(start).Seconds(), "decisions/s")
}
