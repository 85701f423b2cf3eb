package soak

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Report is the outcome of Run: where it ran, and per table size its
// summary and intervals. Durations are time.Duration (nanoseconds in JSON);
// memory is in kB as /proc/meminfo gives it (KiB), or in pages as
// /proc/vmstat does (Machine.PageSize bytes each).
type Report struct {
	Started  time.Time `json:"started"` // UTC
	Settings Settings  `json:"settings"`
	Machine  Machine   `json:"machine"`
	Dirty    DirtyVM   `json:"dirty_vm"`
	Tables   []Table   `json:"tables"` // in the order of Settings.Buckets
	// Warnings are problems that did not stop the soak, such as a /proc
	// read that failed during an interval (its counters are then 0).
	Warnings []string `json:"warnings,omitempty"`
}

// Settings are the Config a Report was made with, after defaults.
type Settings struct {
	Dir          string        `json:"dir"`
	Keep         bool          `json:"keep"`
	Buckets      []int         `json:"buckets"`
	Load         float64       `json:"load"`
	Duration     time.Duration `json:"duration_ns"`
	Interval     time.Duration `json:"interval_ns"`
	Workers      int           `json:"workers"`
	SyncInterval time.Duration `json:"sync_interval_ns"`
	Limit        string        `json:"limit"` // LimitSpec
}

// Machine describes the machine and the file system of Settings.Dir.
type Machine struct {
	Kernel      string `json:"kernel"` // uname -r
	CPUModel    string `json:"cpu_model"`
	NumCPU      int    `json:"num_cpu"`
	GoVersion   string `json:"go_version"`
	GOOS        string `json:"goos"`
	GOARCH      string `json:"goarch"`
	MemTotalKB  uint64 `json:"mem_total_kb"`
	PageSize    int    `json:"page_size"`
	FSType      string `json:"fs_type"`  // of Settings.Dir, e.g. "ext4" (see FSName)
	FSMagic     uint32 `json:"fs_magic"` // statfs f_type
	ClockSource string `json:"clock_source"`
	// ClockRead is the median time of one time.Now(), which every measured
	// decision includes once.
	ClockRead time.Duration `json:"clock_read_ns"`
}

// DirtyVM holds the kernel's writeback settings (/proc/sys/vm/dirty_*) and
// the thresholds it derived from them when the soak started. A *Bytes
// setting, when not 0, overrides the matching *Ratio.
type DirtyVM struct {
	Ratio                    int64  `json:"dirty_ratio"`            // % of dirtyable memory at which writers are throttled
	BackgroundRatio          int64  `json:"dirty_background_ratio"` // % at which background writeback starts
	Bytes                    int64  `json:"dirty_bytes"`
	BackgroundBytes          int64  `json:"dirty_background_bytes"`
	ExpireCentisecs          int64  `json:"dirty_expire_centisecs"`    // age at which dirty data is written back
	WritebackCentisecs       int64  `json:"dirty_writeback_centisecs"` // how often the flusher wakes
	ThresholdPages           uint64 `json:"nr_dirty_threshold"`
	BackgroundThresholdPages uint64 `json:"nr_dirty_background_threshold"`
}

// Table is the result for one table size.
type Table struct {
	Buckets   int     `json:"buckets"`
	Slots     uint64  `json:"slots"`
	SlotSize  int     `json:"slot_size"`
	FileBytes int64   `json:"file_bytes"`
	File      string  `json:"file"`
	Prefill   Prefill `json:"prefill"`
	// Intervals are the measured intervals, in order; the last may be
	// shorter than Settings.Interval.
	Intervals []Interval `json:"intervals"`
	Summary   Summary    `json:"summary"`
	// Decisions, Denied and Errors total the intervals; FirstError is the
	// first error an acquire returned, if any.
	Decisions  uint64 `json:"decisions"`
	Denied     uint64 `json:"denied"`
	Errors     uint64 `json:"errors"`
	FirstError string `json:"first_error,omitempty"`
	// UsedSlots and TableFull are the table's counters at the end.
	UsedSlots uint64 `json:"used_slots"`
	TableFull uint64 `json:"table_full"`
}

// Prefill is the creation of every bucket before the measurement, with the
// syncs that ran meanwhile.
type Prefill struct {
	Took       time.Duration `json:"took_ns"`
	Rate       float64       `json:"rate"` // buckets per second
	Syncs      int           `json:"syncs"`
	SyncMax    time.Duration `json:"sync_max_ns"`
	SyncErrors int           `json:"sync_errors"`
	DirtyMaxKB uint64        `json:"dirty_max_kb"`
}

// Interval is one report interval of one table size.
type Interval struct {
	Start     time.Duration `json:"start_ns"` // since the measurement began
	End       time.Duration `json:"end_ns"`
	Decisions uint64        `json:"decisions"`
	Rate      float64       `json:"rate"`   // decisions per second
	Denied    uint64        `json:"denied"` // decisions that were denied (and wrote nothing)
	Errors    uint64        `json:"errors"` // acquires that returned an error
	P50       time.Duration `json:"p50_ns"`
	P99       time.Duration `json:"p99_ns"`
	P999      time.Duration `json:"p999_ns"`
	Max       time.Duration `json:"max_ns"`
	Mean      time.Duration `json:"mean_ns"`
	// Syncs started in the interval: how many, the longest, their total
	// time, and how many failed.
	Syncs      int           `json:"syncs"`
	SyncMax    time.Duration `json:"sync_max_ns"`
	SyncTotal  time.Duration `json:"sync_total_ns"`
	SyncErrors int           `json:"sync_errors"`
	// DirtyKB and WritebackKB are read from /proc/meminfo, and Vmstat from
	// /proc/vmstat, at the interval's end; DirtyMaxKB is the largest Dirty
	// sampled during the interval (every second, and at its end).
	DirtyKB     uint64 `json:"dirty_kb"`
	WritebackKB uint64 `json:"writeback_kb"`
	DirtyMaxKB  uint64 `json:"dirty_max_kb"`
	Vmstat      Vmstat `json:"vmstat"`
	Stall       bool   `json:"stall"` // see Classify
}

// Summary condenses a table size's intervals.
type Summary struct {
	// SteadyP50, SteadyP99 and SteadyRate are the medians over the
	// intervals of their p50, p99 and decisions/s.
	SteadyP50  time.Duration `json:"steady_p50_ns"`
	SteadyP99  time.Duration `json:"steady_p99_ns"`
	SteadyRate float64       `json:"steady_rate"`
	// Worst is the index of the interval with the highest p99 (the first
	// of equals), -1 if there are no intervals.
	Worst int `json:"worst"`
	// Stalls counts stalled intervals; FirstStall is the index of the
	// first, -1 if none. DirtyAtStallKB and BackgroundThresholdKB are
	// Dirty and the background writeback threshold at its end.
	Stalls                int    `json:"stalls"`
	FirstStall            int    `json:"first_stall"`
	DirtyAtStallKB        uint64 `json:"dirty_at_stall_kb"`
	BackgroundThresholdKB uint64 `json:"background_threshold_at_stall_kb"`
	// MaxDirtyKB is the largest Dirty seen during the measurement.
	MaxDirtyKB uint64 `json:"max_dirty_kb"`
}

// Stall thresholds: an interval stalls when its p99 is above StallFactor
// times the baseline's, or above StallFloor, or when a sync in it took
// longer than StallSyncFactor sync intervals: the sidecar then cannot keep
// its promise that a power loss loses at most one sync interval.
const (
	StallFactor     = 10
	StallFloor      = 100 * time.Microsecond
	StallSyncFactor = 2
)

// Classify sets each row's Stall: a row stalls when its p99 is above
// StallFactor times the baseline's p99 or above StallFloor, when a sync
// started in it took more than StallSyncFactor times syncInterval, or
// when no decision finished in it at all (one decision then spans it).
// The baseline is the first row in which a decision finished.
func Classify(rows []Interval, syncInterval time.Duration) {
	base := time.Duration(-1)
	for i := range rows {
		r := &rows[i]
		if base < 0 && r.Decisions > 0 {
			base = r.P99
		}
		r.Stall = r.Decisions == 0 || r.P99 > StallFloor || (base >= 0 && r.P99 > StallFactor*base) ||
			(syncInterval > 0 && r.SyncMax > StallSyncFactor*syncInterval)
	}
}

// Summarize condenses rows, already classified, into a Summary; pageSize
// converts /proc/vmstat's pages to kB.
func Summarize(rows []Interval, pageSize int) Summary {
	s := Summary{Worst: -1, FirstStall: -1}
	if len(rows) == 0 {
		return s
	}
	p50 := make([]time.Duration, len(rows))
	p99 := make([]time.Duration, len(rows))
	rate := make([]float64, len(rows))
	for i, r := range rows {
		p50[i], p99[i], rate[i] = r.P50, r.P99, r.Rate
		if s.Worst < 0 || r.P99 > rows[s.Worst].P99 {
			s.Worst = i
		}
		if r.Stall {
			if s.Stalls == 0 {
				s.FirstStall = i
				s.DirtyAtStallKB = r.DirtyKB
				s.BackgroundThresholdKB = r.Vmstat.NrDirtyBackgroundThreshold * uint64(pageSize) / 1024
			}
			s.Stalls++
		}
		s.MaxDirtyKB = max(s.MaxDirtyKB, r.DirtyMaxKB, r.DirtyKB)
	}
	s.SteadyP50, s.SteadyP99 = median(p50), median(p99)
	s.SteadyRate = median(rate)
	return s
}

// median returns the median of v, the mean of the middle two for an even
// length; v is reordered.
func median[T time.Duration | float64](v []T) T {
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("soak: write JSON: %w", err)
	}
	return nil
}

// WriteMarkdown writes the report for people: a header describing the
// machine and its writeback thresholds, a summary table with a row per
// table size, then each size's intervals.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	st, m, d := &r.Settings, &r.Machine, &r.Dirty
	page := uint64(m.PageSize)
	fmt.Fprintf(&b, "# Soak: sustained random acquires on a disk-backed state file\n\n")
	fmt.Fprintf(&b, "Started %s. Limit `%s`, %d worker(s) at full rate, sync every %v (as the sidecar), "+
		"load %g, %v per table size, reported every %v.\n\n",
		r.Started.Format(time.RFC3339), st.Limit, st.Workers, st.SyncInterval, st.Load, st.Duration, st.Interval)
	b.WriteString("| | |\n|---|---|\n")
	fmt.Fprintf(&b, "| machine | %s, %d CPUs, %.1f GiB, %s %s/%s |\n",
		m.CPUModel, m.NumCPU, float64(m.MemTotalKB)/(1<<20), m.GoVersion, m.GOOS, m.GOARCH)
	fmt.Fprintf(&b, "| kernel | %s |\n", m.Kernel)
	fmt.Fprintf(&b, "| state files | `%s` on %s |\n", st.Dir, m.FSType)
	fmt.Fprintf(&b, "| clock | %s, %v per read (in every decision's time) |\n", m.ClockSource, m.ClockRead)
	fmt.Fprintf(&b, "| dirty thresholds | background writeback above %s MiB, writers throttled above %s MiB (at the start) |\n",
		mib(d.BackgroundThresholdPages*page/1024), mib(d.ThresholdPages*page/1024))
	fmt.Fprintf(&b, "| vm settings | dirty_background_ratio %d, dirty_ratio %d, dirty_background_bytes %d, dirty_bytes %d, "+
		"dirty_expire_centisecs %d, dirty_writeback_centisecs %d |\n\n",
		d.BackgroundRatio, d.Ratio, d.BackgroundBytes, d.Bytes, d.ExpireCentisecs, d.WritebackCentisecs)

	b.WriteString("## Summary\n\n")
	b.WriteString("| buckets | state file | prefill | decisions/s | p50 µs | p99 µs | worst interval | max Dirty MiB | stalls |\n")
	b.WriteString("|---:|---:|---|---:|---:|---:|---|---:|---|\n")
	for i := range r.Tables {
		t := &r.Tables[i]
		s := &t.Summary
		worst := "-"
		if s.Worst >= 0 {
			wr := &t.Intervals[s.Worst]
			worst = fmt.Sprintf("%s: p99 %s µs, max %s µs", span(wr), us(wr.P99), us(wr.Max))
		}
		stalls := "none"
		if s.FirstStall >= 0 {
			stalls = fmt.Sprintf("%d of %d intervals, from %s (Dirty %s MiB, background threshold %s MiB)",
				s.Stalls, len(t.Intervals), span(&t.Intervals[s.FirstStall]), mib(s.DirtyAtStallKB), mib(s.BackgroundThresholdKB))
		}
		fmt.Fprintf(&b, "| %s | %s MiB | %.2f s (%s/s) | %s | %s | %s | %s | %s | %s |\n",
			group(uint64(t.Buckets)), mib(uint64(t.FileBytes)/1024), t.Prefill.Took.Seconds(), group(uint64(t.Prefill.Rate)),
			group(uint64(s.SteadyRate)), us(s.SteadyP50), us(s.SteadyP99), worst, mib(s.MaxDirtyKB), stalls)
	}
	fmt.Fprintf(&b, "\nDecision times are per decision, in process (no socket). decisions/s, p50 and p99 are medians over the "+
		"intervals. An interval stalls when its p99 is above %dx the first interval's or above %v, or when a sync "+
		"started in it took longer than %d sync intervals (a power loss could then lose more than one interval).\n",
		StallFactor, StallFloor, StallSyncFactor)

	for i := range r.Tables {
		t := &r.Tables[i]
		fmt.Fprintf(&b, "\n## %s buckets\n\n", group(uint64(t.Buckets)))
		fmt.Fprintf(&b, "State file %s MiB (%s slots of %d bytes, `%s`). Prefill %.2f s (%s buckets/s), "+
			"%d syncs meanwhile (longest %s ms, %d failed). %s decisions, %s denied, %s errors",
			mib(uint64(t.FileBytes)/1024), group(t.Slots), t.SlotSize, t.File, t.Prefill.Took.Seconds(), group(uint64(t.Prefill.Rate)),
			t.Prefill.Syncs, ms(t.Prefill.SyncMax), t.Prefill.SyncErrors, group(t.Decisions), group(t.Denied), group(t.Errors))
		if t.FirstError != "" {
			fmt.Fprintf(&b, " (first: %s)", t.FirstError)
		}
		b.WriteString(".\n\n")
		b.WriteString("| t (s) | decisions/s | mean µs | p50 µs | p99 µs | p99.9 µs | max µs | syncs | max sync ms | Dirty MiB | Writeback MiB | stall |\n")
		b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
		for j := range t.Intervals {
			v := &t.Intervals[j]
			stall := ""
			if v.Stall {
				stall = "stall"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %d | %s | %s | %s | %s |\n",
				secs(v.End), group(uint64(v.Rate)), us(v.Mean), us(v.P50), us(v.P99), us(v.P999), us(v.Max),
				v.Syncs, ms(v.SyncMax), mib(v.DirtyKB), mib(v.WritebackKB), stall)
		}
	}
	if len(r.Warnings) > 0 {
		b.WriteString("\n## Warnings\n\n")
		for _, w := range r.Warnings {
			fmt.Fprintf(&b, "- %s\n", w)
		}
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("soak: write Markdown: %w", err)
	}
	return nil
}

// span formats an interval's bounds, "t=10-20 s".
func span(v *Interval) string { return "t=" + secs(v.Start) + "-" + secs(v.End) + " s" }

// secs formats a duration in seconds without needless decimals.
func secs(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) }

func us(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e3, 'f', 2, 64) }

func ms(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 2, 64) }

func mib(kb uint64) string { return strconv.FormatFloat(float64(kb)/1024, 'f', 1, 64) }

// group formats n with thousands separators: 1234567 is "1,234,567".
func group(n uint64) string {
	s := strconv.FormatUint(n, 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
