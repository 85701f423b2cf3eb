package compare

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Config is one run of the comparison.
type Config struct {
	Workload  Workload
	Scenarios []Scenario
	Warmup    time.Duration // per cell, unmeasured
	Duration  time.Duration // per cell, measured
	Rounds    int           // times the Go matrix runs; each cell reports its median round
	Only      []string      // if set, only targets whose name contains one of these

	Dir         string // scratch directory for sockets and state files (short: socket paths are limited)
	Sluiced     string // the sidecar's binary
	RedisServer string // redis-server's binary; empty skips the Redis targets
	// EchoServer starts the echo floor and returns its socket path and
	// how to stop it.
	EchoServer func(ctx context.Context) (path string, stop func() error, err error)

	Python       string // interpreter for the Python side; empty skips it
	PythonScript string // bench/python/compare.py
	LuaDir       string // bench/lua, for the Python side

	MemoryKeys int // keys for the memory comparison; 0 skips it

	Progress io.Writer // progress display; nil for none
	Terminal bool      // Progress is a terminal: redraw one live line
}

// Report is everything a run measured.
type Report struct {
	Machine   Machine    `json:"machine"`
	Workload  Workload   `json:"workload"`
	Scenarios []Scenario `json:"scenarios"`
	Warmup    string     `json:"warmup"`
	Duration  string     `json:"duration"`
	Rounds    int        `json:"rounds"`
	Cells     []Cell     `json:"cells"`
	Memory    *Memory    `json:"memory,omitempty"`
	Notes     []string   `json:"notes,omitempty"` // what could not run, and why
	Elapsed   string     `json:"elapsed"`
}

// StandardScenarios are the matrix `make bench-compare` runs.
func StandardScenarios(clients, depth int) []Scenario {
	return []Scenario{
		{Name: "serial", Clients: 1, Depth: 1},
		{Name: "concurrent", Clients: clients, Depth: 1},
		{Name: "pipelined", Clients: 1, Depth: depth},
	}
}

// overrideTransports are sluiced's --transport values besides its default
// (auto), measured with the native protocol beside it.
var overrideTransports = []string{"goroutines", "epoll"}

// SizedLoad is the load state files are sized for (live buckets over
// slots): at 0.75 a 64-byte slot and its tag cost 86.7 bytes per live
// bucket, and the largest displacement of 1M random buckets stays near a
// third of the default probe cap (internal/engine's BenchmarkAcquireLoad).
const SizedLoad = 0.75

// slotsFor sizes a state file for n live buckets at SizedLoad.
func slotsFor(n int) uint64 { return uint64(math.Ceil(float64(n)/SizedLoad)) + 1 }

// Run measures every target the machine can run and returns the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	began := time.Now()
	if err := cfg.Workload.Validate(); err != nil {
		return nil, err
	}
	if cfg.Duration <= 0 || cfg.Warmup < 0 || cfg.Rounds < 1 {
		return nil, fmt.Errorf("duration %v, warmup %v, rounds %d: want a positive duration and at least one round", cfg.Duration, cfg.Warmup, cfg.Rounds)
	}
	for _, sc := range cfg.Scenarios {
		if sc.Clients < 1 || sc.Depth < 1 {
			return nil, fmt.Errorf("scenario %s: clients %d, depth %d: want at least 1 of each", sc.Name, sc.Clients, sc.Depth)
		}
	}
	r := &Report{Machine: readMachine(), Workload: cfg.Workload, Scenarios: cfg.Scenarios, Warmup: cfg.Warmup.String(), Duration: cfg.Duration.String(), Rounds: cfg.Rounds}
	w := &cfg.Workload
	keys := w.KeySet()
	slots := slotsFor(max(w.Keys, cfg.MemoryKeys))

	srv := &sluiced{bin: cfg.Sluiced, dir: cfg.Dir, slots: slots}
	defer srv.close()
	targets := []Target{
		&sluiceNative{srv: srv, limits: w.Limits},
		&sluiceRESP{srv: srv, limits: w.Limits},
		&sluiceDirect{sluiceNative{srv: srv, limits: w.Limits}},
	}
	// The default configuration first, then each transport it can be
	// given, each on a sidecar of its own.
	for _, tr := range overrideTransports {
		dir := filepath.Join(cfg.Dir, tr)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		tsrv := &sluiced{bin: cfg.Sluiced, dir: dir, slots: slots, transport: tr}
		defer tsrv.close()
		targets = append(targets, &sluiceNative{srv: tsrv, limits: w.Limits})
	}
	var rs *redisServer
	if cfg.RedisServer != "" {
		rs = &redisServer{bin: cfg.RedisServer, dir: cfg.Dir}
		if err := rs.start(ctx); err != nil {
			r.Notes = append(r.Notes, "Redis targets skipped: "+err.Error())
			rs = nil
		} else {
			defer rs.close()
			r.Machine.Redis = rs.version
			targets = append(targets, newRedisTarget(rs, "unix", w.Limits), newRedisTarget(rs, "tcp", w.Limits))
		}
	} else {
		r.Notes = append(r.Notes, "Redis targets skipped: no redis-server")
	}
	eng := &engineTarget{dir: cfg.Dir, slots: slots, limits: w.Limits}
	defer eng.Close()
	echo := &echoTarget{start: cfg.EchoServer, limits: w.Limits}
	defer echo.Close()
	targets = append(targets, eng, &xrateTarget{limits: w.Limits}, echo)
	targets = selected(targets, cfg.Only)

	type job struct {
		t  Target
		k  LimitKind
		sc Scenario
	}
	var jobs []job
	for _, sc := range cfg.Scenarios {
		for _, t := range targets {
			if _, ok := t.(inProcess); ok && sc.Depth > 1 && sc.Clients == 1 {
				continue // a pipeline means nothing without a socket
			}
			if t == Target(echo) {
				jobs = append(jobs, job{t, TokenBucket, sc}) // the floor is the same for every limit
				continue
			}
			for _, k := range []LimitKind{TokenBucket, GCRA, FixedWindow} {
				if t.Supports(k) {
					jobs = append(jobs, job{t, k, sc})
				}
			}
		}
	}
	py := cfg.Python != "" && cfg.PythonScript != "" && len(cfg.Only) == 0
	if py {
		v, rpy, err := pythonVersions(cfg.Python)
		if err != nil {
			r.Notes = append(r.Notes, "Python side skipped: "+err.Error())
			py = false
		}
		r.Machine.Python, r.Machine.RedisPy = v, rpy
	}
	pyJobs := 0
	if py {
		pyJobs = len(cfg.Scenarios) * 2 * 2
	}
	total := len(jobs)*cfg.Rounds + pyJobs
	prog := &progress{w: cfg.Progress, terminal: cfg.Terminal, total: total}
	// Rounds run the whole matrix again and again, so that a slow spell of
	// a shared machine hits every target alike; each cell reports its
	// median round.
	rounds := make([][]Cell, len(jobs))
	for round := range cfg.Rounds {
		for i, j := range jobs {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			limit := string(j.k)
			if j.t == Target(echo) {
				limit = "-"
			}
			name := label(j.t.Name(), limit, j.sc.Name)
			if cfg.Rounds > 1 {
				name = fmt.Sprintf("round %d/%d  %s", round+1, cfg.Rounds, name)
			}
			c := measure(ctx, j.t, j.k, j.sc, w, keys, cfg.Warmup, cfg.Duration, prog.live(name, cfg.Duration))
			c.Limit = limit
			prog.done(name, &c)
			rounds[i] = append(rounds[i], c)
		}
	}
	for _, rs := range rounds {
		r.Cells = append(r.Cells, median(rs))
	}
	if py {
		for _, sc := range cfg.Scenarios {
			for _, k := range []LimitKind{TokenBucket, GCRA} {
				for _, target := range []string{"sluice", "redis-lua"} {
					if err := ctx.Err(); err != nil {
						return nil, err
					}
					var c Cell
					name := label("python "+target, string(k), sc.Name)
					stop := prog.ticking(name, cfg.Warmup+cfg.Duration)
					switch {
					case target == "sluice":
						if err := srv.restart(ctx); err != nil {
							c = pythonRow(target, k, sc)
							c.Skipped = err.Error()
							break
						}
						c = pythonCell(ctx, &cfg, target, srv.socketPath(), k, sc)
					case rs == nil:
						c = pythonRow(target, k, sc)
						c.Skipped = "no redis-server"
					default:
						rt := newRedisTarget(rs, "unix", w.Limits)
						if err := rt.Reset(ctx); err != nil {
							c = pythonRow(target, k, sc)
							c.Skipped = err.Error()
							break
						}
						c = pythonCell(ctx, &cfg, target, rs.socketPath(), k, sc)
					}
					stop()
					prog.done(name, &c)
					r.Cells = append(r.Cells, c)
				}
			}
		}
	}
	if cfg.MemoryKeys > 0 && len(cfg.Only) == 0 {
		m := &Memory{Keys: cfg.MemoryKeys}
		mkeys := keys
		if cfg.MemoryKeys != len(keys) {
			mw := *w
			mw.Keys = cfg.MemoryKeys
			mkeys = mw.KeySet()
		}
		prog.note(fmt.Sprintf("memory: %d keys in Sluice", m.Keys))
		if err := measureSluiceMemory(ctx, srv, mkeys, m); err != nil {
			m.Error = err.Error()
		}
		if rs != nil {
			prog.note(fmt.Sprintf("memory: %d keys in Redis", m.Keys))
			if err := measureRedisMemory(ctx, newRedisTarget(rs, "unix", w.Limits), mkeys, m); err != nil && m.Error == "" {
				m.Error = err.Error()
			}
		}
		r.Memory = m
	}
	r.Elapsed = time.Since(began).Round(time.Second).String()
	prog.note("done in " + r.Elapsed)
	return r, nil
}

// selected keeps the targets whose name contains one of only's words.
func selected(ts []Target, only []string) []Target {
	if len(only) == 0 {
		return ts
	}
	var out []Target
	for _, t := range ts {
		for _, o := range only {
			if strings.Contains(t.Name(), o) {
				out = append(out, t)
				break
			}
		}
	}
	return out
}

// progress shows which cell is running: a redrawn line on a terminal, a
// line per finished cell otherwise.
type progress struct {
	w        io.Writer
	terminal bool
	total, n int
}

func (p *progress) live(label string, dur time.Duration) func(ops int64, elapsed time.Duration) {
	if p.w == nil || !p.terminal {
		return nil
	}
	return func(ops int64, elapsed time.Duration) {
		if elapsed < 0 {
			fmt.Fprintf(p.w, "\r\033[K[%2d/%d] %s  warming up", p.n+1, p.total, label)
			return
		}
		fmt.Fprintf(p.w, "\r\033[K[%2d/%d] %s  %4.1fs/%.0fs  %s decisions/s", p.n+1, p.total, label, elapsed.Seconds(), dur.Seconds(), rate(float64(ops)/elapsed.Seconds()))
	}
}

// ticking redraws a cell the benchmark cannot see inside (the Python
// side's) with its elapsed time, until stop is called.
func (p *progress) ticking(label string, dur time.Duration) (stop func()) {
	if p.w == nil || !p.terminal {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		began := time.Now()
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Fprintf(p.w, "\r\033[K[%2d/%d] %s  %4.1fs/%.0fs", p.n+1, p.total, label, time.Since(began).Seconds(), dur.Seconds())
			}
		}
	}()
	return func() { close(done); <-finished }
}

func (p *progress) done(label string, c *Cell) {
	p.n++
	if p.w == nil {
		return
	}
	if p.terminal {
		fmt.Fprint(p.w, "\r\033[K")
	}
	switch {
	case c.Skipped != "":
		fmt.Fprintf(p.w, "[%2d/%d] %s  skipped: %s\n", p.n, p.total, label, c.Skipped)
	default:
		fmt.Fprintf(p.w, "[%2d/%d] %s  %9s decisions/s  p50 %8s  p99 %8s", p.n, p.total, label, rate(c.OpsPerSec), dur(c.P50), dur(c.P99))
		if c.Errors > 0 {
			fmt.Fprintf(p.w, "  %d errors: %s", c.Errors, c.FirstError)
		}
		fmt.Fprintln(p.w)
	}
}

func (p *progress) note(s string) {
	if p.w != nil {
		fmt.Fprintln(p.w, s)
	}
}

// IsTerminal reports whether f is a terminal: the progress display then
// redraws one live line.
func IsTerminal(f *os.File) bool { return terminal(int(f.Fd())) }

// median returns the round with the median decisions/s (the lower middle
// one of an even count), its range over the rounds recorded. Skipped
// rounds count only if every round was skipped.
func median(rounds []Cell) Cell {
	var ran []Cell
	for _, c := range rounds {
		if c.Skipped == "" {
			ran = append(ran, c)
		}
	}
	if len(ran) == 0 {
		return rounds[0]
	}
	slices.SortFunc(ran, func(a, b Cell) int { return cmp.Compare(a.OpsPerSec, b.OpsPerSec) })
	m := ran[(len(ran)-1)/2]
	m.Rounds, m.OpsPerSecMin, m.OpsPerSecMax = len(ran), ran[0].OpsPerSec, ran[len(ran)-1].OpsPerSec
	return m
}
