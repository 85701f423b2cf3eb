package global

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/redistest"
)

// Ensure that while Redis is down each policy decides at once (open admits,
// closed denies, local admits its share), that the transitions are logged
// and counted, and that decisions return to Redis when it is back.
func TestFallback(t *testing.T) {
	srv := redistest.Start(t)
	const timeout = 50 * time.Millisecond
	s := newStore(t, Options{Addrs: []string{srv.Addr}, Timeout: timeout})
	var logs bytes.Buffer
	f := NewFallback(s, slog.New(slog.NewTextHandler(&logs, nil)), 100*time.Millisecond)
	ctx := context.Background()
	l := tokenBucket(100, hour)
	req := Request{Limit: l, Key: "k", Cost: 1}
	local := Policy{OnUnavailable: Local, FallbackShare: 0.25}
	if d, src, err := f.Decide(ctx, req, local); err != nil || src != FromRedis || !d.Allowed || d.Remaining != 99 {
		t.Fatalf("Redis up: %+v %v %v", d, src, err)
	}
	srv.Kill()
	start := time.Now()
	admitted := 0
	for i := range 40 {
		d, src, err := f.Decide(ctx, req, local)
		if err != nil || src != FromPolicy {
			t.Fatalf("request %d with Redis down: %+v %v %v", i, d, src, err)
		}
		if d.Allowed {
			admitted++
		}
	}
	if admitted != 25 {
		t.Errorf("local policy with a share of 0.25 of 100: admitted %d, want 25", admitted)
	}
	if d, _, _ := f.Decide(ctx, req, Policy{OnUnavailable: Open}); !d.Allowed {
		t.Errorf("open policy denied: %+v", d)
	}
	if d, _, _ := f.Decide(ctx, req, Policy{OnUnavailable: Closed}); d.Allowed {
		t.Errorf("closed policy admitted: %+v", d)
	}
	// Only the first request (and probes) waited for Redis: had each waited,
	// the 42 would take 42 timeouts; the margin is for a busy machine.
	if took := time.Since(start); took > 40*timeout {
		t.Errorf("42 requests with Redis down took %v", took)
	}
	srv.Restart(t)
	deadline := time.Now().Add(5 * time.Second)
	for {
		d, src, err := f.Decide(ctx, req, local)
		if err != nil {
			t.Fatal(err)
		}
		if src == FromRedis {
			if !d.Allowed || d.Remaining != 99 { // a restarted Redis holds nothing
				t.Fatalf("back in Redis: %+v", d)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("decisions did not return to Redis within 5 s of its restart")
		}
		time.Sleep(10 * time.Millisecond)
	}
	st := f.Stats()
	if st.Down != 0 || st.ToFallback != 1 || st.ToGlobal != 1 || st.Open != 1 || st.Closed != 1 || st.Local < 40 || st.Probes == 0 {
		t.Errorf("stats %+v", st)
	}
	out := logs.String()
	if !strings.Contains(out, "level=WARN msg=\"Redis is unavailable") || !strings.Contains(out, "level=INFO msg=\"Redis is available again") {
		t.Errorf("logs:\n%s", out)
	}
	t.Logf("logs:\n%s", out)
}

// Ensure that a share scales capacity and rate down, never up.
func TestShare(t *testing.T) {
	for _, c := range []struct{ in, want bucket.Limit }{
		{tokenBucket(100, 1e9), bucket.Limit{Algorithm: bucket.TokenBucket, Max: 25, RefillTime: 1e9, RefillAmount: 25}},
		{bucket.Limit{Algorithm: bucket.TokenBucket, Max: 10, RefillTime: 1e9, RefillAmount: 1},
			bucket.Limit{Algorithm: bucket.TokenBucket, Max: 2, RefillTime: 4e9, RefillAmount: 1}},
		{bucket.Limit{Algorithm: bucket.GCRA, Burst: 9, Count: 10, Period: 1e9},
			bucket.Limit{Algorithm: bucket.GCRA, Burst: 1, Count: 10, Period: 4e9}},
		{bucket.Limit{Algorithm: bucket.SlidingWindow, Max: 3, Window: 1e9},
			bucket.Limit{Algorithm: bucket.SlidingWindow, Max: 1, Window: 1e9}},
	} {
		if got := Share(c.in, 0.25); got != c.want {
			t.Errorf("Share(%+v, 0.25) = %+v, want %+v", c.in, got, c.want)
		}
	}
	if _, err := ParseOnUnavailable("sometimes"); err == nil {
		t.Error("ParseOnUnavailable accepted a bad name")
	}
}
