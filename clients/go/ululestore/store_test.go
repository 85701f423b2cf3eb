package ululestore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clients/go/internal/sluicedtest"
	"github.com/sluicehq/sluice/clients/go/sluice"
	"github.com/sluicehq/sluice/clients/go/ululestore"
	"github.com/ulule/limiter/v3"
	"github.com/ulule/limiter/v3/drivers/middleware/stdlib"
	"github.com/ulule/limiter/v3/drivers/store/tests"
)

func TestMain(m *testing.M) { sluicedtest.Main(m, worker) }

// ulule's own conformance suite, against a real sluiced. The sequential
// test counts 3 requests a minute: it starts away from a minute's end, so
// that no window boundary passes while it runs.
func TestStore_ululeSuite(t *testing.T) {
	c := sluicedtest.Start(t).Dial(t)
	t.Run("sequential", func(t *testing.T) {
		sluicedtest.AwayFromMinuteEnd(20 * time.Second)
		tests.TestStoreSequentialAccess(t, ululestore.New(c))
	})
	t.Run("concurrent", func(t *testing.T) {
		tests.TestStoreConcurrentAccess(t, ululestore.New(c))
	})
}

// step is one call to the store and what it must return.
type step struct {
	op      string // get, inc (count n), peek, reset
	n       int64
	remain  int64
	reached bool
}

func run(t *testing.T, s limiter.Store, key string, rate limiter.Rate, steps []step) {
	t.Helper()
	ctx := context.Background()
	for i, st := range steps {
		var got limiter.Context
		var err error
		switch st.op {
		case "get":
			got, err = s.Get(ctx, key, rate)
		case "inc":
			got, err = s.Increment(ctx, key, st.n, rate)
		case "peek":
			got, err = s.Peek(ctx, key, rate)
		case "reset":
			got, err = s.Reset(ctx, key, rate)
		}
		if err != nil {
			t.Fatalf("step %d (%s): %v", i, st.op, err)
		}
		if got.Limit != rate.Limit || got.Remaining != st.remain || got.Reached != st.reached {
			t.Fatalf("step %d (%s %d): limit %d remaining %d reached %v, want %d %d %v",
				i, st.op, st.n, got.Limit, got.Remaining, got.Reached, rate.Limit, st.remain, st.reached)
		}
	}
}

// The store reports what ulule's stores report for one request at a time,
// and decides an increment all or nothing.
func TestStore_semantics(t *testing.T) {
	c := sluicedtest.Start(t).Dial(t)
	s := ululestore.New(c)
	rate := limiter.Rate{Limit: 5, Period: sluicedtest.QuietWindow()}
	t.Run("one at a time", func(t *testing.T) {
		run(t, s, "one", rate, []step{
			{op: "peek", remain: 5}, {op: "get", remain: 4}, {op: "get", remain: 3},
			{op: "inc", n: 3, remain: 0}, {op: "peek", remain: 0}, // at the limit, not past it
			{op: "get", reached: true}, {op: "peek", reached: true}, {op: "get", reached: true},
			{op: "reset", remain: 5}, {op: "peek", remain: 5}, {op: "get", remain: 4},
		})
	})
	t.Run("all or nothing", func(t *testing.T) {
		run(t, s, "inc", rate, []step{
			{op: "inc", n: 4, remain: 1},
			{op: "inc", n: 3, reached: true}, // does not fit: nothing counted
			{op: "peek", remain: 1}, {op: "inc", n: 1, remain: 0}, {op: "get", reached: true},
			{op: "inc", n: 0, reached: true}, // a count of 0 only looks
		})
	})
	t.Run("a limit of 0 refuses everything", func(t *testing.T) {
		run(t, s, "zero", limiter.Rate{Limit: 0, Period: rate.Period}, []step{
			{op: "peek", remain: 0}, {op: "get", reached: true}, {op: "get", reached: true},
		})
	})
	t.Run("prefixes count apart", func(t *testing.T) {
		other := ululestore.New(c, ululestore.WithPrefix("other:"))
		run(t, s, "p", rate, []step{{op: "inc", n: 5, remain: 0}})
		run(t, other, "p", rate, []step{{op: "get", remain: 4}})
	})
	t.Run("long keys", func(t *testing.T) {
		long := strings.Repeat("k", 5000)
		run(t, s, long, rate, []step{{op: "inc", n: 5, remain: 0}, {op: "get", reached: true}})
		run(t, s, long+"2", rate, []step{{op: "get", remain: 4}})
	})
	t.Run("reset time", func(t *testing.T) {
		minute := limiter.Rate{Limit: 5, Period: time.Minute}
		got, err := s.Get(context.Background(), "reset-time", minute)
		if err != nil {
			t.Fatal(err)
		}
		// The window is the whole minute the request fell in.
		if got.Reset%60 != 0 || got.Reset <= time.Now().Unix()-1 || got.Reset > time.Now().Unix()+60 {
			t.Errorf("Reset %d, want the end of the current minute (now %d)", got.Reset, time.Now().Unix())
		}
	})
	t.Run("bad rate", func(t *testing.T) {
		if _, err := s.Get(context.Background(), "bad", limiter.Rate{Limit: -1, Period: time.Second}); err == nil {
			t.Error("a negative limit was accepted")
		}
		if _, err := s.Get(context.Background(), "bad", limiter.Rate{Limit: 1}); !errors.Is(err, sluice.ErrInvalidLimit) {
			t.Errorf("a zero period: %v, want an invalid limit", err)
		}
	})
}

// When the sidecar cannot be reached, the client's failure policy decides.
func TestStore_failurePolicy(t *testing.T) {
	sc := sluicedtest.Start(t)
	rate := limiter.Rate{Limit: 5, Period: time.Minute}
	open := ululestore.New(sc.Dial(t, sluice.WithFailurePolicy(sluice.FailOpen)))
	closed := ululestore.New(sc.Dial(t, sluice.WithFailurePolicy(sluice.FailClosed)))
	failing := ululestore.New(sc.Dial(t))
	sc.Stop(t)
	ctx := context.Background()
	if got, err := open.Get(ctx, "k", rate); err != nil || got.Reached || got.Remaining != 5 {
		t.Errorf("FailOpen: %+v, %v; want not reached, remaining 5", got, err)
	}
	if got, err := closed.Get(ctx, "k", rate); err != nil || !got.Reached || got.Remaining != 0 {
		t.Errorf("FailClosed: %+v, %v; want reached", got, err)
	}
	if _, err := failing.Get(ctx, "k", rate); !errors.Is(err, sluice.ErrUnavailable) {
		t.Errorf("FailError: %v, want unavailable", err)
	}
	if _, err := open.Reset(ctx, "k", rate); !errors.Is(err, sluice.ErrUnavailable) {
		t.Errorf("Reset under FailOpen: %v, want unavailable", err)
	}
}

// Several processes through ulule's middleware on one key admit exactly
// the limit between them.
func TestStore_processes(t *testing.T) {
	sluicedtest.ExactAcrossProcesses(t, sluicedtest.Start(t).Socket)
}

// worker is one process of TestStore_processes.
func worker(ctx context.Context, c *sluice.Client, window time.Duration) (int, error) {
	rate := limiter.Rate{Limit: sluicedtest.ProcLimit, Period: window}
	return sluicedtest.Requests(stdlib.NewMiddleware(limiter.New(ululestore.New(c), rate)).Handler)
}
