//go:build linux

package server

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

func TestParsePressureTotal(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"some avg10=0.64 avg60=11.44 avg300=18.67 total=34296309366\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", 34296309366 * time.Microsecond, true},
		{"some avg10=0.00 avg60=0.00 avg300=0.00 total=0", 0, true},
		{"full avg10=0.00 avg60=0.00 avg300=0.00 total=5\n", 0, false},
		{"some avg10=0.00 avg60=0.00 avg300=0.00\n", 0, false},
		{"some avg10=0.00 total=-3\n", 0, false},
		{"some avg10=0.00 total=12x\n", 0, false},
		{"", 0, false},
	} {
		got, err := parsePressureTotal([]byte(c.in))
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("parsePressureTotal(%q) = %v, %v; want %v, ok %v", c.in, got, err, c.want, c.ok)
		}
	}
}

// Ensure the host's own CPU pressure, where the kernel reports it, is read.
func TestCPUPressureHost(t *testing.T) {
	if _, err := os.Stat(cpuPressurePath); errors.Is(err, os.ErrNotExist) {
		t.Skipf("%s: %v (a kernel without PSI: loops keep the fixed limit)", cpuPressurePath, err)
	}
	p, err := openCPUPressure(cpuPressurePath)
	if err != nil {
		t.Fatal(err)
	}
	a, err := p.stalled()
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.stalled()
	if err != nil || b < a {
		t.Errorf("second reading %v, %v after %v, want a total that does not go back", b, err, a)
	}
}

// Ensure the governor is quiet below quietBelow, busy above busyAbove, keeps
// its state between them, and is busy after a failed reading until two
// readings succeed.
func TestSpinGovernor(t *testing.T) {
	const busy, quiet = 10 * time.Microsecond, 50 * time.Microsecond
	g := newSpinGovernor(busy, quiet)
	limit := func() time.Duration {
		l, q := g.Limit()
		if q != (l == quiet) {
			t.Errorf("Limit() = %v, quiet %v", l, q)
		}
		return l
	}
	at := time.Unix(1000, 0)
	var total time.Duration
	step := func(share float64) time.Duration { // half a second at share stalled
		at = at.Add(500 * time.Millisecond)
		total += time.Duration(share * float64(500*time.Millisecond))
		g.observe(total, at)
		return limit()
	}
	if limit() != busy {
		t.Fatalf("limit before any reading %v, want %v", limit(), busy)
	}
	for i, c := range []struct {
		share float64
		want  time.Duration
	}{
		{0, busy}, // the first reading: no interval yet
		{0.17, busy},
		{0.10, quiet},
		{0.17, quiet},
		{0.19, quiet},
		{0.30, busy},
		{0.16, busy},
		{0.14, quiet},
		{2, busy}, // several tasks waiting
	} {
		if got := step(c.share); got != c.want {
			t.Errorf("step %d (share %v): limit %v, want %v", i, c.share, got, c.want)
		}
	}
	step(0)
	if limit() != quiet {
		t.Fatalf("limit %v, want %v", limit(), quiet)
	}
	g.unknown()
	if limit() != busy {
		t.Errorf("limit after a failed reading %v, want %v", limit(), busy)
	}
	if got := step(0); got != busy {
		t.Errorf("limit after one reading since %v, want %v", got, busy)
	}
	if got := step(0); got != quiet {
		t.Errorf("limit after two readings since %v, want %v", got, quiet)
	}
	// A total that goes back (another file, say) is no interval.
	total = 0
	if got := step(0.9); got != quiet {
		t.Errorf("limit after a total that went back %v, want %v", got, quiet)
	}
	// Whether the host is quiet is not read from the limit: the two
	// limits may be equal.
	same := newSpinGovernor(quiet, quiet)
	same.observe(0, at)
	same.observe(0, at.Add(time.Second))
	if l, q := same.Limit(); l != quiet || !q {
		t.Errorf("equal limits, quiet host: Limit() = %v, %v; want %v, true", l, q, quiet)
	}
}

// fakePressure is a CPU pressure file of a test's own, read by the
// servers the test starts (cpuPressurePath), with no CPU quota on their
// control group (cgroupRoot).
type fakePressure struct {
	path  string
	total atomic.Int64 // µs
}

func newFakePressure(t *testing.T) *fakePressure {
	f := &fakePressure{path: filepath.Join(t.TempDir(), "cpu")}
	if err := f.add(time.Second); err != nil {
		t.Fatal(err)
	}
	oldPath, oldRoot := cpuPressurePath, cgroupRoot
	cpuPressurePath, cgroupRoot = f.path, t.TempDir()
	t.Cleanup(func() { cpuPressurePath, cgroupRoot = oldPath, oldRoot })
	return f
}

// add adds d to the stall total, renaming the new file into place: a
// reading never sees one cut short.
func (f *fakePressure) add(d time.Duration) error {
	line := fmt.Sprintf("some avg10=0.00 avg60=0.00 avg300=0.00 total=%d\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
		f.total.Add(d.Microseconds()))
	if err := os.WriteFile(f.path+".tmp", []byte(line), 0o600); err != nil {
		return err
	}
	return os.Rename(f.path+".tmp", f.path)
}

// contend grows the total by a second every 20 ms, many tasks waiting all
// the time, until the returned function is called. (A write that fails
// makes the reading fail, which counts as contended too.)
func (f *fakePressure) contend() (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			f.add(time.Second)
		}
	}()
	return func() { close(done); <-stopped }
}

// waitSpinLimit waits up to 30 s for c's server to report want as its
// polling limit.
func waitSpinLimit(t *testing.T, c *client, want time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Duration(stat(t, c, "loop_spin_limit_ns")) != want; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("loop_spin_limit_ns %d for 30 s, want %d", stat(t, c, "loop_spin_limit_ns"), want.Nanoseconds())
		}
	}
}

// Ensure an auto server with the default loop spin polls up to
// DefaultLoopSpin while the CPU pressure is low and DefaultAutoLoopSpin
// while it is high, and that an explicit --loop-spin is kept whatever it is.
func TestAuto_spinFollowsPressure(t *testing.T) {
	f := newFakePressure(t)
	fixed := start(t, Config{Transport: TransportAuto, LoopSpin: 20 * time.Microsecond})
	sc := start(t, Config{Transport: TransportAuto})
	c, cf := dial(t, sc), dial(t, fixed)
	// The total does not move: no task waits.
	waitSpinLimit(t, c, DefaultLoopSpin)
	stop := f.contend()
	waitSpinLimit(t, c, DefaultAutoLoopSpin)
	stop()
	// Quiet again.
	waitSpinLimit(t, c, DefaultLoopSpin)
	if got := stat(t, cf, "loop_spin_limit_ns"); time.Duration(got) != 20*time.Microsecond {
		t.Errorf("explicit --loop-spin: loop_spin_limit_ns %d, want 20000", got)
	}
	// A file that cannot be read: the fixed limit.
	if err := os.Remove(f.path); err != nil {
		t.Fatal(err)
	}
	waitSpinLimit(t, c, DefaultAutoLoopSpin)
	// Nor at the start.
	if got := stat(t, dial(t, start(t, Config{Transport: TransportAuto})), "loop_spin_limit_ns"); time.Duration(got) != DefaultAutoLoopSpin {
		t.Errorf("no CPU pressure to read: loop_spin_limit_ns %d, want %d", got, DefaultAutoLoopSpin.Nanoseconds())
	}
	// A quiet host, but a CPU quota on the root control group (v2 and v1,
	// whichever this process's /proc/self/cgroup names): the fixed limit.
	if err := f.add(0); err != nil {
		t.Fatal(err)
	}
	quotaFiles := map[string]string{"cpu.max": "50000 100000\n", "cpu/cpu.cfs_quota_us": "50000\n"}
	for rel, v := range quotaFiles {
		p := filepath.Join(cgroupRoot, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	quota := dial(t, start(t, Config{Transport: TransportAuto}))
	// A server started after it without the quota finds the host quiet:
	// by then the first one would have too.
	for rel := range quotaFiles {
		if err := os.Remove(filepath.Join(cgroupRoot, rel)); err != nil {
			t.Fatal(err)
		}
	}
	waitSpinLimit(t, dial(t, start(t, Config{Transport: TransportAuto})), DefaultLoopSpin)
	if got := stat(t, quota, "loop_spin_limit_ns"); time.Duration(got) != DefaultAutoLoopSpin {
		t.Errorf("CPU quota: loop_spin_limit_ns %d, want %d", got, DefaultAutoLoopSpin.Nanoseconds())
	}
}

// Ensure a CPU quota on the process's control group or a parent of it, in
// cgroup v2 or v1, is found, and that none is found where there is none.
func TestCgroupCPUQuota(t *testing.T) {
	put := func(root, rel, v string) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	v2 := t.TempDir()
	put(v2, "a/cpu.max", "max 100000\n")
	put(v2, "a/b/cpu.max", "max 100000\n")
	put(v2, "q/cpu.max", "50000 100000\n")
	put(v2, "q/c/cpu.max", "max 100000\n")
	v1 := t.TempDir()
	put(v1, "cpu,cpuacct/cpu.cfs_quota_us", "-1\n")
	put(v1, "cpu,cpuacct/x/cpu.cfs_quota_us", "-1\n")
	put(v1, "cpu,cpuacct/y/cpu.cfs_quota_us", "20000\n")
	for _, c := range []struct {
		root, self string
		want       bool
	}{
		{v2, "0::/a/b\n", false},
		{v2, "0::/q/c\n", true}, // a parent's quota
		{v2, "0::/q\n", true},
		{v2, "0::/\n", false},
		{v2, "0::/missing\n", false},
		{v1, "4:memory:/y\n2:cpu,cpuacct:/x\n0::/\n", false},
		{v1, "4:memory:/x\n2:cpu,cpuacct:/y\n0::/\n", true},
		{v1, "2:cpuacct:/y\n", false}, // not the cpu controller
		{v1, "garbage", false},
		{v2, "", false},
	} {
		if got := cgroupCPUQuota(c.root, []byte(c.self)); got != c.want {
			t.Errorf("cgroupCPUQuota(%s, %q) = %v, want %v", filepath.Base(c.root), c.self, got, c.want)
		}
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("this process: %q, CPU quota %v", self, cgroupCPUQuota(cgroupRoot, self))
}

// Ensure an auto loop polls for a multiplexed connection while the host is
// quiet, and not while it is contended.
func TestAuto_multiplexedPolledWhenQuiet(t *testing.T) {
	f := newFakePressure(t)
	// The loop polls up to 2 ms on a quiet host and 1 ms on a contended
	// one, not 50 and 10 µs: a busy host running the test sends batches
	// further apart than those, and only the rule for multiplexed
	// connections keeps a contended loop from polling for them.
	const quietSpin, busySpin = 2 * time.Millisecond, time.Millisecond
	single, batch := multiplexedConn(t, Config{Transport: TransportAuto, Loops: 1, LoopSpin: busySpin, quietSpin: quietSpin})
	// Quiet: the multiplexed connection's batches alone make the loop
	// poll, once one comes within the budget of the last, which on a
	// loaded host may take a while.
	waitSpinLimit(t, single, quietSpin)
	for deadline := time.Now().Add(10 * time.Second); ; {
		// The STATS request before the batches may make the loop poll
		// once; the batches, more.
		before := stat(t, single, "loop_polls")
		for range 50 {
			batch()
		}
		if stat(t, single, "loop_polls")-before > 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("loop_polls rose by at most 1 over each 50 batches of a multiplexed connection for 10 s on a quiet host, want polls")
		}
	}
	// Contended: they do not (the STATS request before them may).
	defer f.contend()()
	waitSpinLimit(t, single, busySpin)
	before := stat(t, single, "loop_polls")
	for range 50 {
		batch()
	}
	if after := stat(t, single, "loop_polls"); after-before > 1 {
		t.Errorf("loop_polls rose by %d over 50 batches of a multiplexed connection on a contended host, want at most 1", after-before)
	}
}
