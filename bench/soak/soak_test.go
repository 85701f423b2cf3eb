package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/shm"
)

// tiny is a soak small enough for a unit test.
func tiny(dir string) Config {
	return Config{
		Dir: dir, Buckets: []int{2000, 5000},
		Duration: 300 * time.Millisecond, Interval: 100 * time.Millisecond, SyncInterval: 50 * time.Millisecond,
	}
}

// dirEmpty fails the test if dir holds anything.
func dirEmpty(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		t.Errorf("%s left behind in %s", e.Name(), dir)
	}
}

func TestRun_tiny(t *testing.T) {
	dir := t.TempDir()
	var progress bytes.Buffer
	cfg := tiny(dir)
	cfg.Progress = &progress
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	dirEmpty(t, dir)
	if len(rep.Tables) != 2 {
		t.Fatalf("%d tables, want 2", len(rep.Tables))
	}
	for i, tb := range rep.Tables {
		if tb.Buckets != cfg.Buckets[i] {
			t.Errorf("table %d has %d buckets, want %d", i, tb.Buckets, cfg.Buckets[i])
		}
		if want := uint64((tb.Buckets*10 + 6) / 7); tb.Slots != want {
			t.Errorf("%d buckets: %d slots, want ceil(buckets/0.7) = %d", tb.Buckets, tb.Slots, want)
		}
		if tb.UsedSlots < uint64(tb.Buckets) || tb.Errors != 0 || tb.TableFull != 0 {
			t.Errorf("%d buckets: used %d slots, %d errors (%s), %d table full", tb.Buckets, tb.UsedSlots, tb.Errors, tb.FirstError, tb.TableFull)
		}
		if len(tb.Intervals) != 3 {
			t.Fatalf("%d buckets: %d intervals, want 3", tb.Buckets, len(tb.Intervals))
		}
		syncs, decisions := tb.Prefill.Syncs, uint64(0)
		for j, v := range tb.Intervals {
			decisions += v.Decisions // an interval of 100 ms may have none on a busy machine
			if !(v.P50 <= v.P99 && v.P99 <= v.P999 && v.P999 <= v.Max) {
				t.Errorf("%d buckets, interval %d: p50 %v, p99 %v, p99.9 %v, max %v out of order", tb.Buckets, j, v.P50, v.P99, v.P999, v.Max)
			}
			if want := time.Duration(j+1) * cfg.Interval; v.End != want {
				t.Errorf("%d buckets, interval %d ends at %v, want %v", tb.Buckets, j, v.End, want)
			}
			if v.SyncErrors != 0 {
				t.Errorf("%d buckets, interval %d: %d sync errors", tb.Buckets, j, v.SyncErrors)
			}
			syncs += v.Syncs
		}
		if syncs == 0 {
			t.Errorf("%d buckets: no syncs", tb.Buckets)
		}
		if decisions == 0 {
			t.Errorf("%d buckets: no decisions", tb.Buckets)
		}
		if tb.Summary.Worst < 0 {
			t.Errorf("%d buckets: summary has no worst interval", tb.Buckets)
		}
	}
	if n := strings.Count(progress.String(), "\n"); n != 2*(1+3) {
		t.Errorf("%d progress lines, want a prefill line and 3 interval lines per size:\n%s", n, progress.String())
	}

	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Summary", "## 2,000 buckets", "## 5,000 buckets", "| 2,000 |", "| 5,000 |", LimitSpec} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md.String())
		}
	}
	if n := strings.Count(md.String(), "| t (s) | decisions/s |"); n != 2 {
		t.Errorf("Markdown has %d interval tables, want 2", n)
	}

	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&back, rep) {
		t.Errorf("JSON does not round-trip:\n got %+v\nwant %+v", back, *rep)
	}
	var again bytes.Buffer
	if err := back.WriteJSON(&again); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.Bytes(), js.Bytes()) {
		t.Errorf("JSON re-encodes differently:\n%s\n%s", js.Bytes(), again.Bytes())
	}
}

// cancelOnInterval cancels a context when the first interval is reported.
type cancelOnInterval struct{ cancel context.CancelFunc }

func (c cancelOnInterval) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(" t=")) {
		c.cancel()
	}
	return len(p), nil
}

func TestRun_cancel(t *testing.T) {
	t.Run("before", func(t *testing.T) {
		dir := t.TempDir()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := Run(ctx, tiny(dir)); err != context.Canceled {
			t.Errorf("Run: %v, want %v", err, context.Canceled)
		}
		dirEmpty(t, dir)
	})
	t.Run("measuring", func(t *testing.T) {
		dir := t.TempDir()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cfg := tiny(dir)
		cfg.Duration = time.Hour // only the cancellation ends it
		cfg.Progress = cancelOnInterval{cancel}
		rep, err := Run(ctx, cfg)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run: %v, want %v", err, context.Canceled)
		}
		if rep == nil || len(rep.Tables) != 0 {
			t.Errorf("report %+v, want one with no finished table", rep)
		}
		dirEmpty(t, dir)
	})
}

func TestRun_noRoom(t *testing.T) {
	dir := t.TempDir()
	cfg := tiny(dir)
	cfg.Buckets = []int{2000, 1 << 40} // a 90 TiB state file
	rep, err := Run(context.Background(), cfg)
	if !errors.Is(err, ErrNoRoom) || rep != nil {
		t.Fatalf("Run: %v, %v; want nil, %v", rep, err, ErrNoRoom)
	}
	if !strings.Contains(err.Error(), dir) {
		t.Errorf("error %q does not name %s", err, dir)
	}
	dirEmpty(t, dir)
}

func TestRun_badConfig(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []Config{
		{},
		{Dir: dir, Buckets: []int{0}},
		{Dir: dir, Buckets: []int{10, 10}},
		{Dir: dir, Load: 1.5},
		{Dir: dir, Load: -0.5},
		{Dir: dir, Workers: -1},
		{Dir: dir, Interval: -time.Second},
	} {
		if _, err := Run(context.Background(), c); !errors.Is(err, ErrConfig) {
			t.Errorf("Run(%+v): %v, want %v", c, err, ErrConfig)
		}
	}
	if _, err := Run(context.Background(), Config{Dir: dir + "/missing"}); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("Run with a missing Dir: %v, want an error naming it", err)
	}
	dirEmpty(t, dir)
}

func TestWorker_noAllocs(t *testing.T) {
	tb, err := shm.NewHeap(shm.Options{SlotCount: 2000})
	if err != nil {
		t.Fatal(err)
	}
	e := engine.New(tb)
	lim, err := engine.NewLimit(soakLimit)
	if err != nil {
		t.Fatal(err)
	}
	w := newWorker(e, &lim, 1000, 1, 1, 1)
	now := time.Now()
	for range 5000 { // create the buckets first
		now = w.decide(now, 0)
	}
	if n := testing.AllocsPerRun(1000, func() { now = w.decide(now, 0) }); n != 0 {
		t.Errorf("a decision allocates %v times", n)
	}
	if w.errs[0] != 0 || w.hists[0].Count() != 5000+1001 {
		t.Errorf("%d errors (%v), %d decisions recorded", w.errs[0], w.firstErr, w.hists[0].Count())
	}
}

// row is an interval for the classifier's tests.
func row(decisions uint64, p99 time.Duration) Interval {
	return Interval{Decisions: decisions, P50: p99 / 2, P99: p99, Max: 2 * p99}
}

// synced sets a row's longest sync.
func synced(r Interval, longest time.Duration) Interval {
	r.SyncMax = longest
	return r
}

func TestClassify(t *testing.T) {
	us := time.Microsecond
	for _, tc := range []struct {
		name string
		rows []Interval
		want []bool
	}{
		{"none", nil, nil},
		{"steady", []Interval{row(9, us), row(9, 2*us), row(9, 10*us)}, []bool{false, false, false}},
		{"10x", []Interval{row(9, us), row(9, 10*us+1), row(9, us)}, []bool{false, true, false}},
		{"floor", []Interval{row(9, 20*us), row(9, 100*us), row(9, 100*us+1)}, []bool{false, false, true}},
		{"first above floor", []Interval{row(9, 150*us), row(9, 150*us)}, []bool{true, true}},
		{"no decision", []Interval{row(9, us), row(0, 0), row(9, us)}, []bool{false, true, false}},
		{"baseline after an empty row", []Interval{row(0, 0), row(9, 2*us), row(9, 21*us)}, []bool{true, false, true}},
		{"slow sync", []Interval{row(9, us), synced(row(9, us), 2*time.Second), synced(row(9, us), 2*time.Second+1)}, []bool{false, false, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			Classify(tc.rows, time.Second)
			for i, r := range tc.rows {
				if r.Stall != tc.want[i] {
					t.Errorf("row %d (p99 %v, %d decisions): stall %v, want %v", i, r.P99, r.Decisions, r.Stall, tc.want[i])
				}
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	us := time.Microsecond
	rows := []Interval{row(9, us), row(9, 3*us), row(9, 50*us), row(9, 2*us), row(9, 200*us), row(9, 2*us)}
	for i := range rows {
		rows[i].Start, rows[i].End = time.Duration(i)*10*time.Second, time.Duration(i+1)*10*time.Second
		rows[i].Rate = float64(1000 * (i + 1))
		rows[i].DirtyKB = uint64(1000 * (i + 1))
		rows[i].DirtyMaxKB = uint64(1500 * (i + 1))
		rows[i].Vmstat.NrDirtyBackgroundThreshold = uint64(100 * (i + 1))
	}
	Classify(rows, time.Second)
	got := Summarize(rows, 4096)
	want := Summary{
		SteadyP50: 1250 * time.Nanosecond, SteadyP99: 2500 * time.Nanosecond, SteadyRate: 3500,
		Worst: 4, Stalls: 2, FirstStall: 2,
		DirtyAtStallKB: 3000, BackgroundThresholdKB: 300 * 4, MaxDirtyKB: 9000,
	}
	if got != want {
		t.Errorf("Summarize:\n got %+v\nwant %+v", got, want)
	}
	if got := Summarize(nil, 4096); got.Worst != -1 || got.FirstStall != -1 {
		t.Errorf("Summarize(nil) = %+v, want no worst and no stall", got)
	}
}

const meminfo = `MemTotal:       24522084 kB
MemFree:        22837360 kB
Dirty:               136 kB
Writeback:             8 kB
WritebackTmp:          0 kB
`

const vmstat = `nr_free_pages 5709340
nr_dirty_threshold 1148584
nr_dirty_background_threshold 573588
nr_writeback 2
nr_writeback_temp 0
nr_dirty 34
`

func TestParseMeminfo(t *testing.T) {
	got, err := ParseMeminfo([]byte(meminfo))
	if want := (Meminfo{MemTotalKB: 24522084, DirtyKB: 136, WritebackKB: 8}); err != nil || got != want {
		t.Errorf("ParseMeminfo = %+v, %v; want %+v", got, err, want)
	}
	for _, bad := range []string{"", strings.Replace(meminfo, "Dirty:", "Dirt:", 1), strings.Replace(meminfo, "136", "x", 1)} {
		if _, err := ParseMeminfo([]byte(bad)); !errors.Is(err, ErrFormat) {
			t.Errorf("ParseMeminfo(%q): %v, want %v", bad, err, ErrFormat)
		}
	}
}

func TestParseVmstat(t *testing.T) {
	got, err := ParseVmstat([]byte(vmstat))
	want := Vmstat{NrDirty: 34, NrWriteback: 2, NrDirtyThreshold: 1148584, NrDirtyBackgroundThreshold: 573588}
	if err != nil || got != want {
		t.Errorf("ParseVmstat = %+v, %v; want %+v", got, err, want)
	}
	if _, err := ParseVmstat([]byte(strings.Replace(vmstat, "nr_dirty 34\n", "", 1))); !errors.Is(err, ErrFormat) {
		t.Errorf("ParseVmstat without nr_dirty: %v, want %v", err, ErrFormat)
	}
}

func TestParseCPUModel(t *testing.T) {
	for text, want := range map[string]string{
		"processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\nmodel name\t: other\n": "AMD EPYC 7B13",
		"processor\t: 0\nBogoMIPS\t: 50.00\n": "unknown",
		"":                                    "unknown",
	} {
		if got := ParseCPUModel([]byte(text)); got != want {
			t.Errorf("ParseCPUModel(%q) = %q, want %q", text, got, want)
		}
	}
}

func TestFSName(t *testing.T) {
	for m, want := range map[uint32]string{0xEF53: "ext4", 0x01021994: "tmpfs", 0x58465342: "xfs", 0x9123683E: "btrfs",
		0x794C7630: "overlayfs", 0x1234: "unknown (0x1234)"} {
		if got := FSName(m); got != want {
			t.Errorf("FSName(%#x) = %q, want %q", m, got, want)
		}
	}
}

func TestGroup(t *testing.T) {
	for n, want := range map[uint64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", 10_000_000: "10,000,000"} {
		if got := group(n); got != want {
			t.Errorf("group(%d) = %q, want %q", n, got, want)
		}
	}
}
