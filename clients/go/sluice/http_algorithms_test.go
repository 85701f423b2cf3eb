package sluice_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/clients/go/sluice"
	limits "github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/server"
)

// namedLimits is the config of the sidecars of the middleware tests: a
// named limit of each kind, a list, and a quota with overrides.
const namedLimits = `limits:
  api:
    limit: "gcra:burst=1,count=1,period=1m"
  jobs:
    limit: "concurrency:limit=1,lease=1m"
  login: ["token_bucket:max=5,refill_time=1m,refill_amount=5", "quota:limit=2,period=day"]
  plan:
    limit: "quota:limit=1,period=day"
    overrides:
      "path:/pl?n": "quota:limit=2,period=day"
      "tenant:*:admin": ["gcra:burst=9,count=1,period=1h", "quota:limit=3,period=week"]
`

// startNamed runs a sidecar whose config defines namedLimits.
func startNamed(t *testing.T, edit ...func(*server.Config)) *sidecar {
	t.Helper()
	set, err := limits.Parse("limits.yaml", []byte(namedLimits))
	if err != nil {
		t.Fatal(err)
	}
	return startSidecar(t, append([]func(*server.Config){func(c *server.Config) { c.Limits = limits.NewHolder(set) }}, edit...)...)
}

// Every limit the client accepts works in the middleware: a limit of each
// algorithm and a named one, with their RateLimit fields, until a denial.
// The sidecar's clock stands still at t0, 20 s into a minute, so every
// value is exact.
func TestMiddleware_everyAlgorithm(t *testing.T) {
	sc := startNamed(t)
	c := dial(t, sc.cfg.SocketPath)
	spec := func(s string) sluice.Limit {
		l, err := sluice.ParseLimit(s)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	type response struct {
		status                        int
		retryAfter, policy, ratelimit string
	}
	for _, tc := range []struct {
		limit string
		opts  []sluice.MiddlewareOption
		// The first request's answer, then the first denial's.
		allowed, denied response
	}{
		{"token_bucket:max=2,refill_time=1m,refill_amount=1", nil,
			response{200, "", `"p";q=2;w=120`, `"p";r=1;t=60`},
			response{429, "60", `"p";q=2;w=120`, `"p";r=0;t=60`}},
		{"gcra:burst=1,count=1,period=10s", nil,
			response{200, "", `"p";q=2;w=20`, `"p";r=1;t=10`},
			response{429, "10", `"p";q=2;w=20`, `"p";r=0;t=10`}},
		{"fixed_window:limit=2,window=1m", nil,
			response{200, "", `"p";q=2;w=60`, `"p";r=1;t=40`},
			response{429, "40", `"p";q=2;w=60`, `"p";r=0;t=40`}},
		{"sliding_window:limit=2,window=1m", nil, // fresh once the next window is over
			response{200, "", `"p";q=2;w=60`, `"p";r=1;t=100`},
			response{429, "70", `"p";q=2;w=60`, `"p";r=0;t=70`}},
		{"pacer:rate=1,period=1m,max_delay=1ms", nil,
			response{200, "", `"p";q=1;w=60`, `"p";r=0;t=60`},
			response{429, "60", `"p";q=1;w=60`, `"p";r=0;t=60`}},
		{"sliding_log:limit=2,window=1m", nil,
			response{200, "", `"p";q=2;w=60`, `"p";r=1;t=60`},
			response{429, "60", `"p";q=2;w=60`, `"p";r=0;t=60`}},
		{"window_counters:limit=2,window=1m,counters=6", nil,
			response{200, "", `"p";q=2;w=60`, `"p";r=1;t=70`},
			response{429, "70", `"p";q=2;w=60`, `"p";r=0;t=70`}},
		{"quota:limit=2,period=day", nil, // 6400 s to the next midnight (UTC) from t0
			response{200, "", `"p";q=2;w=86400`, `"p";r=1;t=6400`},
			response{429, "6400", `"p";q=2;w=86400`, `"p";r=0;t=6400`}},
		{"api", nil, // a named limit: its window is in the sidecar's config
			response{200, "", `"p";q=2`, `"p";r=1;t=60`},
			response{429, "60", `"p";q=2`, `"p";r=0;t=60`}},
		{"login", nil, // a list: every limit listed, its quota binds
			response{200, "", `"p.1";q=5, "p.2";q=2`, `"p.2";r=1;t=6400`},
			response{429, "6400", `"p.1";q=5, "p.2";q=2`, `"p.2";r=0;t=6400`}},
		{"plan", nil, // the override of the key path:/plan (the limit's own is 1 a day)
			response{200, "", `"p";q=2`, `"p";r=1;t=6400`},
			response{429, "6400", `"p";q=2`, `"p";r=0;t=6400`}},
		{"concurrency:limit=1,lease=1m", nil,
			response{200, "", `"p";q=1;qu="concurrent-requests"`, `"p";r=0`},
			response{429, "", `"p";q=1;qu="concurrent-requests"`, `"p";r=0`}},
		{"jobs", []sluice.MiddlewareOption{sluice.WithLease()},
			response{200, "", `"p";q=1;qu="concurrent-requests"`, `"p";r=0`},
			response{429, "", `"p";q=1;qu="concurrent-requests"`, `"p";r=0`}},
	} {
		t.Run(tc.limit, func(t *testing.T) {
			l := spec(tc.limit)
			h := sluice.Middleware(c, l, byPath, append(tc.opts, sluice.WithPolicyName("p"))...)(ok)
			check := func(what string, res *http.Response, want response) {
				t.Helper()
				headers(t, what, res, want.status, want.retryAfter, want.policy, want.ratelimit)
			}
			check("first request", serve(h, "/"+tc.limit), tc.allowed)
			leased := l.Algorithm == sluice.Concurrency(1, 1).Algorithm || tc.limit == "jobs"
			if leased { // a slot held by another process
				ls, err := c.Lease(ctx(t), l, "path:/"+tc.limit)
				if err != nil || !ls.Allowed {
					t.Fatalf("lease: %+v, %v", ls, err)
				}
				defer ls.Release()
			}
			for i := 0; ; i++ {
				res := serve(h, "/"+tc.limit)
				if res.StatusCode != 200 {
					check("first denial", res, tc.denied)
					break
				}
				if i == 10 {
					t.Fatalf("10 requests allowed")
				}
			}
		})
	}
}

// A named list, a named quota and its overrides through the client's
// every operation on a name: the override of the key decides, a list is
// decided all or nothing, and what a list cannot do is a clear error.
func TestClient_listsAndOverrides(t *testing.T) {
	sc := startNamed(t)
	c := dial(t, sc.cfg.SocketPath)
	login, err := sluice.ParseLimit("login")
	if err != nil {
		t.Fatal(err)
	}
	plan, err := sluice.ParseLimit("plan")
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, true, false} {
		if d, err := c.Acquire(ctx(t), login, "alice", 1); err != nil || d.Allowed != want || d.Limit != 2 {
			t.Fatalf("login %d: %+v %v", i, d, err)
		}
	}
	if d, err := c.Refund(ctx(t), login, "alice", 1); err != nil || d.Remaining != 1 {
		t.Errorf("refund: %+v %v", d, err)
	}
	if existed, err := c.Reset(ctx(t), login, "alice"); err != nil || !existed {
		t.Errorf("reset: %v %v", existed, err)
	}
	if d, err := c.Peek(ctx(t), login, "alice"); err != nil || d.Remaining != 2 {
		t.Errorf("peek after the reset: %+v %v", d, err)
	}
	if _, _, err := c.Multi(ctx(t), []sluice.Item{{Limit: login, Key: "alice", Cost: 1}}); err == nil || !strings.Contains(err.Error(), "cannot name a list") {
		t.Errorf("a MULTI item naming a list: %v", err)
	}
	if _, err := c.Lease(ctx(t), login, "alice"); err == nil || !strings.Contains(err.Error(), "cannot be leased") {
		t.Errorf("a lease of a list: %v", err)
	}
	for key, limit := range map[string]int64{"someone": 1, "path:/plan": 2, "path:/plain": 1, "tenant:acme:admin": 3} {
		if d, err := c.Peek(ctx(t), plan, key); err != nil || d.Limit != limit {
			t.Errorf("plan, key %s: %+v %v, want limit %d", key, d, err, limit)
		}
	}
	allowed, ds, err := c.Multi(ctx(t), []sluice.Item{{Limit: plan, Key: "path:/plan", Cost: 2}, {Limit: plan, Key: "someone", Cost: 1}})
	if err != nil || !allowed || ds[0].Limit != 2 || ds[0].Remaining != 0 || ds[1].Remaining != 0 {
		t.Errorf("a MULTI under the overrides: %v %+v %v", allowed, ds, err)
	}
}
