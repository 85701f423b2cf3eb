package direct_test

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/clients/go/sluice"
	"github.com/sluicehq/sluice/clients/go/sluice/direct"
	"github.com/sluicehq/sluice/internal/cputime"
	"github.com/sluicehq/sluice/internal/engine"
)

// The direct path from this process, against a sidecar in another process
// that owns the file, beside the socket client to the same sidecar: a hot
// key, and keys drawn from 1M buckets. The baselines are the engine in this
// process on a table of its own (engine/...), deciding the same limit and
// keys at the same clock (the client's: direct.NewClock): the direct
// path's cost over it is the client's (its limit cache, the owner check,
// counting the decision in and out).
// engine/hot-simulated is internal/engine's BenchmarkAcquire/gcra/hot in
// this run: the engine alone, at a simulated time, reading no clock.
//
// The 1M buckets are created only when a benchmark that needs them runs, so
// -bench 'Direct$/hot$' measures the hot key alone.
func BenchmarkDirect(b *testing.B) {
	sc := startSidecar(b, b.TempDir(), 1<<21)
	d, err := direct.Open(sc.state(), direct.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	s, err := sluice.Dial(sc.sock(), strict...)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	l := sluice.GCRA(1000, 1_000_000, time.Second)
	// The baseline: the engine in this process, on a table of its own of
	// the sidecar's geometry, with the same limit, clock and key draw.
	own, err := engine.Open(filepath.Join(b.TempDir(), "own"), engine.Options{Slots: 1 << 21}, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer own.Close()
	el, err := engine.FromProto(l)
	if err != nil {
		b.Fatal(err)
	}
	clock := direct.NewClock(engine.Clock(0))
	var dec bucket.Decision
	b.Run("hot", func(b *testing.B) {
		b.ReportAllocs()
		cpu := cputime.Start()
		for b.Loop() {
			if _, err := d.Acquire(ctx, l, "user:42", 1); err != nil {
				b.Fatal(err)
			}
		}
		cpu.Report(b)
	})
	b.Run("engine/hot", func(b *testing.B) {
		key := []byte("user:42")
		b.ReportAllocs()
		cpu := cputime.Start()
		for b.Loop() {
			if err := own.Acquire(&dec, key, &el, 1, engine.At(clock()), 0); err != nil {
				b.Fatal(err)
			}
		}
		cpu.Report(b)
	})
	// internal/engine's BenchmarkAcquire/gcra/hot: the engine at a
	// simulated time, a microsecond a request, reading no clock.
	b.Run("engine/hot-simulated", func(b *testing.B) {
		key := []byte("user:42")
		now := clock()
		b.ReportAllocs()
		cpu := cputime.Start()
		for b.Loop() {
			now += 1000
			if err := own.Acquire(&dec, key, &el, 1, engine.At(now), 0); err != nil {
				b.Fatal(err)
			}
		}
		cpu.Report(b)
	})
	// Keys are written into one buffer, as internal/engine's benchmark
	// writes them: the only memory the loop misses is the table's.
	const n = 1_000_000
	buf := make([]byte, 0, 32)
	key := func(i int) string {
		buf = strconv.AppendInt(append(buf[:0], "user:"...), int64(i), 10)
		return unsafe.String(unsafe.SliceData(buf), len(buf))
	}
	fill := sync.OnceFunc(func() {
		for i := range n {
			if _, err := d.Acquire(ctx, l, key(i), 1); err != nil {
				b.Fatal(err)
			}
			if err := own.Acquire(&dec, []byte(key(i)), &el, 1, engine.At(clock()), 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("1M-random", func(b *testing.B) {
		fill()
		rng := rand.New(rand.NewPCG(2, 2))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := d.Acquire(ctx, l, key(rng.IntN(n)), 1); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("engine/1M-random", func(b *testing.B) {
		fill()
		rng := rand.New(rand.NewPCG(2, 2))
		b.ReportAllocs()
		for b.Loop() {
			if err := own.Acquire(&dec, []byte(key(rng.IntN(n))), &el, 1, engine.At(clock()), 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("socket/hot", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.Acquire(ctx, l, "user:42", 1); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel/hot", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				d.Acquire(ctx, l, "user:42", 1)
			}
		})
	})
}

// BenchmarkDirectProcesses is 16 client processes deciding on their own
// keys at once, in the file and through the socket, against one sidecar:
// decisions per second for all of them (b.N decisions in total, shared out).
func BenchmarkDirectProcesses(b *testing.B) {
	sc := startSidecar(b, b.TempDir(), 1<<16)
	for _, mode := range []string{"direct", "socket"} {
		b.Run(mode+"/16", func(b *testing.B) {
			const procs = 16
			per := max(b.N/procs, 1)
			type proc struct {
				cmd   *exec.Cmd
				stdin io.WriteCloser
			}
			var ps []proc
			for i := range procs {
				cmd := exec.Command(os.Args[0], "-test.run=^$")
				cmd.Env = append(os.Environ(), fmt.Sprintf("SLUICE_DIRECT_WORKER=bench-%s %s %d %d", mode, sc.dir, per, i))
				cmd.Stderr = os.Stderr
				in, err := cmd.StdinPipe()
				if err != nil {
					b.Fatal(err)
				}
				out, err := cmd.StdoutPipe()
				if err != nil {
					b.Fatal(err)
				}
				if err := cmd.Start(); err != nil {
					b.Fatal(err)
				}
				bufio.NewReader(out).ReadString('\n') // attached or connected
				ps = append(ps, proc{cmd, in})
			}
			b.ResetTimer()
			start := time.Now()
			for _, p := range ps {
				p.stdin.Close() // go
			}
			for _, p := range ps {
				if err := p.cmd.Wait(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(per*procs)/time.Since(start).Seconds(), "decisions/s")
		})
	}
}
