// Command sluice-bench measures Sluice against what users would otherwise
// run, side by side on one machine, and soaks the state file under
// sustained load.
//
//	sluice-bench [compare] [flags]   the comparison (make bench-compare)
//	sluice-bench soak [flags]        the sustained-load soak (make bench-soak)
//	sluice-bench memory-ext [flags]  memory per bucket of sliding_log, window_counters and
//	                                 concurrency, beside Redis's sorted set (make bench-ext)
//	sluice-bench render [flags]      compare.md and compare.svg again from compare.json
//
// The comparison starts its own sluiced, redis-server and echo server on
// private sockets in a scratch directory, runs every target through the
// same workload, and writes bench/results/compare.{md,svg,json}.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/sluicehq/sluice/bench/compare"
	"github.com/sluicehq/sluice/bench/soak"
)

func main() {
	args := os.Args[1:]
	cmd := "compare"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch cmd {
	case "compare":
		err = runCompare(ctx, args)
	case "soak":
		err = runSoak(ctx, args)
	case "memory-ext":
		err = runMemoryExt(ctx, args)
	case "render":
		err = runRender(args)
	case "echo-server":
		err = runEcho(args)
	default:
		err = fmt.Errorf("unknown command %q: want compare, soak, memory-ext, render or echo-server", cmd)
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "sluice-bench:", err)
		os.Exit(1)
	}
}

func runCompare(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sluice-bench compare", flag.ContinueOnError)
	w := compare.Workload{Limits: compare.DefaultLimits}
	fs.IntVar(&w.Keys, "keys", 1_000_000, "distinct keys")
	dist := fs.String("dist", "zipf", "key choice: zipf or uniform")
	fs.Float64Var(&w.ZipfS, "zipf-s", 1.1, "Zipf exponent (> 1)")
	fs.Uint64Var(&w.Seed, "seed", 1, "seed of every client's key sequence")
	fs.StringVar(&w.Prefix, "prefix", "bench:", "key prefix")
	clients := fs.Int("clients", 16, "clients of the concurrent scenario")
	depth := fs.Int("depth", 16, "requests in flight per client in the pipelined scenario")
	duration := fs.Duration("duration", 1e9, "measured time per cell and round")
	warmup := fs.Duration("warmup", 3e8, "unmeasured warm-up per cell and round")
	rounds := fs.Int("rounds", 3, "times the Go matrix runs, targets interleaved; each cell reports its median round")
	only := fs.String("only", "", "comma-separated target names (substrings) to run; skips Python and memory")
	scenarios := fs.String("scenarios", "serial,concurrent,pipelined", "comma-separated scenarios to run")
	sluiced := fs.String("sluiced", "", "sluiced binary (default bin/sluiced, else built from ./cmd/sluiced)")
	redis := fs.String("redis-server", "", `redis-server binary (default: from PATH; "-" skips Redis)`)
	python := fs.String("python", "python3", `Python interpreter for the Python side ("-" skips it)`)
	pyScript := fs.String("python-script", "bench/python/compare.py", "the Python side's script")
	luaDir := fs.String("lua-dir", "bench/lua", "the Lua scripts, for the Python side")
	memKeys := fs.Int("memory-keys", -1, "keys of the memory comparison (default: -keys; 0 skips it)")
	out := fs.String("out", "bench/results", `directory for compare.md, compare.svg and compare.json ("-": Markdown to stdout)`)
	scratch := fs.String("dir", "", "scratch directory for sockets and state files (default: a new temporary directory)")
	cpuProfile := fs.String("cpuprofile", "", "write the load generator's CPU profile (the clients' side) to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	w.Dist = compare.Dist(*dist)
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	dir := *scratch
	if dir == "" {
		d, err := os.MkdirTemp("", "sluice-bench")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	bin, err := sluicedBinary(*sluiced, dir)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var scs []compare.Scenario
	for _, sc := range compare.StandardScenarios(*clients, *depth) {
		if slices.Contains(strings.Split(*scenarios, ","), sc.Name) {
			scs = append(scs, sc)
		}
	}
	if len(scs) == 0 {
		return fmt.Errorf("-scenarios %q: want some of serial, concurrent, pipelined", *scenarios)
	}
	cfg := compare.Config{
		Workload: w, Scenarios: scs,
		Warmup: *warmup, Duration: *duration, Rounds: *rounds,
		Dir: dir, Sluiced: bin, EchoServer: compare.EchoProcess(dir, self, "echo-server"),
		MemoryKeys: *memKeys, Progress: os.Stderr, Terminal: compare.IsTerminal(os.Stderr),
		LuaDir: *luaDir,
	}
	if cfg.MemoryKeys < 0 {
		cfg.MemoryKeys = w.Keys
	}
	if *only != "" {
		cfg.Only = strings.Split(*only, ",")
	}
	cfg.RedisServer = redisServer(*redis, "the Redis targets are skipped (make bench-compare installs it)")
	if *python != "-" {
		if _, err := os.Stat(*pyScript); err != nil {
			fmt.Fprintf(os.Stderr, "sluice-bench: %v: the Python side is skipped\n", err)
		} else {
			cfg.Python, cfg.PythonScript = *python, *pyScript
		}
	}
	rep, err := compare.Run(ctx, cfg)
	if err != nil {
		return err
	}
	return writeReports(*out, rep.WriteMarkdown,
		reportFile{"compare.md", rep.WriteMarkdown}, reportFile{"compare.svg", rep.WriteSVG}, reportFile{"compare.json", rep.WriteJSON})
}

// A reportFile is one file of a report and how to write it.
type reportFile struct {
	name  string
	write func(io.Writer) error
}

// writeReports writes files into dir, or, when dir is "-", only the
// Markdown to standard output.
func writeReports(dir string, markdown func(io.Writer) error, files ...reportFile) error {
	if dir == "-" {
		return markdown(os.Stdout)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var names []string
	for _, f := range files {
		if err := writeFile(filepath.Join(dir, f.name), f.write); err != nil {
			return err
		}
		names = append(names, filepath.Join(dir, f.name))
	}
	fmt.Fprintln(os.Stderr, "wrote", strings.Join(names, ", "))
	return nil
}

// writeFile writes path through a temporary file and a rename: a failed
// run never leaves half a report.
func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// sluicedBinary returns the sidecar to measure: the flag's, bin/sluiced,
// or one built from ./cmd/sluiced into dir.
func sluicedBinary(flagged, dir string) (string, error) {
	if flagged != "" {
		return flagged, nil
	}
	if fi, err := os.Stat("bin/sluiced"); err == nil && !fi.IsDir() {
		return filepath.Abs("bin/sluiced")
	}
	out := filepath.Join(dir, "sluiced")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/sluiced")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building sluiced (run from the repository's root, or pass -sluiced): %w", err)
	}
	return out, nil
}

// runEcho serves the echo floor until killed.
func runEcho(args []string) error {
	fs := flag.NewFlagSet("sluice-bench echo-server", flag.ContinueOnError)
	path := fs.String("socket", "", "Unix socket to listen on")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *path == "" {
		return errors.New("echo-server: -socket is required")
	}
	ln, err := net.Listen("unix", *path)
	if err != nil {
		return err
	}
	go func() {
		c := make(chan os.Signal, 1)
		signal.Notify(c, os.Interrupt, syscall.SIGTERM)
		<-c
		ln.Close()
	}()
	if err := compare.ServeEcho(ln); !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}

func runSoak(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sluice-bench soak", flag.ContinueOnError)
	var cfg soak.Config
	fs.StringVar(&cfg.Dir, "dir", "var/soak", "directory of the state files: put it on the disk the sidecar would use")
	buckets := fs.String("buckets", "1000000,10000000", "comma-separated table sizes, in live buckets")
	fs.Float64Var(&cfg.Load, "load", 0.7, "table load (slots = buckets / load)")
	fs.DurationVar(&cfg.Duration, "duration", 150e9, "measured time per table size")
	fs.DurationVar(&cfg.Interval, "interval", 10e9, "report interval")
	fs.IntVar(&cfg.Workers, "workers", 1, "goroutines issuing acquires")
	fs.DurationVar(&cfg.SyncInterval, "sync-interval", 1e9, "how often the table is synced, as the sidecar's --sync-interval")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the state files")
	out := fs.String("out", "bench/results", `directory for soak.md and soak.json ("-": Markdown to stdout)`)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for _, f := range strings.Split(*buckets, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("-buckets: %q is not a positive integer", f)
		}
		cfg.Buckets = append(cfg.Buckets, n)
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return err
	}
	cfg.Progress = os.Stderr
	rep, err := soak.Run(ctx, cfg)
	if err != nil {
		return err
	}
	return writeReports(*out, rep.WriteMarkdown, reportFile{"soak.md", rep.WriteMarkdown}, reportFile{"soak.json", rep.WriteJSON})
}

func runMemoryExt(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sluice-bench memory-ext", flag.ContinueOnError)
	var cfg compare.ExtConfig
	fs.IntVar(&cfg.Keys, "keys", 100_000, "keys per limit, at most")
	fs.IntVar(&cfg.Members, "members", 1_000_000, "sliding-log entries per limit, at most: a log of N entries gets min(keys, members/N) keys")
	redis := fs.String("redis-server", "", `redis-server binary (default: from PATH; "-" skips Redis)`)
	scratch := fs.String("dir", "", "scratch directory for the state files and Redis's socket (default: a new temporary directory)")
	out := fs.String("out", "bench/results", `directory for ext.md and ext.json ("-": Markdown to stdout)`)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	cfg.Dir = *scratch
	if cfg.Dir == "" {
		d, err := os.MkdirTemp("", "sluice-bench")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		cfg.Dir = d
	}
	cfg.RedisServer = redisServer(*redis, "Redis is skipped (make bench-ext installs it)")
	cfg.Progress = os.Stderr
	rep, err := compare.RunMemoryExt(ctx, cfg)
	if err != nil {
		return err
	}
	return writeReports(*out, rep.WriteMarkdown, reportFile{"ext.md", rep.WriteMarkdown}, reportFile{"ext.json", rep.WriteJSON})
}

// runRender writes a comparison's Markdown and chart again from its JSON.
func runRender(args []string) error {
	fs := flag.NewFlagSet("sluice-bench render", flag.ContinueOnError)
	in := fs.String("in", "bench/results/compare.json", "the comparison's JSON")
	out := fs.String("out", "bench/results", `directory for compare.md and compare.svg ("-": Markdown to stdout)`)
	if err := fs.Parse(args); err != nil {
		return err
	}
	b, err := os.ReadFile(*in)
	if err != nil {
		return err
	}
	var rep compare.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return fmt.Errorf("%s: %w", *in, err)
	}
	return writeReports(*out, rep.WriteMarkdown, reportFile{"compare.md", rep.WriteMarkdown}, reportFile{"compare.svg", rep.WriteSVG})
}

// redisServer returns the redis-server a -redis flag names: the value
// given, "" for "-" (none), or the one on PATH for "" (saying skipped, and
// returning "", if there is none).
func redisServer(flag, skipped string) string {
	switch flag {
	case "-":
		return ""
	case "":
		p, err := exec.LookPath("redis-server")
		if err != nil {
			fmt.Fprintln(os.Stderr, "sluice-bench: no redis-server on PATH: "+skipped)
			return ""
		}
		return p
	}
	return flag
}
