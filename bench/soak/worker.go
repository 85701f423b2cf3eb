package soak

import (
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/bench/hist"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/shm"
)

// keyPrefix starts every bucket's key: bucket i is "soak:<i>".
const keyPrefix = "soak:"

// appendKey writes the key of bucket i into buf[:0].
func appendKey(buf []byte, i int) []byte {
	return strconv.AppendInt(append(buf[:0], keyPrefix...), int64(i), 10)
}

// A worker issues acquires on random buckets as fast as it can. It owns one
// histogram and two counters per interval: those of interval i are written
// only by the worker until it stores done > i, and only read by others
// afterwards.
type worker struct {
	e   *engine.Engine
	lim *engine.Limit
	n   int // buckets; keys are drawn uniformly from [0, n)
	rng *rand.Rand
	key []byte
	d   bucket.Decision

	hists    []hist.Histogram // decision times, per interval
	denied   []uint64         // denied decisions, per interval
	errs     []uint64         // acquires that failed, per interval
	firstErr error            // read only after the worker has returned

	done atomic.Int64 // intervals finished: their histograms and counters are final
}

func newWorker(e *engine.Engine, lim *engine.Limit, n, intervals int, seed, id uint64) *worker {
	return &worker{
		e: e, lim: lim, n: n,
		rng:    rand.New(rand.NewPCG(seed, id)),
		key:    make([]byte, 0, len(keyPrefix)+20),
		hists:  make([]hist.Histogram, intervals),
		denied: make([]uint64, intervals),
		errs:   make([]uint64, intervals),
	}
}

// decide makes one decision that starts at the clock reading start, in
// interval iv, records its time and returns the clock reading after it,
// which is the next decision's start. It allocates nothing.
func (w *worker) decide(start time.Time, iv int) time.Time {
	w.key = appendKey(w.key, w.rng.IntN(w.n))
	err := w.e.Acquire(&w.d, w.key, w.lim, 1, engine.At(start.UnixNano()), 0)
	end := time.Now()
	w.hists[iv].Record(end.Sub(start))
	switch {
	case err != nil:
		w.errs[iv]++
		if w.firstErr == nil {
			w.firstErr = err
		}
	case !w.d.Allowed:
		w.denied[iv]++
	}
	return end
}

// run decides until the last interval ends or stop is set. ends[i] is the
// end of interval i as an offset from t0. A decision belongs to the
// interval its start falls in.
func (w *worker) run(t0 time.Time, ends []time.Duration, stop *atomic.Bool) {
	iv := 0
	now := time.Now()
	for k := uint(0); ; k++ {
		if k%4096 == 0 && stop.Load() {
			return
		}
		now = w.decide(now, iv)
		if el := now.Sub(t0); el >= ends[iv] {
			// A decision that outlasted whole intervals leaves them empty.
			for iv < len(ends) && el >= ends[iv] {
				iv++
			}
			w.done.Store(int64(iv))
			if iv == len(ends) {
				return
			}
		}
	}
}

// syncRecord is one Sync call.
type syncRecord struct {
	at   time.Time // when it started
	took time.Duration
	err  bool
}

// dirtySample is one reading of /proc/meminfo.
type dirtySample struct {
	at          time.Time
	dirtyKB     uint64
	writebackKB uint64
}

// recorder collects what the sync and sampling goroutines see, for the
// collector to attribute to intervals.
type recorder struct {
	mu       sync.Mutex
	syncs    []syncRecord
	inflight time.Time // start of the Sync running now; zero if none
	samples  []dirtySample
	warnings []string
	warned   map[string]bool
}

func (r *recorder) warn(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.warned == nil {
		r.warned = make(map[string]bool)
	}
	if !r.warned[msg] {
		r.warned[msg] = true
		r.warnings = append(r.warnings, msg)
	}
}

func (r *recorder) sample(at time.Time, m Meminfo) {
	r.mu.Lock()
	r.samples = append(r.samples, dirtySample{at, m.DirtyKB, m.WritebackKB})
	r.mu.Unlock()
}

// syncLoop does what the sidecar's sync loop does (internal/server
// syncLoop): every interval it records the time in the table and syncs it.
// It times each Sync call. On stop it records the time once more and
// returns; the table's Close makes the final sync.
func syncLoop(t *shm.Table, every time.Duration, rec *recorder, stop <-chan struct{}) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			t.RecordTime(time.Now().UnixNano())
			return
		case <-tick.C:
		}
		t.RecordTime(time.Now().UnixNano())
		start := time.Now()
		rec.mu.Lock()
		rec.inflight = start
		rec.mu.Unlock()
		err := t.Sync()
		took := time.Since(start)
		rec.mu.Lock()
		rec.syncs = append(rec.syncs, syncRecord{start, took, err != nil})
		rec.inflight = time.Time{}
		rec.mu.Unlock()
		if err != nil {
			rec.warn(err.Error())
		}
	}
}

// sampleLoop reads /proc/meminfo every second until stop.
func sampleLoop(rec *recorder, stop <-chan struct{}) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		now := time.Now()
		m, err := readMeminfo()
		if err != nil {
			rec.warn(err.Error())
			continue
		}
		rec.sample(now, m)
	}
}

// syncsIn summarises the syncs that started in [from, to).
func (r *recorder) syncsIn(from, to time.Time) (n int, longest, total time.Duration, errs int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.syncs {
		if s.at.Before(from) || !s.at.Before(to) {
			continue
		}
		n++
		longest = max(longest, s.took)
		total += s.took
		if s.err {
			errs++
		}
	}
	return n, longest, total, errs
}

// syncBusy reports whether a Sync that started before t is still running.
func (r *recorder) syncBusy(t time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.inflight.IsZero() && r.inflight.Before(t)
}

// dirtyMax returns the largest Dirty sampled in [from, to].
func (r *recorder) dirtyMax(from, to time.Time) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var m uint64
	for _, s := range r.samples {
		if !s.at.Before(from) && !s.at.After(to) {
			m = max(m, s.dirtyKB)
		}
	}
	return m
}
