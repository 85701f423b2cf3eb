//go:build unix

package server

import (
	"log/slog"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/engine"

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
	c, batch := dialBatch(b, path, frame)
	frames := (b.N + ops - 1) / ops
	writes := (frames + pipelineDepth - 1) / pipelineDepth
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	errc := writeBatches(c, batch, writes)
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

// BenchmarkHandleGlobal is the native handler alone, in this process (no
// socket, no scheduling between processes): batches of 16 frames of 16
// ACQUIREs, half on a leased global limit (decided from its lease, in
// place) and half on a local named limit, handled as a connection handles
// what it read. What it measures is the frames' scan, decoding and
// answering, per operation.
func BenchmarkHandleGlobal(b *testing.B) {
	_, handle := leasedBatches(b, "", 16, 8)
	handle() // the first lease, from Redis
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	for i := 0; i < b.N; i += 16 * 16 {
		handle()
	}
	// The process's CPU time per operation: on a busy host, where the
	// wall time per operation counts the other processes' turns too.
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
}

// leasedBatches returns a server (globalServer) with a leased global limit
// "leased" (lease: 100000000, then leaseOpts, YAML flow fields such as
// "lease_ttl: 1h" or "") and a local one, "local", both token buckets of
// 10^12 a second, and handle, which has one connection of it handle a
// batch of frames frames, each of pairs pairs of ACQUIREs of 1 on user:42,
// one of each limit, in process; handle fails tb unless the batch is
// answered whole.
func leasedBatches(tb testing.TB, leaseOpts string, frames, pairs int) (s *server, handle func()) {
	if leaseOpts != "" {
		leaseOpts = ", " + leaseOpts
	}
	set, err := config.Parse("sluice.yaml", []byte(`limits:
  leased: {limit: "token_bucket:max=1000000000000,refill_time=1s", scope: global, lease: 100000000`+leaseOpts+`}
  local: {limit: "token_bucket:max=1000000000000,refill_time=1s"}
`))
	if err != nil {
		tb.Fatal(err)
	}
	s = globalServer(tb, set)
	cn := &conn{stream: stream{s: s}}
	var batch []byte
	for i := range frames {
		f, start := proto.BeginFrame(batch, proto.KindRequest, uint32(i))
		for range pairs {
			f = proto.AppendItem(f, proto.OpAcquire, 0, proto.Named("leased"), 1, 0, []byte("user:42"))
			f = proto.AppendItem(f, proto.OpAcquire, 0, proto.Named("local"), 1, 0, []byte("user:42"))
		}
		batch = proto.EndFrame(f, start, 2*pairs)
	}
	return s, func() {
		cn.in = append(cn.in[:0], batch...)
		cn.now = s.now()
		cn.handle()
		if cn.closed || len(cn.in) != 0 {
			tb.Fatalf("the batch was not answered whole: closed %v, %d bytes left", cn.closed, len(cn.in))
		}
		cn.out = cn.out[:0]
	}
}

// globalServer returns a server that serves no socket, for benchmarks that
// call its handlers in process: the limits of set, a new state file, and a
// new Redis for its global limits, all closed when b ends.
func globalServer(b testing.TB, set *config.Set) *server {
	redis := redistest.Start(b)
	redistest.QuietClientLogs()
	dir := b.TempDir()
	e, err := engine.Open(filepath.Join(dir, "state"), engine.Options{}, time.Now().UnixNano())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	gl, err := newGlobalLimits(global.Options{Addrs: []string{redis.Addr}, Timeout: time.Second}, slog.New(slog.DiscardHandler), filepath.Join(dir, "leases"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(gl.close)
	cfg := Config{Limits: config.NewHolder(set)}
	return &server{cfg: cfg.withDefaults(), log: slog.New(slog.DiscardHandler), engine: e,
		now: func() int64 { return time.Now().UnixNano() }, global: gl}
}

// processCPU returns the CPU time this process has used, in ns.
func processCPU() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}
