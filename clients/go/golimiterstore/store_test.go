package golimiterstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/httplimit"
	"github.com/sluicehq/sluice/clients/go/golimiterstore"
	"github.com/sluicehq/sluice/clients/go/internal/sluicedtest"
	"github.com/sluicehq/sluice/clients/go/sluice"
)

func TestMain(m *testing.M) { sluicedtest.Main(m, worker) }

// take is one Take and what it must return.
type take struct {
	tokens, remaining uint64
	ok                bool
}

func takes(t *testing.T, s limiter.Store, key string, want []take) {
	t.Helper()
	ctx := context.Background()
	for i, w := range want {
		tokens, remaining, reset, ok, err := s.Take(ctx, key)
		if err != nil {
			t.Fatalf("take %d: %v", i, err)
		}
		if tokens != w.tokens || remaining != w.remaining || ok != w.ok {
			t.Fatalf("take %d: %d %d %v, want %d %d %v", i, tokens, remaining, ok, w.tokens, w.remaining, w.ok)
		}
		if now := uint64(time.Now().UnixNano()); reset <= now {
			t.Fatalf("take %d: reset %d is not after now %d", i, reset, now)
		}
	}
}

func get(t *testing.T, s limiter.Store, key string, tokens, remaining uint64) {
	t.Helper()
	gt, gr, err := s.Get(context.Background(), key)
	if err != nil || gt != tokens || gr != remaining {
		t.Fatalf("Get(%s) = %d %d %v, want %d %d", key, gt, gr, err, tokens, remaining)
	}
}

func TestStore_semantics(t *testing.T) {
	c := sluicedtest.Start(t).Dial(t)
	ctx := context.Background()
	window := sluicedtest.QuietWindow()
	s, err := golimiterstore.New(c, &golimiterstore.Config{Tokens: 3, Interval: window})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("take and get", func(t *testing.T) {
		get(t, s, "a", 3, 3) // never taken from: full
		takes(t, s, "a", []take{{3, 2, true}, {3, 1, true}, {3, 0, true}, {3, 0, false}, {3, 0, false}})
		get(t, s, "a", 3, 0)
		get(t, s, "b", 3, 3) // keys are apart
	})
	t.Run("reset is the window's end", func(t *testing.T) {
		_, _, reset, _, err := s.Take(ctx, "a")
		end := (time.Now().UnixNano()/int64(window) + 1) * int64(window)
		if err != nil || int64(reset) < end || int64(reset) > end+int64(time.Minute) {
			t.Errorf("reset %d, %v; want about %d", reset, err, end)
		}
	})
	t.Run("set", func(t *testing.T) {
		takes(t, s, "set", []take{{3, 2, true}})
		if err := s.Set(ctx, "set", 5, window); err != nil {
			t.Fatal(err)
		}
		takes(t, s, "set", []take{{5, 4, true}, {5, 3, true}})
		if err := s.Set(ctx, "set", 5, window); err != nil { // fills the bucket again
			t.Fatal(err)
		}
		get(t, s, "set", 5, 5)
		if err := s.Set(ctx, "set", 0, window); !errors.Is(err, sluice.ErrInvalidLimit) {
			t.Errorf("Set of 0 tokens: %v, want an invalid limit", err)
		}
		get(t, s, "set", 5, 5) // the refused limit was not set
		get(t, s, "other", 3, 3)
	})
	t.Run("burst refunds up to the limit", func(t *testing.T) {
		takes(t, s, "burst", []take{{3, 2, true}, {3, 1, true}, {3, 0, true}, {3, 0, false}})
		if err := s.Burst(ctx, "burst", 2); err != nil {
			t.Fatal(err)
		}
		get(t, s, "burst", 3, 2)
		if err := s.Burst(ctx, "burst", 10); err != nil {
			t.Fatal(err)
		}
		get(t, s, "burst", 3, 3)
	})
	t.Run("any limit", func(t *testing.T) {
		g, err := golimiterstore.New(c, &golimiterstore.Config{Limit: sluice.GCRA(1, 1, time.Hour), Prefix: "gcra:"})
		if err != nil {
			t.Fatal(err)
		}
		takes(t, g, "a", []take{{2, 1, true}, {2, 0, true}, {2, 0, false}})
		get(t, s, "a", 3, 0) // the other store's key "a"
	})
	t.Run("defaults", func(t *testing.T) {
		d, err := golimiterstore.New(c, nil) // 1 per second
		if err != nil {
			t.Fatal(err)
		}
		get(t, d, "d", 1, 1)
	})
	t.Run("close", func(t *testing.T) {
		closed, err := golimiterstore.New(c, &golimiterstore.Config{Tokens: 3, Interval: window})
		if err != nil {
			t.Fatal(err)
		}
		if err := closed.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if _, _, _, ok, err := closed.Take(ctx, "a"); ok || !errors.Is(err, limiter.ErrStopped) {
			t.Errorf("Take after Close: %v %v, want ErrStopped", ok, err)
		}
		if _, _, err := closed.Get(ctx, "a"); !errors.Is(err, limiter.ErrStopped) {
			t.Errorf("Get after Close: %v, want ErrStopped", err)
		}
		get(t, s, "b", 3, 3) // the client is still open
	})
}

// When the sidecar cannot be reached, the client's failure policy decides.
func TestStore_failurePolicy(t *testing.T) {
	sc := sluicedtest.Start(t)
	cfg := &golimiterstore.Config{Tokens: 5, Interval: time.Minute}
	store := func(p sluice.FailurePolicy) *golimiterstore.Store {
		s, err := golimiterstore.New(sc.Dial(t, sluice.WithFailurePolicy(p)), cfg)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	open, closed, failing := store(sluice.FailOpen), store(sluice.FailClosed), store(sluice.FailError)
	sc.Stop(t)
	ctx := context.Background()
	if tokens, remaining, _, ok, err := open.Take(ctx, "k"); err != nil || !ok || tokens != 5 || remaining != 5 {
		t.Errorf("FailOpen: %d %d %v %v; want 5 5 true", tokens, remaining, ok, err)
	}
	if tokens, remaining, reset, ok, err := closed.Take(ctx, "k"); err != nil || ok || tokens != 5 || remaining != 0 || reset == 0 {
		t.Errorf("FailClosed: %d %d %d %v %v; want 5 0 refused", tokens, remaining, reset, ok, err)
	}
	if _, _, _, _, err := failing.Take(ctx, "k"); !errors.Is(err, sluice.ErrUnavailable) {
		t.Errorf("FailError: %v, want unavailable", err)
	}
	if err := open.Burst(ctx, "k", 1); !errors.Is(err, sluice.ErrUnavailable) {
		t.Errorf("Burst under FailOpen: %v, want unavailable", err)
	}
	// Set keeps the limit, and says the bucket was not filled.
	if err := open.Set(ctx, "k", 9, time.Minute); !errors.Is(err, sluice.ErrUnavailable) {
		t.Errorf("Set: %v, want unavailable", err)
	}
	if tokens, _, _, _, _ := open.Take(ctx, "k"); tokens != 9 {
		t.Errorf("after Set: tokens %d, want 9", tokens)
	}
}

// Several processes through go-limiter's middleware on one key admit
// exactly the limit between them.
func TestStore_processes(t *testing.T) {
	sluicedtest.ExactAcrossProcesses(t, sluicedtest.Start(t).Socket)
}

// worker is one process of TestStore_processes.
func worker(ctx context.Context, c *sluice.Client, window time.Duration) (int, error) {
	s, err := golimiterstore.New(c, &golimiterstore.Config{Tokens: sluicedtest.ProcLimit, Interval: window})
	if err != nil {
		return 0, err
	}
	mw, err := httplimit.NewMiddleware(s, httplimit.IPKeyFunc())
	if err != nil {
		return 0, err
	}
	return sluicedtest.Requests(mw.Handle)
}
