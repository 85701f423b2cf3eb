package sluice_test

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clients/go/sluice"
	limits "github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/server"
)

// serve sends one request through h and returns the response.
func serve(h http.Handler, path string) *http.Response {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	return rec.Result()
}

// byPath limits each path, except /free.
func byPath(r *http.Request) (string, bool) { return "path:" + r.URL.Path, r.URL.Path != "/free" }

var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })

// headers checks the status and the rate-limit fields of a response ("" for
// a field that must be absent).
func headers(t *testing.T, what string, res *http.Response, status int, retryAfter, policy, ratelimit string) {
	t.Helper()
	h := res.Header
	if res.StatusCode != status || h.Get("Retry-After") != retryAfter ||
		h.Get("RateLimit-Policy") != policy || h.Get("RateLimit") != ratelimit {
		t.Errorf("%s: %d Retry-After %q RateLimit-Policy %q RateLimit %q\nwant %d %q %q %q", what, res.StatusCode,
			h.Get("Retry-After"), h.Get("RateLimit-Policy"), h.Get("RateLimit"), status, retryAfter, policy, ratelimit)
	}
}

func TestMiddleware(t *testing.T) {
	sc := startSidecar(t)
	c := dial(t, sc.cfg.SocketPath)
	// t0 is 20 s into a minute: the window resets in 40 s.
	h := sluice.Middleware(c, sluice.FixedWindow(2, time.Minute), byPath)(ok)
	headers(t, "first", serve(h, "/a"), 200, "", `"default";q=2;w=60`, `"default";r=1;t=40`)
	headers(t, "second", serve(h, "/a"), 200, "", `"default";q=2;w=60`, `"default";r=0;t=40`)
	res := serve(h, "/a")
	headers(t, "third", res, 429, "40", `"default";q=2;w=60`, `"default";r=0;t=40`)
	headers(t, "other key", serve(h, "/b"), 200, "", `"default";q=2;w=60`, `"default";r=1;t=40`)
	for range 3 {
		headers(t, "not limited", serve(h, "/free"), 200, "", "", "")
	}

	// A token bucket: a denial's window ends when the next token comes.
	h = sluice.Middleware(c, sluice.TokenBucket(2, 1500*time.Millisecond, 1), byPath,
		sluice.WithPolicyName(`per "path"`), sluice.WithCost(func(*http.Request) int64 { return 2 }),
		sluice.WithDeniedHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusTeapot)
		})))(ok)
	headers(t, "cost 2", serve(h, "/tb"), 200, "", `"per \"path\"";q=2;w=3`, `"per \"path\"";r=0;t=3`)
	headers(t, "cost 2 again", serve(h, "/tb"), 418, "3", `"per \"path\"";q=2;w=3`, `"per \"path\"";r=0;t=3`)

	// The pacer: an allowed request waits its delay.
	h = sluice.Middleware(c, sluice.Pacer(20, time.Second, time.Second), byPath)(ok)
	start := time.Now()
	for range 3 {
		if res := serve(h, "/paced"); res.StatusCode != 200 {
			t.Errorf("paced: %d", res.StatusCode)
		}
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("3 requests paced at 20/s took %v, want at least 100ms", d)
	}

	// Errors from the sidecar go to the error handler.
	h = sluice.Middleware(c, sluice.TokenBucket(0, time.Second, 1), byPath)(ok)
	if res := serve(h, "/bad"); res.StatusCode != 500 {
		t.Errorf("invalid limit: %d, want 500", res.StatusCode)
	}
}

func TestMiddleware_unavailable(t *testing.T) {
	path := filepath.Join(shortDir(t), "absent.sock")
	l := sluice.FixedWindow(2, time.Minute)
	for _, tc := range []struct {
		policy     sluice.FailurePolicy
		status     int
		retryAfter string
	}{
		{sluice.FailOpen, 200, ""},
		{sluice.FailClosed, 429, "1"}, // the backoff, rounded up
	} {
		c := dial(t, path, sluice.WithFailurePolicy(tc.policy))
		h := sluice.Middleware(c, l, byPath)(ok)
		headers(t, tc.policy.String(), serve(h, "/a"), tc.status, tc.retryAfter, "", "")
	}
	// A closed client is not an outage: 500.
	c := dial(t, fakeSidecar(t, func(fc *fakeConn) {}))
	c.Close()
	h := sluice.Middleware(c, l, byPath)(ok)
	if res := serve(h, "/a"); res.StatusCode != 500 {
		t.Errorf("closed client: %d, want 500", res.StatusCode)
	}
	// FailError: the error handler, 503 by default. This sidecar hangs up
	// at once.
	var got error
	c = dial(t, fakeSidecar(t, func(fc *fakeConn) {}), sluice.WithBackoff(time.Hour, time.Hour), sluice.WithFailurePolicy(sluice.FailError))
	h = sluice.Middleware(c, l, byPath, sluice.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
		got = err
		w.WriteHeader(599)
	}))(ok)
	if res := serve(h, "/a"); res.StatusCode != 599 || got == nil {
		t.Errorf("custom error handler: %d %v", res.StatusCode, got)
	}
	h = sluice.Middleware(c, l, byPath)(ok)
	if res := serve(h, "/a"); res.StatusCode != 503 {
		t.Errorf("sidecar gone: %d, want 503", res.StatusCode)
	}
}

func TestRateLimitFields(t *testing.T) {
	allowed := func(rem, lim int64, reset time.Duration) sluice.Decision {
		return sluice.Decision{Allowed: true, Remaining: rem, Limit: lim, RetryAfter: -1, ResetAfter: reset}
	}
	denied := func(rem, lim int64, retry, reset time.Duration) sluice.Decision {
		return sluice.Decision{Remaining: rem, Limit: lim, RetryAfter: retry, ResetAfter: reset}
	}
	for _, tc := range []struct {
		name              string
		l                 sluice.Limit
		d                 sluice.Decision
		policy, ratelimit string
		retryAfter        int64
	}{
		{"token bucket", sluice.TokenBucket(10, time.Hour, 1), allowed(9, 10, time.Hour),
			`"n";q=10;w=36000`, `"n";r=9;t=3600`, 0},
		{"token bucket, refill 3 of 10", sluice.TokenBucket(10, time.Minute, 3), denied(0, 10, 59*time.Second+1, 4*time.Minute),
			`"n";q=10;w=240`, `"n";r=0;t=60`, 60},
		{"token bucket, never", sluice.TokenBucket(10, time.Minute, 10), denied(10, 10, -1, 0),
			`"n";q=10;w=60`, `"n";r=10;t=0`, 0},
		{"gcra", sluice.GCRA(4, 1, time.Second), allowed(4, 5, time.Second),
			`"n";q=5;w=5`, `"n";r=4;t=1`, 0},
		{"gcra sub-second", sluice.GCRA(0, 10, time.Second), denied(0, 1, 50*time.Millisecond, 100*time.Millisecond),
			`"n";q=1;w=1`, `"n";r=0;t=1`, 1},
		{"fixed window", sluice.FixedWindow(100, time.Minute), allowed(99, 100, 1500*time.Millisecond),
			`"n";q=100;w=60`, `"n";r=99;t=2`, 0},
		{"sliding window", sluice.SlidingWindow(100, 24*time.Hour), denied(0, 100, 90*time.Minute, 47*time.Hour),
			`"n";q=100;w=86400`, `"n";r=0;t=5400`, 5400},
		{"pacer", sluice.Pacer(4, time.Second, 2*time.Second), allowed(8, 9, 250*time.Millisecond),
			`"n";q=9;w=3`, `"n";r=8;t=1`, 0},
		{"no window", sluice.Limit{Algorithm: 2}, allowed(1, 1, 0),
			`"n";q=1`, `"n";r=1;t=0`, 0},
		{"huge", sluice.TokenBucket(1<<62, 1<<62, 1), allowed(1, 1<<62, 1<<62),
			`"n";q=4611686018427387904`, `"n";r=1;t=4611686019`, 0},
	} {
		policy, ratelimit := sluice.RateLimitFields("n", tc.l, tc.d)
		if policy != tc.policy || ratelimit != tc.ratelimit || sluice.RetryAfterSeconds(tc.d) != tc.retryAfter {
			t.Errorf("%s: %q %q %d, want %q %q %d", tc.name, policy, ratelimit, sluice.RetryAfterSeconds(tc.d),
				tc.policy, tc.ratelimit, tc.retryAfter)
		}
	}
	// Names are Structured Fields strings.
	if p, _ := sluice.RateLimitFields("a\"b\\c\té", sluice.FixedWindow(1, time.Second), allowed(0, 1, 0)); p != `"a\"b\\c???";q=1;w=1` {
		t.Errorf("escaped name: %s", p)
	}
	// A degraded decision reports no quota.
	h := http.Header{}
	sluice.SetRateLimitHeaders(h, "n", sluice.FixedWindow(1, time.Second), sluice.Decision{RetryAfter: 1500 * time.Millisecond, ResetAfter: -1, Degraded: true})
	if len(h) != 1 || h.Get("Retry-After") != "2" {
		t.Errorf("degraded denial: %v", h)
	}
}

// Shadow mode: a request the limit would deny goes through, marked; with a
// shadow ban it is answered without the handler.
func TestMiddleware_shadow(t *testing.T) {
	sc := startSidecar(t)
	c := dial(t, sc.cfg.SocketPath)
	var served int
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served++ })
	limit := sluice.GCRA(0, 1, time.Hour) // one request an hour
	h := sluice.Middleware(c, limit, byPath, sluice.WithShadow())(handler)
	for i := range 3 {
		if res := serve(h, "/s"); res.StatusCode != 200 {
			t.Fatalf("shadow request %d: %d", i, res.StatusCode)
		}
	}
	if served != 3 {
		t.Errorf("handler served %d of 3 shadow requests", served)
	}
	ban := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusAccepted) })
	h = sluice.Middleware(c, limit, byPath, sluice.WithShadow(), sluice.WithShadowBan(ban))(handler)
	served = 0
	if res := serve(h, "/banned"); res.StatusCode != 200 || served != 1 {
		t.Fatalf("first request: %d, served %d", res.StatusCode, served)
	}
	if res := serve(h, "/banned"); res.StatusCode != http.StatusAccepted || served != 1 {
		t.Errorf("shadow-banned request: %d, served %d; want 202 from the ban handler, not the handler", res.StatusCode, served)
	}
	d, err := c.Acquire(ctx(t), limit, "path:/s", 1, sluice.Shadow())
	if err != nil || !d.Allowed || !d.ShadowDenied {
		t.Errorf("Acquire with Shadow on a spent bucket: %+v, %v; want allowed and shadow-denied", d, err)
	}
	if d, err := c.Acquire(ctx(t), limit, "path:/s", 1); err != nil || d.Allowed || d.ShadowDenied {
		t.Errorf("the same without Shadow: %+v, %v; want denied", d, err)
	}
}

// Under a concurrency limit a request holds a slot while its handler runs,
// and gives it back when the handler returns, or panics.
func TestMiddleware_lease(t *testing.T) {
	set, err := limits.Parse("limits.yaml", []byte("limits:\n  jobs:\n    limit: \"concurrency:limit=1,lease=1m\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	sc := startSidecar(t, func(c *server.Config) { c.Limits = limits.NewHolder(set) })
	c := dial(t, sc.cfg.SocketPath)
	l := sluice.Concurrency(1, time.Minute)
	entered, leave := make(chan struct{}), make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("panic") != "" {
			panic(http.ErrAbortHandler)
		}
		if r.URL.Query().Get("wait") != "" {
			entered <- struct{}{}
			<-leave
		}
		w.Write([]byte("ok"))
	})
	h := sluice.Middleware(c, l, byPath)(slow)
	done := make(chan *http.Response)
	go func() { done <- serve(h, "/j?wait=1") }()
	<-entered
	// The slot is held while the first request runs: 429, until the held
	// lease expires at the latest.
	headers(t, "while one runs", serve(h, "/j"), 429, "60", `"default";q=1`, `"default";r=0;t=60`)
	headers(t, "another key", serve(h, "/k"), 200, "", `"default";q=1`, `"default";r=0;t=60`)
	close(leave)
	headers(t, "the one that ran", <-done, 200, "", `"default";q=1`, `"default";r=0;t=60`)
	headers(t, "after it returned", serve(h, "/j"), 200, "", `"default";q=1`, `"default";r=0;t=60`)
	// A handler that panics gives its slot back too.
	func() {
		defer func() {
			if p := recover(); p != http.ErrAbortHandler {
				t.Errorf("panic %v", p)
			}
		}()
		serve(h, "/j?panic=1")
	}()
	if n := leases(t, c, l, "path:/j"); n != 0 {
		t.Errorf("%d leases held after the handlers returned, want 0", n)
	}

	// A named concurrency limit takes WithLease: without it the request
	// acquires, which the sidecar refuses.
	named, _ := sluice.ParseLimit("jobs")
	leave = make(chan struct{})
	h = sluice.Middleware(c, named, byPath, sluice.WithLease())(slow)
	go func() { done <- serve(h, "/n?wait=1") }()
	<-entered
	headers(t, "named, while one runs", serve(h, "/n"), 429, "60", `"default";q=1`, `"default";r=0;t=60`)
	close(leave)
	headers(t, "named, the one that ran", <-done, 200, "", `"default";q=1`, `"default";r=0;t=60`)
	if res := serve(sluice.Middleware(c, named, byPath)(slow), "/n"); res.StatusCode != 500 {
		t.Errorf("named concurrency limit without WithLease: %d, want 500 (invalid limit)", res.StatusCode)
	}

	// Shadowed: a request that finds every slot held is served, without a
	// slot, and marked as the acquires are.
	var served atomic.Int64
	count := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served.Add(1); slow.ServeHTTP(w, r) })
	leave = make(chan struct{})
	h = sluice.Middleware(c, l, byPath, sluice.WithShadow())(count)
	go func() { done <- serve(h, "/s?wait=1") }()
	<-entered
	headers(t, "shadow-denied", serve(h, "/s"), 200, "", `"default";q=1`, `"default";r=0;t=60`)
	close(leave)
	<-done
	if served.Load() != 2 {
		t.Errorf("%d of 2 shadow requests served", served.Load())
	}
}

// Without a sidecar the failure policy decides, as for acquires.
func TestMiddleware_leaseUnavailable(t *testing.T) {
	path := filepath.Join(shortDir(t), "absent.sock")
	for _, tc := range []struct {
		policy     sluice.FailurePolicy
		status     int
		retryAfter string
	}{
		{sluice.FailOpen, 200, ""},
		{sluice.FailClosed, 429, "1"}, // the backoff, rounded up
	} {
		c := dial(t, path, sluice.WithFailurePolicy(tc.policy))
		h := sluice.Middleware(c, sluice.Concurrency(1, time.Minute), byPath)(ok)
		headers(t, tc.policy.String(), serve(h, "/a"), tc.status, tc.retryAfter, "", "")
	}
	c := dial(t, fakeSidecar(t, func(fc *fakeConn) {}), sluice.WithBackoff(time.Hour, time.Hour), sluice.WithFailurePolicy(sluice.FailError))
	h := sluice.Middleware(c, sluice.Concurrency(1, time.Minute), byPath)(ok)
	if res := serve(h, "/a"); res.StatusCode != 503 {
		t.Errorf("sidecar gone: %d, want 503", res.StatusCode)
	}
}
