package compare

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/bench/hist"
)

// Cell is one measurement: one target deciding one limit under one
// scenario. Latencies are per decision, in nanoseconds: a pipelined batch
// counts its round trip once for each of its decisions.
type Cell struct {
	Lang       string  `json:"lang"` // "go" or "python": the client's language
	Target     string  `json:"target"`
	Family     string  `json:"family"`
	Limit      string  `json:"limit"`
	Scenario   string  `json:"scenario"`
	Clients    int     `json:"clients"`
	Depth      int     `json:"depth"`
	Ops        int64   `json:"ops"`
	Allowed    int64   `json:"allowed"`
	Errors     int64   `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	Seconds    float64 `json:"seconds"`
	OpsPerSec  float64 `json:"ops_per_sec"`
	P50        int64   `json:"p50_ns"`
	P90        int64   `json:"p90_ns"`
	P99        int64   `json:"p99_ns"`
	P999       int64   `json:"p999_ns"`
	Max        int64   `json:"max_ns"`
	Skipped    string  `json:"skipped,omitempty"` // why the cell did not run
	// Rounds is how many rounds ran; the cell is the median one, and
	// OpsPerSecMin and OpsPerSecMax are the range over all of them.
	Rounds       int     `json:"rounds,omitempty"`
	OpsPerSecMin float64 `json:"ops_per_sec_min,omitempty"`
	OpsPerSecMax float64 `json:"ops_per_sec_max,omitempty"`
}

// lane is one goroutine issuing requests: a client, or one of the
// requests a multiplexed client keeps in flight.
type lane struct {
	ops      atomic.Int64 // decisions measured so far, for the progress line
	_        [56]byte     // keep lanes off each other's cache line
	allowed  int64
	errors   int64
	first    error
	measured bool // an answer (or error) was measured
	h        hist.Histogram
}

// measure runs one cell: fresh state, Warmup unmeasured, then Duration
// measured. A decision counts when its round trip ends inside the
// measured window, and so does each lane's first answer after the warmup,
// however late it comes (see lane.run).
func measure(ctx context.Context, t Target, k LimitKind, sc Scenario, w *Workload, keys []string, warmup, dur time.Duration, live func(ops int64, elapsed time.Duration)) Cell {
	c := Cell{Lang: "go", Target: t.Name(), Family: t.Family(), Limit: string(k), Scenario: sc.Name, Clients: sc.Clients, Depth: sc.Depth}
	if err := t.Reset(ctx); err != nil {
		c.Skipped = "reset: " + err.Error()
		return c
	}
	lanesPerConn, batch := 1, sc.Depth
	if t.Multiplexed() {
		lanesPerConn, batch = sc.Depth, 1
	}
	var conns []Conn
	defer func() {
		for _, cn := range conns {
			cn.Close()
		}
	}()
	for range sc.Clients {
		cn, err := t.Dial(ctx, k)
		if err != nil {
			c.Skipped = "dial: " + err.Error()
			return c
		}
		conns = append(conns, cn)
	}
	lanes := make([]*lane, sc.Clients*lanesPerConn)
	start := time.Now().Add(warmup)
	end := start.Add(dur)
	var wg sync.WaitGroup
	for i := range lanes {
		ln := &lane{}
		lanes[i] = ln
		wg.Add(1)
		go func(cn Conn, ch *Chooser) {
			defer wg.Done()
			ln.run(ctx, cn, ch, keys, batch, start, end)
		}(conns[i/lanesPerConn], w.Chooser(i))
	}
	// A target that stops answering must not hang the run: close its
	// connections a while after the window ends.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	watchdog := time.NewTimer(time.Until(end) + 15*time.Second)
	defer watchdog.Stop()
wait:
	for {
		select {
		case <-done:
			break wait
		case <-tick.C:
			if live != nil {
				var ops int64
				for _, ln := range lanes {
					ops += ln.ops.Load()
				}
				live(ops, time.Since(start))
			}
		case <-watchdog.C:
			for _, cn := range conns {
				cn.Close()
			}
			<-done
			c.FirstError = "target stopped answering; connections closed"
			break wait
		}
	}
	var h hist.Histogram
	for _, ln := range lanes {
		h.Merge(&ln.h)
		c.Allowed += ln.allowed
		c.Errors += ln.errors
		if ln.first != nil && c.FirstError == "" {
			c.FirstError = ln.first.Error()
		}
	}
	c.Ops = int64(h.Count())
	c.Seconds = dur.Seconds()
	c.OpsPerSec = float64(c.Ops) / c.Seconds
	c.P50, c.P90, c.P99, c.P999, c.Max = int64(h.Quantile(0.5)), int64(h.Quantile(0.9)), int64(h.Quantile(0.99)), int64(h.Quantile(0.999)), int64(h.Max())
	return c
}

// maxConsecutiveErrors ends a lane whose target is gone rather than
// spinning on errors.
const maxConsecutiveErrors = 1000

func (ln *lane) run(ctx context.Context, cn Conn, ch *Chooser, keys []string, batch int, start, end time.Time) {
	b := make([]string, batch)
	failing := 0
	t0 := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		default:
		}
		for i := range b {
			b[i] = keys[ch.Next()]
		}
		allowed, err := cn.Do(ctx, b)
		t1 := time.Now()
		// An answer after the end is not measured, unless the lane has
		// measured none yet: then it counts, and the lane ends. Every lane
		// thus reports at least one answer, however slow the machine is
		// against a short Duration (a lane's first answer after the warmup
		// can take longer than a test's whole window).
		late := t1.After(end)
		if late && ln.measured {
			return
		}
		if t1.After(start) || late {
			ln.measured = true
			if err != nil {
				ln.errors += int64(len(b))
				if ln.first == nil {
					ln.first = err
				}
			} else {
				ln.h.RecordN(t1.Sub(t0), uint64(len(b)))
				ln.allowed += int64(allowed)
				ln.ops.Add(int64(len(b)))
			}
		}
		if late {
			return
		}
		if err != nil {
			if failing++; failing >= maxConsecutiveErrors {
				if ln.first == nil {
					ln.first = err
				}
				return
			}
		} else {
			failing = 0
		}
		t0 = t1
	}
}

// label names a cell in progress lines.
func label(target, limit, scenario string) string {
	return fmt.Sprintf("%-16s %-13s %-10s", target, limit, scenario)
}
