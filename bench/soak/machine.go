package soak

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench/hist"
)

// newReport describes the machine, Dir's file system and the writeback
// settings.
func newReport(c Config) (*Report, error) {
	rep := &Report{
		Started: time.Now().UTC().Round(0),
		Settings: Settings{
			Dir: c.Dir, Keep: c.Keep, Buckets: c.Buckets, Load: c.Load, Duration: c.Duration,
			Interval: c.Interval, Workers: c.Workers, SyncInterval: c.SyncInterval, Limit: LimitSpec,
		},
		Tables: []Table{},
	}
	m := &rep.Machine
	m.NumCPU, m.GoVersion, m.GOOS, m.GOARCH = runtime.NumCPU(), runtime.Version(), runtime.GOOS, runtime.GOARCH
	m.PageSize = os.Getpagesize()
	var err error
	if m.FSMagic, _, err = statDir(c.Dir); err != nil {
		return nil, err
	}
	m.FSType = FSName(m.FSMagic)
	if m.Kernel, err = kernelRelease(); err != nil {
		return nil, err
	}
	cpu, err := os.ReadFile(procCPUInfo)
	if err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	m.CPUModel = ParseCPUModel(cpu)
	mi, err := readMeminfo()
	if err != nil {
		return nil, err
	}
	m.MemTotalKB = mi.MemTotalKB
	m.ClockSource = "unknown"
	if b, err := os.ReadFile(clockSources); err == nil {
		m.ClockSource = strings.TrimSpace(string(b))
	}
	m.ClockRead = clockRead()

	d := &rep.Dirty
	for _, f := range []struct {
		name string
		v    *int64
	}{
		{"dirty_ratio", &d.Ratio}, {"dirty_background_ratio", &d.BackgroundRatio},
		{"dirty_bytes", &d.Bytes}, {"dirty_background_bytes", &d.BackgroundBytes},
		{"dirty_expire_centisecs", &d.ExpireCentisecs}, {"dirty_writeback_centisecs", &d.WritebackCentisecs},
	} {
		if *f.v, err = readInt(procVM + f.name); err != nil {
			return nil, err
		}
	}
	vs, err := readVmstat()
	if err != nil {
		return nil, err
	}
	d.ThresholdPages, d.BackgroundThresholdPages = vs.NrDirtyThreshold, vs.NrDirtyBackgroundThreshold
	return rep, nil
}

// clockRead returns the median time between two successive clock reads.
func clockRead() time.Duration {
	var h hist.Histogram
	prev := time.Now()
	for range 100_000 {
		now := time.Now()
		h.Record(now.Sub(prev))
		prev = now
	}
	return h.Quantile(0.5)
}
