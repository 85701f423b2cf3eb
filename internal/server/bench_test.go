package server

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/metrics"

	"github.com/sluicehq/sluice/clients/go/sluice"
	"github.com/sluicehq/sluice/internal/echo"
	"github.com/sluicehq/sluice/internal/locktest"
	"github.com/sluicehq/sluice/proto"
)

// The socket benchmarks: acquire over the native protocol against the
// physical floor, a bare Unix-socket echo that answers each frame with a
// frame of an acquire answer's size. Both sides use the same client loop.

const pipelineDepth = 64 // frames per write in the pipelined benchmarks

var benchLimit = proto.GCRALimit(1_000_000, 1_000_000, time.Second)

// acquireFrame returns one request frame holding one ACQUIRE.
func acquireFrame(id uint32) []byte {
	b, start := proto.BeginFrame(nil, proto.KindRequest, id)
	return proto.EndFrame(proto.AppendItem(b, proto.OpAcquire, 0, benchLimit, 1, 0, []byte("user:42")), start, 1)
}

// decisionFrame returns a response frame holding one decision.
func decisionFrame(id uint32) []byte {
	b, start := proto.BeginFrame(nil, proto.KindResponse, id)
	return proto.EndFrame(proto.AppendDecision(b, proto.OpAcquire, &proto.Decision{Allowed: true}), start, 1)
}

// echoServer is the comparison's echo (package echo): it
// answers every complete frame with a decision-sized frame, one write per
// read, what the sidecar does minus the decision.
func echoServer(b *testing.B) string {
	path := filepath.Join(shortDir(b), "echo")
	ln, err := net.Listen("unix", path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go echo.Serve(ln)
	return path
}

// serial sends one frame and waits for its answer, b.N times.
func serial(b *testing.B, path string) {
	c, err := net.Dial("unix", path)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	req := acquireFrame(1)
	resp := make([]byte, len(decisionFrame(1)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		if _, err := readFull(c, resp); err != nil {
			b.Fatal(err)
		}
	}
}

// pipelined keeps the connection full: a writer sends frames pipelineDepth
// at a time while the reader counts answers.
func pipelined(b *testing.B, path string) {
	c, err := net.Dial("unix", path)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	var batch []byte
	for i := range pipelineDepth {
		batch = append(batch, acquireFrame(uint32(i))...)
	}
	respLen := len(decisionFrame(1))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	errc := make(chan error, 1)
	go func() {
		for sent := 0; sent < b.N; sent += pipelineDepth {
			if _, err := c.Write(batch); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	total := (b.N + pipelineDepth - 1) / pipelineDepth * pipelineDepth * respLen
	buf := make([]byte, 256<<10)
	for got := 0; got < total; {
		n, err := c.Read(buf)
		if err != nil {
			b.Fatal(err)
		}
		got += n
	}
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "decisions/s")
}

// parallel is the acquire path as applications use it: many goroutines
// sharing one Go client, whose writer batches their requests into shared
// writes.
func parallel(b *testing.B, path string) {
	c, err := sluice.Dial(path, sluice.WithFailurePolicy(sluice.FailError), sluice.WithTimeout(10*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	l := sluice.GCRA(1_000_000, 1_000_000, time.Second)
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(16)
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.Acquire(ctx, l, "user:42", 1); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "decisions/s")
}

// leaseParallel is a concurrency limit as applications use it: many
// goroutines sharing one Go client each take a lease of a key of their own
// and give it back, two round trips per op.
func leaseParallel(b *testing.B, path string) {
	c, err := sluice.Dial(path, sluice.WithFailurePolicy(sluice.FailError), sluice.WithTimeout(10*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	l := sluice.Concurrency(4, time.Minute)
	ctx := context.Background()
	var n atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		key := fmt.Sprint("jobs:", n.Add(1))
		for pb.Next() {
			ls, err := c.Lease(ctx, l, key)
			if err == nil && !ls.Allowed {
				err = fmt.Errorf("lease denied: %+v", ls.Decision)
			}
			if err == nil {
				_, err = ls.Release()
			}
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func readFull(c net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := c.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func BenchmarkSocket(b *testing.B) {
	sidecar := func(b *testing.B) string {
		sc := start(b, Config{Now: func() int64 { return time.Now().UnixNano() }})
		return sc.cfg.SocketPath
	}
	b.Run("acquire/serial", func(b *testing.B) { serial(b, sidecar(b)) })
	b.Run("acquire/pipelined", func(b *testing.B) { pipelined(b, sidecar(b)) })
	// The same with metrics served: the decision path pays atomic adds and
	// two clock reads per decision, one per frame.
	b.Run("acquire/pipelined/metrics", func(b *testing.B) {
		sc := start(b, Config{Now: func() int64 { return time.Now().UnixNano() }, Metrics: metrics.New()})
		pipelined(b, sc.cfg.SocketPath)
	})
	b.Run("acquire/parallel", func(b *testing.B) { parallel(b, sidecar(b)) })
	b.Run("lease/parallel", func(b *testing.B) { leaseParallel(b, sidecar(b)) })
	b.Run("echo/serial", func(b *testing.B) { serial(b, echoServer(b)) })
	b.Run("echo/pipelined", func(b *testing.B) { pipelined(b, echoServer(b)) })
}

// BenchmarkRESP measures the Redis-compatible listener beside the native
// protocol, so the cost of compatibility is visible.
func BenchmarkRESP(b *testing.B) {
	respSidecar := func(b *testing.B) string {
		sc := start(b, Config{Now: func() int64 { return time.Now().UnixNano() }})
		return sc.cfg.RESPSocket
	}
	reduce := []byte("*4\r\n$9\r\nRL.REDUCE\r\n$7\r\nuser:42\r\n$10\r\n1000000000\r\n$1\r\n1\r\n")
	throttle := []byte("*5\r\n$11\r\nCL.THROTTLE\r\n$7\r\nuser:42\r\n$7\r\n1000000\r\n$7\r\n1000000\r\n$1\r\n1\r\n")
	b.Run("rl_reduce/pipelined", func(b *testing.B) { respPipelined(b, respSidecar(b), reduce, 1) })
	b.Run("rl_reduce/serial", func(b *testing.B) { respSerial(b, respSidecar(b), reduce, 1) })
	b.Run("cl_throttle/serial", func(b *testing.B) { respSerial(b, respSidecar(b), throttle, 6) })
	b.Run("cl_throttle/pipelined", func(b *testing.B) { respPipelined(b, respSidecar(b), throttle, 6) })
}

// respSerial sends one command and reads its reply (lines reply lines), b.N
// times.
func respSerial(b *testing.B, path string, cmd []byte, lines int) {
	c, err := net.Dial("unix", path)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 4096)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Write(cmd); err != nil {
			b.Fatal(err)
		}
		if err := readLines(c, buf, lines); err != nil {
			b.Fatal(err)
		}
	}
}

// respPipelined writes commands pipelineDepth at a time while the reader
// counts reply lines.
func respPipelined(b *testing.B, path string, cmd []byte, lines int) {
	c, batch := dialBatch(b, path, cmd)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	sent := (b.N + pipelineDepth - 1) / pipelineDepth * pipelineDepth
	errc := writeBatches(c, batch, sent/pipelineDepth)
	if err := readLines(c, make([]byte, 256<<10), sent*lines); err != nil {
		b.Fatal(err)
	}
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "decisions/s")
}

// dialBatch connects to path, closed at the benchmark's end, and returns
// the batch of pipelineDepth copies of req that the pipelined benchmarks
// write.
func dialBatch(b *testing.B, path string, req []byte) (net.Conn, []byte) {
	c, err := net.Dial("unix", path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	var batch []byte
	for range pipelineDepth {
		batch = append(batch, req...)
	}
	return c, batch
}

// writeBatches writes batch to c n times, on a goroutine of its own, and
// sends the first error (or nil) on the channel it returns.
func writeBatches(c net.Conn, batch []byte, n int) <-chan error {
	errc := make(chan error, 1)
	go func() {
		for range n {
			if _, err := c.Write(batch); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	return errc
}

// readLines reads until n reply lines have arrived.
func readLines(c net.Conn, buf []byte, n int) error {
	for n > 0 {
		m, err := c.Read(buf)
		for _, ch := range buf[:m] {
			if ch == '\n' {
				n--
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkLoopBesideWaiters measures an event loop's round trip to one
// connection while 0 or 64 requests of other connections wait for a lock
// that a stopped process keeps: each has handed the loop over and waits
// on a goroutine of its own (loop_linux.go), so the round trip is the same.
func BenchmarkLoopBesideWaiters(b *testing.B) {
	for _, waiting := range []int{0, 64} {
		b.Run(fmt.Sprintf("waiting=%d", waiting), func(b *testing.B) {
			sc := start(b, Config{Transport: TransportEpoll, Loops: 1, LockWait: time.Hour})
			if waiting > 0 {
				c := dial(b, sc)
				if r := c.acquire("held", benchLimit, 1, 0); r.Status != proto.StatusOK {
					b.Fatalf("acquire: %+v", r)
				}
				_, goOn := locktest.Stopped(b, sc.cfg.StatePath, "held", benchLimit)
				defer goOn()
				for range waiting {
					w := dial(b, sc)
					w.send(1, func(buf []byte) []byte {
						return proto.AppendItem(buf, proto.OpAcquire, 0, benchLimit, 1, 0, []byte("held"))
					})
				}
			}
			serial(b, sc.cfg.SocketPath)
		})
	}
}
