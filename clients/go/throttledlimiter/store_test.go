package throttledlimiter_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clients/go/internal/sluicedtest"
	"github.com/sluicehq/sluice/clients/go/sluice"
	"github.com/sluicehq/sluice/clients/go/throttledlimiter"
	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/storetest"
)

// throttled's own conformance suite for a GCRAStoreCtx, against a real
// sluiced: the register semantics, then a key's expiry (the suite sleeps
// its ttl of one second).
func TestStore_storetest(t *testing.T) {
	st := throttledlimiter.NewStore(sluicedtest.Start(t).Dial(t), "")
	storetest.TestGCRAStoreCtx(t, st)
	storetest.TestGCRAStoreTTLCtx(t, st)
}

// throttled's GCRARateLimiterCtx over the store: 64 goroutines on one key
// admit exactly the burst (no request passes at the rate of 1 an hour
// during the test), every one deciding in the process with a read and a
// compare-and-swap.
func TestStore_gcraRateLimiter(t *testing.T) {
	st := throttledlimiter.NewStore(sluicedtest.Start(t).Dial(t), "")
	const burst = 20
	rl, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{MaxRate: throttled.PerHour(1), MaxBurst: burst - 1})
	if err != nil {
		t.Fatal(err)
	}
	rl.SetMaxCASAttemptsLimit(1000) // 64 at once on one key lose many races; none may err
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			limited, _, err := rl.RateLimitCtx(context.Background(), "login:alice", 1)
			if err != nil {
				t.Error(err)
				return
			}
			if !limited {
				admitted.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := admitted.Load(); n != burst {
		t.Errorf("admitted %d of 64, want exactly %d", n, burst)
	}
}

// Several processes through throttled's own GCRA rate limiter over the
// store, in its middleware, on one key admit exactly the burst between
// them.
func TestStore_processes(t *testing.T) {
	t.Setenv(workerEnv, "http")
	sluicedtest.ExactAcrossProcesses(t, sluicedtest.Start(t).Socket)
}

// Several processes increment one register by compare-and-swap, each
// retrying on a lost race: no increment is lost.
func TestStore_casAcrossProcesses(t *testing.T) {
	t.Setenv(workerEnv, "cas")
	sc := sluicedtest.Start(t)
	done := sluicedtest.Processes(t, sluicedtest.Procs, sc.Socket, "0")
	sum := 0
	for _, n := range done {
		sum += n
	}
	v, _, err := throttledlimiter.NewStore(sc.Dial(t), "").GetWithTime(context.Background(), casKey)
	if err != nil {
		t.Fatal(err)
	}
	if want := sluicedtest.Procs * casIncrements; sum != want || v != int64(want) {
		t.Errorf("%d processes did %d increments (%v) and the register holds %d, want %d", sluicedtest.Procs, sum, done, v, want)
	}
}

// workerEnv says which work a worker process of a Store's test does.
const workerEnv = "THROTTLEDLIMITER_TEST_STORE"

const (
	casKey        = "counter"
	casIncrements = 100
)

// storeWorker is one process of TestStore_processes ("http") or
// TestStore_casAcrossProcesses ("cas").
func storeWorker(ctx context.Context, c *sluice.Client, mode string) (int, error) {
	st := throttledlimiter.NewStore(c, "")
	switch mode {
	case "http":
		rl, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{MaxRate: throttled.PerHour(1), MaxBurst: sluicedtest.ProcLimit - 1})
		if err != nil {
			return 0, err
		}
		rl.SetMaxCASAttemptsLimit(1000)
		return sluicedtest.Requests((&throttled.HTTPRateLimiterCtx{RateLimiter: rl}).RateLimit)
	case "cas":
		for i := range casIncrements {
			for {
				v, _, err := st.GetWithTime(ctx, casKey)
				if err != nil {
					return i, err
				}
				var ok bool
				if v == -1 {
					ok, err = st.SetIfNotExistsWithTTL(ctx, casKey, 1, time.Hour)
				} else {
					ok, err = st.CompareAndSwapWithTTL(ctx, casKey, v, v+1, time.Hour)
				}
				if err != nil {
					return i, err
				}
				if ok {
					break
				}
			}
		}
		return casIncrements, nil
	}
	return 0, fmt.Errorf("no worker %q", mode)
}

// Bad input gets an error that says what is wrong; a key longer than the
// sidecar's is stored under its SHA-256, apart from other long keys; a ttl
// of 0 (throttled's, for a quantity of 0) keeps the value MinStoreTTL.
func TestStore_badInput(t *testing.T) {
	ctx := context.Background()
	st := throttledlimiter.NewStore(sluicedtest.Start(t).Dial(t), "")
	if _, err := st.SetIfNotExistsWithTTL(ctx, "k", 1, -time.Second); err == nil || !strings.Contains(err.Error(), "negative time to live") {
		t.Errorf("a negative ttl: %v", err)
	}
	if _, err := st.CompareAndSwapWithTTL(ctx, "k", 1, 2, -1); err == nil || !strings.Contains(err.Error(), "negative time to live") {
		t.Errorf("a negative ttl: %v", err)
	}
	if _, err := st.SetIfNotExistsWithTTL(ctx, "k", 1, sluice.MaxRegisterTTL+1); !errors.Is(err, sluice.ErrInvalidCost) || !strings.Contains(err.Error(), "ttl is 1ns to") {
		t.Errorf("a ttl above the longest: %v", err)
	}
	a, b := strings.Repeat("a", 5000), strings.Repeat("a", 4999)+"b"
	for i, k := range []string{a, b} {
		if ok, err := st.SetIfNotExistsWithTTL(ctx, k, int64(i), time.Hour); err != nil || !ok {
			t.Fatalf("a key of %d bytes: %v, %v", len(k), ok, err)
		}
	}
	if v, _, err := st.GetWithTime(ctx, b); err != nil || v != 1 {
		t.Errorf("the second long key holds %d, %v; want 1", v, err)
	}
	if ok, err := st.SetIfNotExistsWithTTL(ctx, "zero", 7, 0); err != nil || !ok {
		t.Fatalf("ttl 0: %v, %v", ok, err)
	}
	if v, _, err := st.GetWithTime(ctx, "zero"); err != nil || v != 7 {
		t.Errorf("a value set with ttl 0: %d, %v; want 7 kept for %v", v, err, throttledlimiter.MinStoreTTL)
	}
}
