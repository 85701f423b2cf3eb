package compare

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// The Python side runs bench/python/compare.py once per cell; the script
// prints one JSON object with the Cell's fields. Exit status 3 means the
// target cannot run there (redis-py missing): the cell is skipped.

// pythonCell runs one cell of the Python side.
func pythonCell(ctx context.Context, cfg *Config, target, socket string, k LimitKind, sc Scenario) Cell {
	c := pythonRow(target, k, sc)
	w, l := &cfg.Workload, cfg.Workload.Limits
	args := []string{cfg.PythonScript,
		"--target", target, "--socket", socket, "--limit", string(k),
		"--clients", strconv.Itoa(sc.Clients), "--depth", strconv.Itoa(sc.Depth),
		"--duration", seconds(cfg.Duration), "--warmup", seconds(cfg.Warmup),
		"--keys", strconv.Itoa(w.Keys), "--dist", string(w.Dist), "--zipf-s", strconv.FormatFloat(w.ZipfS, 'g', -1, 64),
		"--prefix", w.Prefix, "--seed", strconv.FormatUint(w.Seed, 10),
		"--tb", fmt.Sprintf("%d,%d,%d", l.TBMax, l.TBRefill.Milliseconds(), l.TBAmount),
		"--gcra", fmt.Sprintf("%d,%d,%d", l.GCRABurst, l.GCRACount, l.GCRAPeriod.Milliseconds()),
		"--lua-dir", cfg.LuaDir,
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Warmup+cfg.Duration+60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, cfg.Python, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	msg := strings.TrimSpace(stderr.String())
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee) && ee.ExitCode() == 3:
		c.Skipped = msg
		return c
	case err != nil:
		c.Skipped = fmt.Sprintf("compare.py: %v: %s", err, msg)
		return c
	}
	var out Cell
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &out); err != nil {
		c.Skipped = fmt.Sprintf("compare.py printed no result (%v): %q", err, stdout.String())
		return c
	}
	c.Ops, c.Allowed, c.Errors, c.FirstError = out.Ops, out.Allowed, out.Errors, out.FirstError
	c.Seconds, c.OpsPerSec = out.Seconds, out.OpsPerSec
	c.P50, c.P90, c.P99, c.P999, c.Max = out.P50, out.P90, out.P99, out.P999, out.Max
	return c
}

// pythonRow is the Python side's cell of target ("sluice" or
// "redis-lua"), limit k and scenario sc, before it runs.
func pythonRow(target string, k LimitKind, sc Scenario) Cell {
	c := Cell{Lang: "python", Target: "sluice (python client)", Family: "sluice", Limit: string(k), Scenario: sc.Name, Clients: sc.Clients, Depth: sc.Depth}
	if target == "redis-lua" {
		c.Target, c.Family = "redis (unix, redis-py)", "redis"
	}
	return c
}

func seconds(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) }

// pythonVersions returns the interpreter's version and redis-py's (empty
// when it is not importable).
func pythonVersions(python string) (py, redisPy string, err error) {
	out, err := exec.Command(python, "-c", "import sys; print(sys.version.split()[0])").Output()
	if err != nil {
		return "", "", fmt.Errorf("%s: %w", python, err)
	}
	py = strings.TrimSpace(string(out))
	if out, err := exec.Command(python, "-c", "import redis; print(redis.__version__)").Output(); err == nil {
		redisPy = strings.TrimSpace(string(out))
	}
	return py, redisPy, nil
}
