package throttledlimiter_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clients/go/internal/sluicedtest"
	"github.com/sluicehq/sluice/clients/go/sluice"
	"github.com/sluicehq/sluice/clients/go/throttledlimiter"
	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"
)

func TestMain(m *testing.M) { sluicedtest.Main(m, worker) }

// t0 is the simulated clock's start: 2023-11-14T22:13:20Z.
var t0 = time.Unix(1_700_000_000, 0)

// For the same requests at the same times, the rate limiter reports what
// throttled's own GCRARateLimiterCtx reports over its memory store:
// limited or not, Limit, Remaining, ResetAfter and RetryAfter, to the
// nanosecond. Random steps, their seed printed. The one difference: for a
// quantity above the burst, which can never pass, throttled reports
// Remaining as the limit and ResetAfter 0 whatever the state, and the
// rate limiter the state, which is what throttled's peek reports.
func TestRateLimiter_likeThrottled(t *testing.T) {
	c := sluicedtest.Start(t).Dial(t)
	ctx := context.Background()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	for i, q := range []throttled.RateQuota{
		{MaxRate: throttled.PerSec(10), MaxBurst: 4},
		{MaxRate: throttled.PerSec(3), MaxBurst: 0},
		{MaxRate: throttled.PerMin(60), MaxBurst: 20},
		{MaxRate: throttled.PerDuration(7, 5*time.Second), MaxBurst: 2},
	} {
		st, err := memstore.New(0)
		if err != nil {
			t.Fatal(err)
		}
		now := t0
		st.SetTimeNow(func() time.Time { return now })
		want, err := throttled.NewGCRARateLimiterCtx(throttled.WrapStoreWithContext(st), q)
		if err != nil {
			t.Fatal(err)
		}
		l, err := throttledlimiter.Limit(q)
		if err != nil {
			t.Fatal(err)
		}
		got := throttledlimiter.New(c, l, throttledlimiter.WithPrefix(strconv.Itoa(i)+":"))
		got.SetClock(func() time.Time { return now })
		_, period := q.MaxRate.Quota()
		for step := range 400 {
			quantity := rng.IntN(q.MaxBurst + 3) // now and then more than the burst
			var peek throttled.RateLimitResult
			if quantity > q.MaxBurst+1 {
				_, peek, err = want.RateLimitCtx(ctx, "k", 0)
			}
			wl, wr, werr := want.RateLimitCtx(ctx, "k", quantity)
			gl, gr, gerr := got.RateLimitCtx(ctx, "k", quantity)
			if err != nil || werr != nil || gerr != nil {
				t.Fatalf("quota %d step %d: %v, %v, %v", i, step, err, werr, gerr)
			}
			if quantity > q.MaxBurst+1 {
				wr.Remaining, wr.ResetAfter = peek.Remaining, peek.ResetAfter
			}
			if gl != wl || gr != wr {
				t.Fatalf("quota %d step %d (%v after t0, quantity %d): limited %v %+v; throttled's: %v %+v",
					i, step, now.Sub(t0), quantity, gl, gr, wl, wr)
			}
			now = now.Add(time.Duration(rng.Int64N(int64(period) / 4)))
		}
	}
}

func TestLimit(t *testing.T) {
	l, err := throttledlimiter.Limit(throttled.RateQuota{MaxRate: throttled.PerMin(10), MaxBurst: 4})
	if err != nil || l != sluice.GCRA(4, 10, time.Minute) {
		t.Errorf("Limit: %v %v, want %v", l, err, sluice.GCRA(4, 10, time.Minute))
	}
	for _, q := range []throttled.RateQuota{{}, {MaxRate: throttled.PerSec(1), MaxBurst: -1}} {
		if _, err := throttledlimiter.Limit(q); err == nil {
			t.Errorf("Limit(%+v) accepted", q)
		}
	}
}

// Through throttled's HTTP middleware: its headers, from the sidecar's
// decision.
func TestRateLimiter_http(t *testing.T) {
	c := sluicedtest.Start(t).Dial(t)
	l := sluice.GCRA(1, 1, time.Hour) // 2 at once, then 1 an hour
	h := (&throttled.HTTPRateLimiterCtx{RateLimiter: throttledlimiter.New(c, l)}).RateLimit(http.NotFoundHandler())
	for i, want := range []string{"404 2 1 3600 ", "404 2 0 7200 ", "429 2 0 7200 3600"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		hd := rec.Header()
		got := strconv.Itoa(rec.Code) + " " + hd.Get("X-RateLimit-Limit") + " " + hd.Get("X-RateLimit-Remaining") + " " +
			hd.Get("X-RateLimit-Reset") + " " + hd.Get("Retry-After")
		if got != want {
			t.Errorf("request %d: %q, want %q", i, got, want)
		}
	}
}

// When the sidecar cannot be reached, the client's failure policy decides.
func TestRateLimiter_failurePolicy(t *testing.T) {
	sc := sluicedtest.Start(t)
	l := sluice.GCRA(1, 1, time.Hour)
	open := throttledlimiter.New(sc.Dial(t, sluice.WithFailurePolicy(sluice.FailOpen)), l)
	closed := throttledlimiter.New(sc.Dial(t, sluice.WithFailurePolicy(sluice.FailClosed)), l)
	failing := throttledlimiter.New(sc.Dial(t), l)
	sc.Stop(t)
	ctx := context.Background()
	unknown := throttled.RateLimitResult{Limit: -1, Remaining: -1, ResetAfter: -1, RetryAfter: -1}
	if limited, res, err := open.RateLimitCtx(ctx, "k", 1); err != nil || limited || res != unknown {
		t.Errorf("FailOpen: %v %+v %v; want not limited, nothing known", limited, res, err)
	}
	if limited, res, err := closed.RateLimitCtx(ctx, "k", 1); err != nil || !limited || res.RetryAfter <= 0 || res.Limit != -1 {
		t.Errorf("FailClosed: %v %+v %v; want limited, a RetryAfter", limited, res, err)
	}
	if _, _, err := failing.RateLimit("k", 1); !errors.Is(err, sluice.ErrUnavailable) {
		t.Errorf("FailError: %v, want unavailable", err)
	}
}

// Several processes through throttled's middleware on one key admit
// exactly the burst between them (no request passes at the rate of 1 an
// hour during the test).
func TestRateLimiter_processes(t *testing.T) {
	sluicedtest.ExactAcrossProcesses(t, sluicedtest.Start(t).Socket)
}

// worker is one process of TestRateLimiter_processes, or of a Store's
// tests when workerEnv names one (storeWorker).
func worker(ctx context.Context, c *sluice.Client, w time.Duration) (int, error) {
	if mode := os.Getenv(workerEnv); mode != "" {
		return storeWorker(ctx, c, mode)
	}
	l, err := throttledlimiter.Limit(throttled.RateQuota{MaxRate: throttled.PerHour(1), MaxBurst: sluicedtest.ProcLimit - 1})
	if err != nil {
		return 0, err
	}
	return sluicedtest.Requests((&throttled.HTTPRateLimiterCtx{RateLimiter: throttledlimiter.New(c, l)}).RateLimit)
}
