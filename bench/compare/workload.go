package compare

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"
)

// Dist is how a client chooses its next key.
type Dist string

const (
	Uniform Dist = "uniform" // every key equally likely
	Zipf    Dist = "zipf"    // key i with probability proportional to (1+i)^-s
)

// LimitKind names one of the workload's limits. Every target decides the
// same limit with the same parameters, each in its own way (Sluice's
// algorithm, a Lua script, an x/time/rate limiter).
type LimitKind string

const (
	TokenBucket LimitKind = "token-bucket"
	GCRA        LimitKind = "gcra"
	FixedWindow LimitKind = "fixed-window"
)

// Limits holds the parameters of the three limits. The defaults describe
// "a burst of 100, refilling 10 per second" in each algorithm's terms.
type Limits struct {
	TBMax      int64         // token bucket: capacity
	TBRefill   time.Duration // token bucket: refill period
	TBAmount   int64         // token bucket: tokens per refill
	GCRABurst  int64         // GCRA: max_burst (redis-cell's)
	GCRACount  int64         // GCRA: requests per period
	GCRAPeriod time.Duration // GCRA: period
	FWLimit    int64         // fixed window: requests per window
	FWWindow   time.Duration // fixed window: window length
}

// DefaultLimits is the workload's limits unless flags say otherwise.
var DefaultLimits = Limits{
	TBMax: 100, TBRefill: time.Second, TBAmount: 10,
	GCRABurst: 100, GCRACount: 10, GCRAPeriod: time.Second,
	FWLimit: 100, FWWindow: 10 * time.Second,
}

// Validate reports parameters no target could use.
func (l Limits) Validate() error {
	switch {
	case l.TBMax < 1 || l.TBAmount < 1 || l.TBRefill < time.Millisecond || l.TBRefill%time.Millisecond != 0:
		return fmt.Errorf("token bucket: max and amount must be >= 1 and refill a whole number of milliseconds, got max=%d amount=%d refill=%v", l.TBMax, l.TBAmount, l.TBRefill)
	case l.GCRABurst < 0 || l.GCRACount < 1 || l.GCRAPeriod < time.Second || l.GCRAPeriod%time.Second != 0:
		return fmt.Errorf("gcra: burst must be >= 0, count >= 1 and period a whole number of seconds (CL.THROTTLE's unit), got burst=%d count=%d period=%v", l.GCRABurst, l.GCRACount, l.GCRAPeriod)
	case l.FWLimit < 1 || l.FWWindow < time.Second || l.FWWindow%time.Second != 0:
		return fmt.Errorf("fixed window: limit must be >= 1 and the window a whole number of seconds (EXPIRE's unit), got limit=%d window=%v", l.FWLimit, l.FWWindow)
	}
	return nil
}

// Workload is what every target is asked to decide: which keys, chosen
// how, under which limits.
type Workload struct {
	Keys   int     // distinct keys
	Dist   Dist    // key choice
	ZipfS  float64 // Zipf exponent, > 1
	Seed   uint64  // makes every run choose the same key sequence
	Prefix string  // key i is Prefix + decimal i
	Limits Limits
}

// Validate reports a workload that cannot run.
func (w *Workload) Validate() error {
	if w.Keys < 1 {
		return fmt.Errorf("keys: %d, want at least 1", w.Keys)
	}
	switch w.Dist {
	case Uniform:
	case Zipf:
		if !(w.ZipfS > 1) {
			return fmt.Errorf("zipf exponent %v: must be above 1", w.ZipfS)
		}
	default:
		return fmt.Errorf("key distribution %q: want %q or %q", w.Dist, Uniform, Zipf)
	}
	return w.Limits.Validate()
}

// KeySet builds the workload's keys once: the timed loops pick from it
// and never format or allocate a key.
func (w *Workload) KeySet() []string {
	keys := make([]string, w.Keys)
	buf := make([]byte, 0, len(w.Prefix)+20)
	for i := range keys {
		keys[i] = string(strconv.AppendInt(append(buf[:0], w.Prefix...), int64(i), 10))
	}
	return keys
}

// A Chooser draws key indexes for one client; each client has its own,
// seeded from the workload's seed and the client's number, so a target
// sees the same sequence in every run.
type Chooser struct {
	n    int
	rng  *rand.Rand
	zipf *rand.Zipf
}

// Chooser returns client c's key chooser.
func (w *Workload) Chooser(c int) *Chooser {
	rng := rand.New(rand.NewPCG(w.Seed, uint64(c)))
	ch := &Chooser{n: w.Keys, rng: rng}
	if w.Dist == Zipf && w.Keys > 1 {
		ch.zipf = rand.NewZipf(rng, w.ZipfS, 1, uint64(w.Keys-1))
	}
	return ch
}

// Next returns the next key index, in [0, Keys).
func (c *Chooser) Next() int {
	if c.zipf != nil {
		return int(c.zipf.Uint64())
	}
	return c.rng.IntN(c.n)
}
