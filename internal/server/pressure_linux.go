//go:build linux

package server

import (
	"bytes"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// cpuPressurePath is the kernel's CPU pressure (PSI) of the whole host;
// tests point it at a file of their own.
var cpuPressurePath = "/proc/pressure/cpu"

// cgroupRoot is where the control groups are mounted (cgroupCPUQuota).
var cgroupRoot = "/sys/fs/cgroup"

// cpuPressure reads the host's CPU pressure: the time during which at
// least one runnable task waited for a CPU (the "some" line's total, in
// microseconds since boot). Each reading opens the file anew.
type cpuPressure struct {
	path string
	buf  [256]byte
}

// openCPUPressure returns the reader of path if it can be read.
func openCPUPressure(path string) (*cpuPressure, error) {
	p := &cpuPressure{path: path}
	if _, err := p.stalled(); err != nil {
		return nil, err
	}
	return p, nil
}

// stalled returns the "some" line's total.
func (p *cpuPressure) stalled() (time.Duration, error) {
	f, err := os.Open(p.path)
	if err != nil {
		return 0, err
	}
	n, err := io.ReadFull(f, p.buf[:])
	f.Close()
	if n == 0 && err != nil {
		return 0, err
	}
	return parsePressureTotal(p.buf[:n])
}

// parsePressureTotal reads the total of b's "some" line:
// "some avg10=0.64 avg60=11.44 avg300=18.67 total=34296309366".
func parsePressureTotal(b []byte) (time.Duration, error) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	if !bytes.HasPrefix(line, []byte("some ")) {
		return 0, errors.New(`server: CPU pressure: no "some" line`)
	}
	_, v, ok := bytes.Cut(line, []byte(" total="))
	if !ok {
		return 0, errors.New("server: CPU pressure: no total")
	}
	us, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 63)
	if err != nil || us > math.MaxInt64/uint64(time.Microsecond) {
		return 0, errors.New("server: CPU pressure: bad total")
	}
	return time.Duration(us) * time.Microsecond, nil
}

// Pressure thresholds of spinGovernor: the share of wall time during
// which some task waited for a CPU. On a 2-vCPU host, the sidecar and a
// redis-benchmark of 1 or 16 connections alone kept it at 5-13%; beside
// one busy process 27-41%, beside two 55-89%.
const (
	quietBelow = 0.15 // a contended host becomes quiet below this
	busyAbove  = 0.20 // a quiet host becomes contended above this
	// pressureEvery is how often the governor reads the pressure, after
	// a first interval of pressureFirst.
	pressureEvery = 500 * time.Millisecond
	pressureFirst = 100 * time.Millisecond
)

// spinGovernor sets TransportAuto's polling limit from the host's CPU
// pressure: quiet while no task waits for a CPU much, busy otherwise.
// Polling saves a halted CPU's wake-up per request to a client with one
// request in flight; on a quiet host that CPU is idle anyway, while on a
// contended one the polling takes it from a task that waits for it.
type spinGovernor struct {
	busy, quiet time.Duration // the limits
	// now is the limit in force, in ns, shifted left by one, with the low
	// bit set while the host is quiet: the loops read both at once.
	now     atomic.Int64
	isQuiet bool
	last    time.Duration // stall total at the last read
	lastAt  time.Time
}

func newSpinGovernor(busy, quiet time.Duration) *spinGovernor {
	g := &spinGovernor{busy: busy, quiet: quiet}
	g.set(false)
	return g
}

// Limit is the most a loop polls now, and whether the host is quiet.
func (g *spinGovernor) Limit() (limit time.Duration, quiet bool) {
	v := g.now.Load()
	return time.Duration(v >> 1), v&1 == 1
}

// set publishes the quiet or the busy limit.
func (g *spinGovernor) set(quiet bool) {
	g.isQuiet = quiet
	if quiet {
		g.now.Store(int64(g.quiet)<<1 | 1)
	} else {
		g.now.Store(int64(g.busy) << 1)
	}
}

// observe takes a reading of the stall total at now, and sets the limit
// from the share of the time since the last reading that was stalled.
func (g *spinGovernor) observe(stalled time.Duration, now time.Time) {
	prev, prevAt := g.last, g.lastAt
	g.last, g.lastAt = stalled, now
	elapsed := now.Sub(prevAt)
	if prevAt.IsZero() || elapsed <= 0 || stalled < prev {
		return
	}
	share := float64(stalled-prev) / float64(elapsed)
	switch {
	case g.isQuiet && share > busyAbove:
		g.set(false)
	case !g.isQuiet && share < quietBelow:
		g.set(true)
	}
}

// unknown sets the busy limit until two readings succeed again.
func (g *spinGovernor) unknown() {
	g.lastAt = time.Time{}
	g.set(false)
}

// run reads p every pressureEvery until stop is closed.
func (g *spinGovernor) run(p *cpuPressure, stop <-chan struct{}) {
	// The first interval is short: a sidecar started on a quiet host
	// polls as long as it may within a tenth of a second.
	t := time.NewTimer(pressureFirst)
	defer t.Stop()
	for {
		if v, err := p.stalled(); err == nil {
			g.observe(v, time.Now())
		} else {
			g.unknown()
		}
		select {
		case <-stop:
			return
		case <-t.C:
			t.Reset(pressureEvery)
		}
	}
}

// cgroupCPUQuota reports whether the process's control group, or one of
// its parents, caps its CPU time (cgroup v2 cpu.max, v1
// cpu.cfs_quota_us), given the cgroup file system's root and the
// process's /proc/self/cgroup. A loop polling under a quota spends the
// quota, and the whole group is then stopped for the rest of the period,
// whatever the host's pressure says: polls stay at the busy limit.
func cgroupCPUQuota(root string, self []byte) bool {
	for _, line := range strings.Split(string(self), "\n") {
		// "0::/path" (v2), "4:cpu,cpuacct:/path" (v1)
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		var dir, file string
		switch {
		case f[0] == "0" && f[1] == "":
			dir, file = root, "cpu.max"
		case slices.Contains(strings.Split(f[1], ","), "cpu"):
			dir, file = filepath.Join(root, "cpu"), "cpu.cfs_quota_us"
			if _, err := os.Stat(dir); err != nil {
				dir = filepath.Join(root, f[1])
			}
		default:
			continue
		}
		for p := filepath.Clean("/" + f[2]); ; p = filepath.Dir(p) {
			b, err := os.ReadFile(filepath.Join(dir, p, file))
			if err == nil && quotaSet(file, string(b)) {
				return true
			}
			if p == "/" {
				break
			}
		}
	}
	return false
}

// quotaSet reads a cpu.max ("max 100000", "50000 100000") or a
// cpu.cfs_quota_us ("-1", "50000").
func quotaSet(file, v string) bool {
	fields := strings.Fields(v)
	if len(fields) == 0 {
		return false
	}
	if file == "cpu.max" {
		return fields[0] != "max"
	}
	n, err := strconv.ParseInt(fields[0], 10, 64)
	return err == nil && n > 0
}
