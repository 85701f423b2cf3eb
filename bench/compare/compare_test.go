package compare

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/sidecartest"
)

// sluicedBin is the sidecar built once for the package's tests.
var sluicedBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-compare-test")
	if err != nil {
		panic(err)
	}
	sluicedBin = filepath.Join(dir, "sluiced")
	out, err := exec.Command("go", "build", "-o", sluicedBin, "github.com/sluicehq/sluice/cmd/sluiced").CombinedOutput()
	if err != nil {
		os.Stderr.Write(out)
		sluicedBin = ""
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// shortDir is a scratch directory whose socket paths fit sun_path.
var shortDir = sidecartest.ShortDir

// inProcessEcho serves the echo from a goroutine.
func inProcessEcho(dir string) func(ctx context.Context) (string, func() error, error) {
	return func(ctx context.Context) (string, func() error, error) {
		path := filepath.Join(dir, "echo.sock")
		ln, err := net.Listen("unix", path)
		if err != nil {
			return "", nil, err
		}
		go ServeEcho(ln)
		return path, ln.Close, nil
	}
}

// hourLimits refill nothing during a test: a bucket admits exactly its
// burst, whichever target decides it.
var hourLimits = Limits{TBMax: 100, TBRefill: time.Hour, TBAmount: 10, GCRABurst: 100, GCRACount: 10, GCRAPeriod: time.Hour, FWLimit: 100, FWWindow: time.Hour}

// allTargets starts every target the machine can run.
func allTargets(t *testing.T, l Limits) []Target {
	t.Helper()
	dir := shortDir(t)
	ctx := context.Background()
	var ts []Target
	if sluicedBin == "" {
		t.Fatal("sluiced did not build")
	}
	srv := &sluiced{bin: sluicedBin, dir: dir, slots: 4096}
	t.Cleanup(func() { srv.close() })
	ts = append(ts, &sluiceNative{srv: srv, limits: l}, &sluiceRESP{srv: srv, limits: l})
	if bin, err := exec.LookPath("redis-server"); err == nil {
		rs := &redisServer{bin: bin, dir: dir}
		if err := rs.start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rs.close() })
		ts = append(ts, newRedisTarget(rs, "unix", l), newRedisTarget(rs, "tcp", l))
	} else {
		t.Log("no redis-server on PATH: the Redis targets are not tested")
	}
	eng := &engineTarget{dir: dir, slots: 4096, limits: l}
	t.Cleanup(func() { eng.Close() })
	ts = append(ts, eng, &xrateTarget{limits: l})
	return ts
}

// TestTargetsAgree checks that every target decides the same limit: with
// no refill during the test, a key admits exactly the limit's burst,
// whether asked one request at a time or in one pipelined batch. This is
// what makes the comparison fair: the Lua scripts, the in-process
// limiters and Sluice do the same work.
func TestTargetsAgree(t *testing.T) {
	ctx := context.Background()
	want := map[LimitKind]int{TokenBucket: 100, GCRA: 101, FixedWindow: 100} // GCRA admits max_burst+1
	for _, tg := range allTargets(t, hourLimits) {
		for _, k := range []LimitKind{TokenBucket, GCRA, FixedWindow} {
			if !tg.Supports(k) {
				continue
			}
			for _, batch := range []int{1, 150} {
				if err := tg.Reset(ctx); err != nil {
					t.Fatalf("%s: reset: %v", tg.Name(), err)
				}
				cn, err := tg.Dial(ctx, k)
				if err != nil {
					t.Fatalf("%s %s: dial: %v", tg.Name(), k, err)
				}
				keys := make([]string, batch)
				for i := range keys {
					keys[i] = "agree"
				}
				allowed := 0
				for sent := 0; sent < 150; sent += batch {
					n, err := cn.Do(ctx, keys)
					if err != nil {
						t.Fatalf("%s %s: %v", tg.Name(), k, err)
					}
					allowed += n
				}
				cn.Close()
				if allowed != want[k] {
					t.Errorf("%s %s, batches of %d: %d of 150 allowed, want %d", tg.Name(), k, batch, allowed, want[k])
				}
			}
		}
	}
}

// TestResetStartsFresh: a cell never inherits an earlier cell's buckets.
func TestResetStartsFresh(t *testing.T) {
	ctx := context.Background()
	for _, tg := range allTargets(t, hourLimits) {
		for round := range 2 {
			if err := tg.Reset(ctx); err != nil {
				t.Fatal(err)
			}
			cn, err := tg.Dial(ctx, TokenBucket)
			if err != nil {
				t.Fatal(err)
			}
			n, err := cn.Do(ctx, []string{"fresh"})
			cn.Close()
			if err != nil || n != 1 {
				t.Errorf("%s, round %d: first request after Reset: allowed %d, err %v", tg.Name(), round, n, err)
			}
			// Drain the bucket so that the next round would be denied
			// without a real reset.
			cn, _ = tg.Dial(ctx, TokenBucket)
			keys := make([]string, 200)
			for i := range keys {
				keys[i] = "fresh"
			}
			cn.Do(ctx, keys)
			cn.Close()
		}
	}
}

func TestRunSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers")
	}
	dir := shortDir(t)
	cfg := Config{
		Workload:  Workload{Keys: 500, Dist: Zipf, ZipfS: 1.1, Seed: 1, Prefix: "t:", Limits: DefaultLimits},
		Scenarios: StandardScenarios(3, 4),
		Warmup:    10 * time.Millisecond, Duration: 60 * time.Millisecond, Rounds: 2,
		Dir: dir, Sluiced: sluicedBin, EchoServer: inProcessEcho(dir),
		MemoryKeys: 300,
	}
	if bin, err := exec.LookPath("redis-server"); err == nil {
		cfg.RedisServer = bin
	}
	var progress bytes.Buffer
	cfg.Progress = &progress
	r, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range r.Cells {
		if c.Skipped != "" {
			t.Errorf("%s %s %s skipped: %s", c.Target, c.Limit, c.Scenario, c.Skipped)
			continue
		}
		if c.Ops == 0 || c.Errors != 0 || c.Allowed > c.Ops {
			t.Errorf("%s %s %s: ops %d, allowed %d, errors %d (%s)", c.Target, c.Limit, c.Scenario, c.Ops, c.Allowed, c.Errors, c.FirstError)
		}
		if c.Rounds != 2 && c.Lang == "go" || !(c.OpsPerSecMin <= c.OpsPerSec && c.OpsPerSec <= c.OpsPerSecMax) && c.Lang == "go" {
			t.Errorf("%s %s %s: %d rounds, median %v outside its range %v-%v", c.Target, c.Limit, c.Scenario, c.Rounds, c.OpsPerSec, c.OpsPerSecMin, c.OpsPerSecMax)
		}
		if !(c.P50 <= c.P99 && c.P99 <= c.Max) {
			t.Errorf("%s %s %s: p50 %d, p99 %d, max %d out of order", c.Target, c.Limit, c.Scenario, c.P50, c.P99, c.Max)
		}
	}
	// Every scenario has the floor, both Sluice protocols, and the native
	// one on each transport beside the default.
	for _, sc := range cfg.Scenarios {
		for _, want := range []string{"echo (floor)", "sluice native", "sluice RESP", "sluice native (goroutines)", "sluice native (epoll)"} {
			found := false
			for _, c := range r.Cells {
				found = found || (c.Scenario == sc.Name && c.Target == want)
			}
			if !found {
				t.Errorf("scenario %s has no %s cell", sc.Name, want)
			}
		}
	}
	if r.Memory == nil || r.Memory.Error != "" || r.Memory.SluiceLive != 300 {
		t.Fatalf("memory: %+v", r.Memory)
	}
	if cfg.RedisServer != "" && (len(r.Memory.Redis) != 2 || r.Memory.Redis[0].Keys != 300) {
		t.Fatalf("redis memory: %+v", r.Memory.Redis)
	}
	// The arena is in the file, and reported apart.
	if a := r.Memory.SluiceArenaBytes; a <= 0 || a >= r.Memory.SluiceFileBytes {
		t.Errorf("arena bytes %d of a %d-byte file", a, r.Memory.SluiceFileBytes)
	}
	var md bytes.Buffer
	if err := r.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "| ↳ of which the arena (") || !strings.Contains(md.String(), "| ↳ the slots and their tags, without the arena |") {
		t.Errorf("the memory table does not set the arena apart:\n%s", md.String())
	}
	if lines := strings.Count(progress.String(), "\n"); lines < len(r.Cells) {
		t.Errorf("progress printed %d lines for %d cells", lines, len(r.Cells))
	}
	checkWriters(t, r)
}

// checkWriters renders a report in its three forms and checks each parses.
func checkWriters(t *testing.T, r *Report) {
	t.Helper()
	var md, svg, js bytes.Buffer
	if err := r.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| sluice native |", "## serial", "## Memory per live bucket", r.Machine.CPU} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("Markdown lacks %q", want)
		}
	}
	if err := r.WriteSVG(&svg); err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(&svg)
	for {
		_, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
	}
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Cells) != len(r.Cells) || back.Machine != r.Machine {
		t.Fatal("JSON does not round-trip the cells and the machine")
	}
}

func TestChecks(t *testing.T) {
	cell := func(target string, k LimitKind, sc string, ops float64, p99 int64) Cell {
		return Cell{Lang: "go", Target: target, Limit: string(k), Scenario: sc, Ops: 1, OpsPerSec: ops, P99: p99}
	}
	r := &Report{
		Scenarios: StandardScenarios(16, 16),
		Cells: []Cell{
			cell("sluice native", TokenBucket, "serial", 30_000, 90),
			cell("redis (unix)", TokenBucket, "serial", 10_000, 100),
			cell("sluice native", TokenBucket, "concurrent", 29_000, 90),
			cell("redis (unix)", TokenBucket, "concurrent", 10_000, 100),
			cell("sluice native", GCRA, "serial", 30_000, 120), // fast enough, but a higher p99
			cell("redis (unix)", GCRA, "serial", 10_000, 100),
		},
		Memory: &Memory{SluicePerBucket: 91.4, Redis: []RedisMemory{{Script: "token_bucket.lua", BytesPerKey: 150}}},
	}
	got := map[string]bool{}
	for _, c := range r.Checks() {
		got[c.What] = c.Met
	}
	want := map[string]bool{
		"token-bucket, serial: ≥ 2× Redis + Lua's decisions/s with a lower p99":               true,
		"token-bucket, concurrent (16 clients × 1 in flight): ≥ 3× Redis + Lua's decisions/s": false,
		"gcra, serial: ≥ 2× Redis + Lua's decisions/s with a lower p99":                       false,
		"memory per live token bucket below Redis's for the same keys":                        true,
	}
	if len(got) != len(want) {
		t.Fatalf("checks %v, want %v", got, want)
	}
	for what, met := range want {
		if m, ok := got[what]; !ok || m != met {
			t.Errorf("check %q: met %v (present %v), want %v", what, m, ok, met)
		}
	}
}

func TestWorkloadValidate(t *testing.T) {
	good := Workload{Keys: 10, Dist: Zipf, ZipfS: 1.1, Limits: DefaultLimits}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := []func(w *Workload){
		func(w *Workload) { w.Keys = 0 },
		func(w *Workload) { w.Dist = "normal" },
		func(w *Workload) { w.ZipfS = 1 },
		func(w *Workload) { w.Limits.TBRefill = 1500 * time.Microsecond },
		func(w *Workload) { w.Limits.GCRAPeriod = 1500 * time.Millisecond },
		func(w *Workload) { w.Limits.FWLimit = 0 },
	}
	for i, mutate := range bad {
		w := good
		mutate(&w)
		if err := w.Validate(); err == nil {
			t.Errorf("case %d: %+v accepted", i, w)
		}
	}
}

func TestChooser(t *testing.T) {
	w := Workload{Keys: 1000, Dist: Zipf, ZipfS: 1.1, Seed: 7}
	a, b := w.Chooser(3), w.Chooser(3)
	counts := make([]int, w.Keys)
	for range 100_000 {
		i := a.Next()
		if j := b.Next(); i != j {
			t.Fatal("two choosers of one client differ")
		}
		counts[i]++
	}
	if !(counts[0] > counts[1] && counts[1] > counts[10] && counts[10] > counts[500]) {
		t.Errorf("Zipf counts not decreasing: %d %d %d %d", counts[0], counts[1], counts[10], counts[500])
	}
	w.Dist = Uniform
	u := w.Chooser(0)
	for range 10_000 {
		if i := u.Next(); i < 0 || i >= w.Keys {
			t.Fatalf("uniform index %d out of range", i)
		}
	}
	keys := w.KeySet()
	if keys[0] != "0" || keys[999] != "999" {
		t.Fatalf("keys %q ... %q", keys[0], keys[999])
	}
}

func TestMedian(t *testing.T) {
	c := func(ops float64, skipped string) Cell { return Cell{OpsPerSec: ops, Skipped: skipped} }
	m := median([]Cell{c(30, ""), c(10, ""), c(0, "reset failed"), c(20, "")})
	if m.OpsPerSec != 20 || m.Rounds != 3 || m.OpsPerSecMin != 10 || m.OpsPerSecMax != 30 {
		t.Errorf("median of 30, 10, skipped, 20: %+v", m)
	}
	m = median([]Cell{c(10, ""), c(40, "")})
	if m.OpsPerSec != 10 || m.OpsPerSecMax != 40 {
		t.Errorf("median of two: %+v, want the lower", m)
	}
	if m = median([]Cell{c(0, "a"), c(0, "b")}); m.Skipped != "a" {
		t.Errorf("all skipped: %+v", m)
	}
}
