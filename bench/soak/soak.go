package soak

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/bench/hist"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/shm"
)

// Defaults for a Config's zero fields.
const (
	DefaultLoad         = 0.7
	DefaultDuration     = 150 * time.Second
	DefaultInterval     = 10 * time.Second
	DefaultWorkers      = 1
	DefaultSyncInterval = time.Second // as the sidecar's
)

// DefaultBuckets are the table sizes measured when Config.Buckets is empty.
var DefaultBuckets = []int{1_000_000, 10_000_000}

// Spare is the free space Dir must keep beyond a state file, in bytes.
const Spare = 1 << 30

// LimitSpec is the limit of every decision: a burst of 100 refilling 10 per
// second. On a table of a million buckets at full rate each bucket sees a
// few requests per second, so nearly every decision is allowed and writes
// its slot, dirtying its page.
const LimitSpec = "token_bucket:max=100,refill_time=1s,refill_amount=10"

var soakLimit = bucket.Limit{Algorithm: bucket.TokenBucket, Max: 100, RefillTime: int64(time.Second), RefillAmount: 10}

// Config says what to soak. Zero fields take the defaults above.
type Config struct {
	// Dir is the directory of the state files; it must exist, on the
	// disk to be measured. Each table size gets its own file,
	// soak-<buckets>.state, removed afterwards unless Keep.
	Dir  string
	Keep bool
	// Buckets are the live buckets of each table, measured in order.
	Buckets []int
	// Load is buckets per slot: a table has ceil(buckets/Load) slots of
	// 64 bytes. In (0, 1].
	Load float64
	// Duration is the measured time per table size, after the prefill.
	Duration time.Duration
	// Interval is the report interval; the last one of a table may be
	// shorter if it does not divide Duration.
	Interval time.Duration
	// Workers is the number of goroutines issuing acquires.
	Workers int
	// SyncInterval is how often the table is synced, as the sidecar's
	// --sync-interval.
	SyncInterval time.Duration
	// Progress, if not nil, gets a short line after each prefill and each
	// interval. Its write errors are ignored.
	Progress io.Writer
}

// withDefaults returns c with defaults applied, or an error wrapping
// ErrConfig.
func (c Config) withDefaults() (Config, error) {
	if c.Dir == "" {
		return c, fmt.Errorf("%w: no Dir", ErrConfig)
	}
	if len(c.Buckets) == 0 {
		c.Buckets = DefaultBuckets
	}
	c.Buckets = append([]int(nil), c.Buckets...)
	if c.Load == 0 {
		c.Load = DefaultLoad
	}
	if c.Duration == 0 {
		c.Duration = DefaultDuration
	}
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	if c.SyncInterval == 0 {
		c.SyncInterval = DefaultSyncInterval
	}
	switch {
	case !(c.Load > 0 && c.Load <= 1):
		return c, fmt.Errorf("%w: load %g is not in (0, 1]", ErrConfig, c.Load)
	case c.Duration < 0 || c.Interval < 0 || c.SyncInterval < 0:
		return c, fmt.Errorf("%w: negative duration, interval or sync interval", ErrConfig)
	case c.Workers < 0:
		return c, fmt.Errorf("%w: %d workers", ErrConfig, c.Workers)
	}
	seen := make(map[int]bool)
	for _, b := range c.Buckets {
		if b < 1 {
			return c, fmt.Errorf("%w: %d buckets", ErrConfig, b)
		}
		if seen[b] {
			return c, fmt.Errorf("%w: %d buckets listed twice", ErrConfig, b)
		}
		seen[b] = true
	}
	return c, nil
}

// geometry returns the slot count and file size of a table of b buckets.
func (c *Config) geometry(b int) (uint64, int64, error) {
	slots := math.Ceil(float64(b) / c.Load)
	if slots > 1<<50 { // beyond any disk; keeps the file size in an int64
		return 0, 0, fmt.Errorf("%w: %d buckets at load %g is too many slots", ErrConfig, b, c.Load)
	}
	o := shm.Options{SlotCount: uint64(slots)}
	return o.SlotCount, o.FileSize(), nil
}

// path returns the state file of a table of b buckets.
func (c *Config) path(b int) string {
	return filepath.Join(c.Dir, fmt.Sprintf("soak-%d.state", b))
}

// checkRoom fails with ErrNoRoom unless Dir has need bytes plus Spare free.
func checkRoom(dir string, need int64, what string) error {
	_, avail, err := statDir(dir)
	if err != nil {
		return err
	}
	if uint64(need)+Spare > avail {
		return fmt.Errorf("%w in %s: %s needs %d bytes plus %d to spare, %d are free",
			ErrNoRoom, dir, what, need, int64(Spare), avail)
	}
	return nil
}

// Run soaks each table size of cfg in turn and returns the report. It
// returns early, with ctx.Err(), when ctx is cancelled. On any error the
// state file being measured is closed and removed (unless Keep), and the
// Report returned, if not nil, holds the table sizes finished before.
//
// Before creating anything Run checks that Dir has room for the largest
// state file (all of them with Keep) plus Spare, and again before each
// file; it fails with ErrNoRoom otherwise.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	fi, err := os.Stat(c.Dir)
	if err != nil {
		return nil, fmt.Errorf("soak: state directory: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%w: %s is not a directory", ErrConfig, c.Dir)
	}
	var need, largest int64
	for _, b := range c.Buckets {
		_, size, err := c.geometry(b)
		if err != nil {
			return nil, err
		}
		largest = max(largest, size)
		need += size
	}
	if !c.Keep {
		need = largest
	}
	what := "the largest state file"
	if c.Keep {
		what = "every state file (Keep)"
	}
	if err := checkRoom(c.Dir, need, what); err != nil {
		return nil, err
	}
	rep, err := newReport(c)
	if err != nil {
		return nil, err
	}
	for _, b := range c.Buckets {
		t, err := runTable(ctx, &c, b, rep)
		if err != nil {
			return rep, err
		}
		rep.Tables = append(rep.Tables, t)
	}
	return rep, nil
}

// runTable creates, prefills and soaks the table of b buckets, then closes
// it and removes its file (unless Keep).
func runTable(ctx context.Context, c *Config, b int, rep *Report) (res Table, err error) {
	slots, size, err := c.geometry(b)
	if err != nil {
		return res, err
	}
	path := c.path(b)
	if err := checkRoom(c.Dir, size, "the state file of "+group(uint64(b))+" buckets"); err != nil {
		return res, err
	}
	tb, err := shm.Create(path, shm.Options{SlotCount: slots}, 0)
	if err != nil {
		return res, fmt.Errorf("soak: %w", err)
	}
	g := tb.Geometry()
	res = Table{Buckets: b, Slots: g.SlotCount, SlotSize: g.SlotSize, FileBytes: g.FileSize, File: path}

	rec := &recorder{}
	stopBG := make(chan struct{})
	var bg sync.WaitGroup
	bg.Go(func() { syncLoop(tb, c.SyncInterval, rec, stopBG) })
	bg.Go(func() { sampleLoop(rec, stopBG) })
	defer func() {
		close(stopBG)
		bg.Wait()
		st := tb.Stats()
		res.UsedSlots, res.TableFull = st.Used, st.TableFull
		if cerr := tb.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("soak: %s: %w", path, cerr))
		}
		if !c.Keep {
			if rerr := os.Remove(path); rerr != nil {
				err = errors.Join(err, fmt.Errorf("soak: %w", rerr))
			}
		}
		rep.Warnings = append(rep.Warnings, rec.warnings...)
	}()

	e := engine.New(tb)
	lim, err := engine.NewLimit(soakLimit)
	if err != nil {
		return res, fmt.Errorf("soak: limit %s: %w", LimitSpec, err)
	}
	began := time.Now()
	if err := prefill(ctx, e, &lim, b, c.Workers); err != nil {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		return res, fmt.Errorf("soak: prefill %s: %w", path, err)
	}
	t0 := time.Now()
	res.Prefill.Took = t0.Sub(began)
	res.Prefill.Rate = float64(b) / res.Prefill.Took.Seconds()
	res.Prefill.Syncs, res.Prefill.SyncMax, _, res.Prefill.SyncErrors = rec.syncsIn(began, t0)
	res.Prefill.DirtyMaxKB = rec.dirtyMax(began, t0)
	progress(c.Progress, "soak %s buckets: %s MiB state file prefilled in %.2f s (%s buckets/s); measuring %v\n",
		group(uint64(b)), mib(uint64(size)/1024), res.Prefill.Took.Seconds(), group(uint64(res.Prefill.Rate)), c.Duration)

	res.Intervals, err = measure(ctx, c, e, &lim, b, t0, rec, &res)
	if err != nil {
		return res, err
	}
	Classify(res.Intervals, c.SyncInterval)
	res.Summary = Summarize(res.Intervals, rep.Machine.PageSize)
	return res, nil
}

// prefill creates every bucket once, the keys split between workers.
func prefill(ctx context.Context, e *engine.Engine, lim *engine.Limit, n, workers int) error {
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := n*w/workers, n*(w+1)/workers
		wg.Go(func() {
			buf := make([]byte, 0, len(keyPrefix)+20)
			var d bucket.Decision
			for i := lo; i < hi; i++ {
				if (i-lo)%65536 == 0 && ctx.Err() != nil {
					errs[w] = ctx.Err()
					return
				}
				buf = appendKey(buf, i)
				if err := e.Acquire(&d, buf, lim, 1, engine.At(time.Now().UnixNano()), 0); err != nil {
					errs[w] = fmt.Errorf("bucket %d: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.Join(errs...)
}

// measure runs the workers from t0 for c.Duration and returns the
// intervals, each collected at its end.
func measure(ctx context.Context, c *Config, e *engine.Engine, lim *engine.Limit, b int, t0 time.Time, rec *recorder, res *Table) ([]Interval, error) {
	var ends []time.Duration
	for end := c.Interval; ; end += c.Interval {
		ends = append(ends, min(end, c.Duration))
		if end >= c.Duration {
			break
		}
	}
	seed := uint64(t0.UnixNano())
	ws := make([]*worker, c.Workers)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for i := range ws {
		ws[i] = newWorker(e, lim, b, len(ends), seed, uint64(i))
		w := ws[i]
		wg.Go(func() { w.run(t0, ends, &stop) })
	}
	halt := func() {
		stop.Store(true)
		wg.Wait()
	}

	rows := make([]Interval, 0, len(ends))
	var h hist.Histogram
	for i, end := range ends {
		start := time.Duration(0)
		if i > 0 {
			start = ends[i-1]
		}
		if err := sleepUntil(ctx, t0.Add(end)); err != nil {
			halt()
			return nil, err
		}
		at := time.Now()
		row := Interval{Start: start, End: end}
		if mi, err := readMeminfo(); err != nil {
			rec.warn(err.Error())
		} else {
			row.DirtyKB, row.WritebackKB = mi.DirtyKB, mi.WritebackKB
			rec.sample(at, mi)
		}
		if vs, err := readVmstat(); err != nil {
			rec.warn(err.Error())
		} else {
			row.Vmstat = vs
		}
		// Wait for every worker to finish the interval, and for a Sync
		// that started in it.
		for _, w := range ws {
			if err := poll(ctx, func() bool { return w.done.Load() > int64(i) }); err != nil {
				halt()
				return nil, err
			}
		}
		if err := poll(ctx, func() bool { return !rec.syncBusy(t0.Add(end)) }); err != nil {
			halt()
			return nil, err
		}
		h.Reset()
		for _, w := range ws {
			h.Merge(&w.hists[i])
			row.Denied += w.denied[i]
			row.Errors += w.errs[i]
		}
		row.Decisions = h.Count()
		row.Rate = float64(row.Decisions) / (end - start).Seconds()
		row.P50, row.P99, row.P999 = h.Quantile(0.5), h.Quantile(0.99), h.Quantile(0.999)
		row.Max, row.Mean = h.Max(), h.Mean()
		row.Syncs, row.SyncMax, row.SyncTotal, row.SyncErrors = rec.syncsIn(t0.Add(start), t0.Add(end))
		row.DirtyMaxKB = rec.dirtyMax(t0.Add(start), at)
		rows = append(rows, row)
		res.Decisions += row.Decisions
		res.Denied += row.Denied
		res.Errors += row.Errors

		Classify(rows, c.SyncInterval) // a row's class depends only on itself and the first row
		stall := ""
		if rows[i].Stall {
			stall = "  STALL"
		}
		progress(c.Progress, "soak %s buckets t=%ss: %s decisions/s, p50 %s µs, p99 %s µs, max %s µs; %d syncs, max %s ms; Dirty %s MiB, Writeback %s MiB%s\n",
			group(uint64(b)), secs(end), group(uint64(row.Rate)), us(row.P50), us(row.P99), us(row.Max),
			row.Syncs, ms(row.SyncMax), mib(row.DirtyKB), mib(row.WritebackKB), stall)
	}
	halt()
	for _, w := range ws {
		if w.firstErr != nil {
			res.FirstError = w.firstErr.Error()
			break
		}
	}
	return rows, nil
}

// sleepUntil waits until t or until ctx is done, and then returns its error.
func sleepUntil(ctx context.Context, t time.Time) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// poll waits until cond holds, checking every millisecond, or until ctx is
// done.
func poll(ctx context.Context, cond func() bool) error {
	for !cond() {
		if err := sleepUntil(ctx, time.Now().Add(time.Millisecond)); err != nil {
			return err
		}
	}
	return nil
}

func progress(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format, args...)
	}
}
