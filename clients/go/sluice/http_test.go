package sluice_test

import (
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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

// headerVector is one of the shared header vectors: a limit and a
// decision, and the fields both clients set for them.
type headerVector struct {
	Name     string            `json:"name"`
	Limit    string            `json:"limit"`
	Policy   string            `json:"policy"`
	Decision vectorDecision    `json:"decision"`
	Headers  map[string]string `json:"headers"`
}

// vectorDecision is a decision of the shared header vectors.
type vectorDecision struct {
	Allowed      bool  `json:"allowed"`
	Remaining    int64 `json:"remaining"`
	Limit        int64 `json:"limit"`
	RetryAfterNs int64 `json:"retry_after_ns"`
	ResetAfterNs int64 `json:"reset_after_ns"`
	DelayNs      int64 `json:"delay_ns"`
	Degraded     bool  `json:"degraded"`
	ShadowDenied bool  `json:"shadow_denied"`
	// A named list's: each limit's decision, and the one that binds.
	Limits []vectorDecision `json:"limits"`
	Bound  int              `json:"bound"`
}

func (w vectorDecision) decision() sluice.Decision {
	d := sluice.Decision{Allowed: w.Allowed, Remaining: w.Remaining, Limit: w.Limit,
		RetryAfter: time.Duration(w.RetryAfterNs), ResetAfter: time.Duration(w.ResetAfterNs),
		Delay: time.Duration(w.DelayNs), Degraded: w.Degraded, ShadowDenied: w.ShadowDenied, Bound: w.Bound}
	for _, l := range w.Limits {
		d.Limits = append(d.Limits, l.decision())
	}
	return d
}

// severalVector is one of the shared vectors of a request decided under
// several policies.
type severalVector struct {
	Name     string `json:"name"`
	Policies []struct {
		Limit    string         `json:"limit"`
		Policy   string         `json:"policy"`
		Decision vectorDecision `json:"decision"`
	} `json:"policies"`
	Headers map[string]string `json:"headers"`
}

// headerFile reads the shared header vectors.
func headerFile(t *testing.T) (vs []headerVector, several []severalVector) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "ratelimit-headers.json"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Vectors []headerVector  `json:"vectors"`
		Several []severalVector `json:"several"`
	}
	if err := json.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	return file.Vectors, file.Several
}

// headersOf returns the fields of h, one value each.
func headersOf(h http.Header) map[string]string {
	got := map[string]string{}
	for k := range h {
		got[k] = h.Get(k)
	}
	return got
}

// canonical returns the vector's fields by their canonical names.
func canonical(fields map[string]string) map[string]string {
	want := map[string]string{}
	for k, val := range fields {
		want[http.CanonicalHeaderKey(k)] = val
	}
	return want
}

// The header fields of a decision are the ones the shared vectors say,
// which the Python client's tests check too: both clients set the same
// fields for the same limit and decision.
func TestRateLimitFields_vectors(t *testing.T) {
	vectors, _ := headerFile(t)
	if len(vectors) < 20 {
		t.Fatalf("%d vectors, want at least 20", len(vectors))
	}
	for _, v := range vectors {
		l, err := sluice.ParseLimit(v.Limit)
		if err != nil {
			t.Errorf("%s: %v", v.Name, err)
			continue
		}
		d := v.Decision.decision()
		h := http.Header{}
		sluice.SetRateLimitHeaders(h, v.Policy, l, d)
		if got, want := headersOf(h), canonical(v.Headers); !maps.Equal(got, want) {
			t.Errorf("%s: %v\nwant %v", v.Name, got, want)
		}
		if !d.Degraded {
			policy, ratelimit := sluice.RateLimitFields(v.Policy, l, d)
			if policy != v.Headers["RateLimit-Policy"] || ratelimit != v.Headers["RateLimit"] {
				t.Errorf("%s: RateLimitFields %q %q", v.Name, policy, ratelimit)
			}
		}
	}
}

// A decision of a named list: the fields list every limit of it, as for
// several policies, as the shared vectors say.
func TestRateLimitFields_listVectors(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "ratelimit-headers.json"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Lists []headerVector `json:"lists"`
	}
	if err := json.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Lists) < 4 {
		t.Fatalf("%d vectors of lists, want at least 4", len(file.Lists))
	}
	for _, v := range file.Lists {
		l, err := sluice.ParseLimit(v.Limit)
		if err != nil {
			t.Fatalf("%s: %v", v.Name, err)
		}
		d := v.Decision.decision()
		h := http.Header{}
		sluice.SetRateLimitHeaders(h, v.Policy, l, d)
		if got, want := headersOf(h), canonical(v.Headers); !maps.Equal(got, want) {
			t.Errorf("%s: %v\nwant %v", v.Name, got, want)
		}
		policy, ratelimit := sluice.RateLimitFields(v.Policy, l, d)
		if policy != v.Headers["RateLimit-Policy"] || ratelimit != v.Headers["RateLimit"] {
			t.Errorf("%s: RateLimitFields %q %q", v.Name, policy, ratelimit)
		}
		// Beside another policy, the list's limits are listed in its place.
		other := sluice.Policy{Name: "other", Limit: sluice.TokenBucket(1000, time.Hour, 1000),
			Decision: sluice.Decision{Allowed: true, Remaining: 999, Limit: 1000, RetryAfter: -1, ResetAfter: time.Second}}
		policy, _ = sluice.RateLimitFieldsOf([]sluice.Policy{other, {Name: v.Policy, Limit: l, Decision: d}})
		if want := `"other";q=1000;w=3600, ` + v.Headers["RateLimit-Policy"]; policy != want {
			t.Errorf("%s: beside another policy %q, want %q", v.Name, policy, want)
		}
	}
}

// A request decided under several policies: RateLimit-Policy lists each,
// RateLimit names the closest to its limit, as the shared vectors say.
func TestRateLimitFieldsOf_vectors(t *testing.T) {
	_, several := headerFile(t)
	if len(several) < 5 {
		t.Fatalf("%d vectors of several policies, want at least 5", len(several))
	}
	for _, v := range several {
		var ps []sluice.Policy
		for _, p := range v.Policies {
			l, err := sluice.ParseLimit(p.Limit)
			if err != nil {
				t.Fatalf("%s: %v", v.Name, err)
			}
			ps = append(ps, sluice.Policy{Name: p.Policy, Limit: l, Decision: p.Decision.decision()})
		}
		h := http.Header{}
		sluice.SetRateLimitHeadersOf(h, ps)
		if got, want := headersOf(h), canonical(v.Headers); !maps.Equal(got, want) {
			t.Errorf("%s: %v\nwant %v", v.Name, got, want)
		}
		if !ps[0].Decision.Degraded {
			policy, ratelimit := sluice.RateLimitFieldsOf(ps)
			if policy != v.Headers["RateLimit-Policy"] || ratelimit != v.Headers["RateLimit"] {
				t.Errorf("%s: RateLimitFieldsOf %q %q", v.Name, policy, ratelimit)
			}
		}
	}
}

// WithPolicy decides a request under several limits all or nothing, and
// its fields describe each; the named limits of a config work as well.
func TestMiddleware_policies(t *testing.T) {
	sc := startSidecar(t)
	c := dial(t, sc.cfg.SocketPath)
	burst := sluice.TokenBucket(2, time.Hour, 2)
	daily, err := sluice.ParseLimit("quota:limit=3,period=day")
	if err != nil {
		t.Fatal(err)
	}
	var served int
	h := sluice.Middleware(c, burst, byPath, sluice.WithPolicyName("burst"),
		sluice.WithPolicy("daily", daily))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served++ }))
	res := serve(h, "/p")
	if res.StatusCode != 200 || res.Header.Get("RateLimit-Policy") != `"burst";q=2;w=3600, "daily";q=3;w=86400` ||
		!strings.HasPrefix(res.Header.Get("RateLimit"), `"burst";r=1;t=`) {
		t.Fatalf("first: %d %v", res.StatusCode, res.Header)
	}
	serve(h, "/p")
	res = serve(h, "/p") // the burst is empty: denied, and nothing consumed of the quota
	if res.StatusCode != 429 || !strings.HasPrefix(res.Header.Get("RateLimit"), `"burst";r=0;t=`) || res.Header.Get("Retry-After") == "" || served != 2 {
		t.Fatalf("third: %d %v, served %d", res.StatusCode, res.Header, served)
	}
	d, err := c.Peek(t.Context(), daily, "path:/p")
	if err != nil || d.Remaining != 1 {
		t.Errorf("the quota after a denied request: %+v %v, want 1 remaining", d, err)
	}
	for _, bad := range [][]sluice.MiddlewareOption{
		{sluice.WithPolicy("d", daily), sluice.WithShadow()},
		{sluice.WithPolicy("d", daily), sluice.WithLease()},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("WithPolicy with a lease or a shadow did not panic")
				}
			}()
			sluice.Middleware(c, burst, byPath, bad...)
		}()
	}
}

// A named list's decision through a sidecar: the client gets each limit's
// decision, and the middleware's fields list every limit of the list,
// RateLimit and Retry-After the binding one's, the non-binding one's
// policy beside it.
func TestMiddleware_list(t *testing.T) {
	set, err := limits.Parse("limits.yaml", []byte(`limits:
  login: ["token_bucket:max=2,refill_time=1h,refill_amount=2", "quota:limit=3,period=day"]
`))
	if err != nil {
		t.Fatal(err)
	}
	sc := startSidecar(t, func(c *server.Config) { c.Limits = limits.NewHolder(set) })
	c := dial(t, sc.cfg.SocketPath)
	login := sluice.Limit{Name: "login"}
	d, err := c.Peek(ctx(t), login, "path:/peeked")
	if err != nil || len(d.Limits) != 2 || d.Limits[0].Limit != 2 || d.Limits[1].Limit != 3 || d.Bound != 0 {
		t.Fatalf("Peek of a list: %+v, %v; want its two limits' decisions", d, err)
	}
	var served int
	h := sluice.Middleware(c, login, byPath, sluice.WithPolicyName("login"))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served++ }))
	const policy = `"login.1";q=2, "login.2";q=3`
	headers(t, "first", serve(h, "/l"), 200, "", policy, `"login.1";r=1;t=3600`)
	headers(t, "second", serve(h, "/l"), 200, "", policy, `"login.1";r=0;t=3600`)
	headers(t, "the bucket denies", serve(h, "/l"), 429, "3600", policy, `"login.1";r=0;t=3600`)
	sc.clock.Add(int64(time.Hour)) // t0 is 22:13:20 UTC: the same day still
	// The bucket is full again and the quota has one left: the quota binds.
	midnight := strconv.FormatInt(untilMidnight(sc.clock.Load()), 10)
	headers(t, "the quota binds", serve(h, "/l"), 200, "", policy, `"login.2";r=0;t=`+midnight)
	headers(t, "the quota denies", serve(h, "/l"), 429, midnight, policy, `"login.2";r=0;t=`+midnight)
	if served != 3 {
		t.Errorf("served %d requests, want 3", served)
	}
}

// untilMidnight returns the seconds from t (Unix ns), rounded up, to the
// next midnight UTC.
func untilMidnight(t int64) int64 {
	now := time.Unix(0, t).UTC()
	next := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC)
	return int64((next.Sub(now) + time.Second - 1) / time.Second)
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
	// The slot is held while the first request runs: 429, without
	// Retry-After (a slot frees when a request ends, which nothing
	// foresees).
	headers(t, "while one runs", serve(h, "/j"), 429, "", `"default";q=1;qu="concurrent-requests"`, `"default";r=0`)
	headers(t, "another key", serve(h, "/k"), 200, "", `"default";q=1;qu="concurrent-requests"`, `"default";r=0`)
	close(leave)
	headers(t, "the one that ran", <-done, 200, "", `"default";q=1;qu="concurrent-requests"`, `"default";r=0`)
	headers(t, "after it returned", serve(h, "/j"), 200, "", `"default";q=1;qu="concurrent-requests"`, `"default";r=0`)
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
	headers(t, "named, while one runs", serve(h, "/n"), 429, "", `"default";q=1;qu="concurrent-requests"`, `"default";r=0`)
	close(leave)
	headers(t, "named, the one that ran", <-done, 200, "", `"default";q=1;qu="concurrent-requests"`, `"default";r=0`)
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
	headers(t, "shadow-denied", serve(h, "/s"), 200, "", `"default";q=1;qu="concurrent-requests"`, `"default";r=0`)
	close(leave)
	<-done
	if served.Load() != 2 {
		t.Errorf("%d of 2 shadow requests served", served.Load())
	}
}
