package global

import (
	"context"
	"log/slog"
	"reflect"
	"strings"
	"sync"
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
	var logs strings.Builder
	var logMu sync.Mutex
	s := newStore(t, Options{Addrs: []string{srv.Addr}, Timeout: timeout, Logger: slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, nil))})
	warm(t, s) // a first call that loads the library may take longer than 50 ms on a loaded host
	f := NewFallback(s, nil)
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
	if d, _, _ := f.Decide(ctx, req, Policy{OnUnavailable: Closed}); d.Allowed || d.RetryAfter < int64(time.Millisecond) || d.RetryAfter > int64(DefaultProbeMax) {
		t.Errorf("closed policy: %+v, want a denial with the time to the next probe", d)
	}
	// Only the first request (and probes) waited for Redis: had each waited,
	// the 42 would take 42 timeouts; the margin is for a busy machine.
	if took := time.Since(start); took > 40*timeout {
		t.Errorf("42 requests with Redis down took %v", took)
	}
	srv.Restart(t)
	unanswered := f.Stats().Unanswered
	deadline := time.Now().Add(5 * time.Second)
	for {
		d, src, err := f.Decide(ctx, req, local)
		if err != nil {
			t.Fatal(err)
		}
		if src == FromRedis {
			// A restarted Redis holds nothing: 99 left, less what requests
			// it ran but did not answer in time took (a loaded host).
			if late := int64(f.Stats().Unanswered - unanswered); !d.Allowed || d.Remaining > 99 || d.Remaining < 99-late {
				t.Fatalf("back in Redis: %+v, %d requests unanswered since the restart", d, late)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("decisions did not return to Redis within 5 s of its restart")
		}
		time.Sleep(10 * time.Millisecond)
	}
	st := f.Stats()
	if st.Down != 0 || st.ToFallback != 1 || st.ToGlobal != 1 || st.Open != 1 || st.Closed != 1 || st.Local < 40 || st.Probes == 0 || st.Unanswered < 1 {
		t.Errorf("stats %+v", st)
	}
	logMu.Lock()
	out := logs.String()
	logMu.Unlock()
	// The restart came during a probe interval of at most ProbeMax.
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

// Ensure that one call Redis does not answer in time is decided by its
// policy on its own, and does not send the shard to fallback: the next
// requests go to Redis as soon as it answers again.
func TestFallback_slowCall(t *testing.T) {
	srv := redistest.Start(t)
	// A timeout a loaded host's healthy Redis does not miss, and a stall
	// well past it.
	s := newStore(t, Options{Addrs: []string{srv.Addr}, Timeout: patientTimeout})
	f := NewFallback(s, nil)
	req := Request{Limit: tokenBucket(10, hour), Key: "k", Cost: 1}
	closed := Policy{OnUnavailable: Closed}
	warm(t, s)
	if _, src, err := f.Decide(context.Background(), req, closed); err != nil || src != FromRedis {
		t.Fatalf("before the stall: %v %v", src, err)
	}
	over := srv.Stall(t, 5*patientTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), 2*patientTimeout)
	d, src, err := f.Decide(ctx, req, closed)
	cancel()
	if err != nil || src != FromPolicy || d.Allowed || d.RetryAfter <= 0 {
		t.Fatalf("during the stall: %+v %v %v, want a denial by the closed policy with a retry_after", d, src, err)
	}
	<-over
	d, src, err = f.Decide(context.Background(), req, closed)
	if err != nil || src != FromRedis {
		t.Fatalf("after the stall: %+v %v %v, want a decision of Redis", d, src, err)
	}
	if st := f.Stats(); st.ToFallback != 0 || st.Unanswered != 1 || st.Closed != 1 {
		t.Errorf("stats %+v: want no transition, one request decided by the policy", st)
	}
	if st := s.Stats(); st.Misses != 1 {
		t.Errorf("store stats %+v: want one pipeline missed", st)
	}
}

// patientTimeout is the outage tests' Redis timeout: one that a healthy
// Redis on a loaded host does not miss, so that only the outages a test
// makes count.
const patientTimeout = 200 * time.Millisecond

// outage pauses srv (SIGSTOP) and sends req through f until its shard is
// down and n more requests were refused at once, then resumes it and
// sends req until Redis decides again. It returns the requests the policy
// admitted and how long after the resume Redis decided again.
func outage(t *testing.T, srv *redistest.Server, f *Fallback, req Request, p Policy, n int) (admitted int, back time.Duration) {
	t.Helper()
	srv.Pause()
	down := f.Stats().ToFallback
	shed := f.store.Stats().Shed
	for f.store.Stats().Shed < shed+uint64(n) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		d, src, err := f.Decide(ctx, req, p)
		cancel()
		if err != nil || src != FromPolicy {
			t.Fatalf("Redis paused: %+v %v %v, want the policy's decision", d, src, err)
		}
		if d.Allowed {
			admitted++
		}
	}
	if got := f.Stats().ToFallback; got != down+1 {
		t.Fatalf("%d transitions to fallback, want one", got-down)
	}
	srv.Resume()
	start := time.Now()
	for {
		d, src, err := f.Decide(context.Background(), req, p)
		if err != nil {
			t.Fatal(err)
		}
		if src == FromRedis {
			return admitted, time.Since(start)
		}
		if d.Allowed {
			admitted++
		}
		time.Sleep(time.Millisecond)
	}
}

// Ensure that Redis that answers nothing (SIGSTOP) sends its shard to
// fallback after a few pipelines without a reply, that requests are then
// decided at once, and that decisions go back to Redis within about the
// longest probe interval of its answering again.
func TestFallback_pause(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addrs: []string{srv.Addr}, Timeout: patientTimeout})
	f := NewFallback(s, nil)
	req := Request{Limit: tokenBucket(10, hour), Key: "k", Cost: 1}
	closed := Policy{OnUnavailable: Closed}
	f.Decide(context.Background(), req, closed)
	_, back := outage(t, srv, f, req, closed, 20)
	st := s.Stats()
	t.Logf("back in Redis %v after SIGCONT; store stats %+v", back, st)
	if st.Misses < DefaultMisses || st.Misses > DefaultMisses+2 {
		t.Errorf("%d pipelines missed, want %d (and perhaps a probe or two)", st.Misses, DefaultMisses)
	}
	// The promise is about 100 ms; the bound leaves room for a loaded host.
	if back > DefaultProbeMax+400*time.Millisecond {
		t.Errorf("back in Redis %v after it answered again, want about %v", back, DefaultProbeMax)
	}
}

// Ensure that the local policy's share holds per period however often
// Redis flaps: a token bucket of 10 per hour spent in Redis, four outages,
// and the host admits its share in all, not in each.
func TestFallback_flaps(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addrs: []string{srv.Addr}, Timeout: patientTimeout})
	f := NewFallback(s, nil)
	req := Request{Limit: tokenBucket(10, hour), Key: "k", Cost: 1}
	local := Policy{OnUnavailable: Local, FallbackShare: 0.5}
	warm(t, s)
	for i := range 10 {
		if d, src, err := f.Decide(context.Background(), req, local); err != nil || src != FromRedis || !d.Allowed {
			t.Fatalf("request %d in Redis: %+v %v %v", i, d, src, err)
		}
	}
	total := 0
	for i := range 4 {
		n, back := outage(t, srv, f, req, local, 10)
		t.Logf("outage %d: %d admitted by the policy, back in Redis after %v", i+1, n, back)
		total += n
	}
	if total != 5 {
		t.Errorf("four outages admitted %d, want the share, 5, in all", total)
	}
}

// Ensure a probe keeps what makes it a probe template again: a probe whose
// pipeline fails just as its shard came back sends the shard down with that
// probe as the next outage's template, which peek must accept (it indexed
// an empty argument list and crashed the sidecar).
func TestProbe_templateOfProbe(t *testing.T) {
	l := bucket.Limit{Algorithm: bucket.TokenBucket, Max: 10, RefillTime: int64(time.Second), RefillAmount: 1}
	p := prepare(&l, 0)
	if p.err != nil {
		t.Fatal(p.err)
	}
	r := Request{Limit: l, Key: "k", Cost: 3}
	key, args := r.args("sluice:", p, 0)
	c := &call{alg: p.g, key: [1]string{key}, args: args, base: len(args)}
	first := peek(c)
	again := peek(first.probeCall())
	if !reflect.DeepEqual(again.args, first.args) || again.base != first.base {
		t.Fatalf("the probe of a probe is %v (base %d), want %v (base %d)", again.args, again.base, first.args, first.base)
	}
	if again.args[1] != int64(0) {
		t.Fatalf("a probe's cost is %v, want 0", again.args[1])
	}
}

// warm makes s connect and load its library with a request on a key of its
// own, tried until Redis decides it: a loaded host can make the first
// round trip, which loads the library, miss the tests' short timeout.
func warm(t *testing.T, s *Store) {
	t.Helper()
	for range 100 {
		if _, err := s.Decide(context.Background(), Request{Limit: tokenBucket(10, hour), Key: "warm-up"}); err == nil {
			return
		}
	}
	t.Fatal("Redis decided none of 100 requests")
}
