package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/global"
	"github.com/sluicehq/sluice/internal/redistest"
)

// rlsClient returns a client of sc's rate limit service socket.
func rlsClient(t *testing.T, sc *sidecar) rlspb.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+sc.cfg.RLSSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlspb.NewRateLimitServiceClient(conn)
}

func rlsReq(ds ...[2]string) *rlspb.RateLimitRequest {
	r := &rlspb.RateLimitRequest{Domain: "d"}
	for _, d := range ds {
		r.Descriptors = append(r.Descriptors, &ratelimitpb.RateLimitDescriptor{
			Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: d[0], Value: d[1]}}})
	}
	return r
}

// globalRLS starts a sidecar with the config file yaml, its global limits
// in a new Redis (patient), and returns a client of its rate limit service.
func globalRLS(t *testing.T, yaml string) rlspb.RateLimitServiceClient {
	t.Helper()
	set, err := config.Parse("sluice.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	redis := redistest.Start(t)
	redistest.QuietClientLogs()
	dir := shortDir(t)
	o := &global.Options{Addrs: []string{redis.Addr}}
	patient(o)
	return rlsClient(t, start(t, Config{StatePath: filepath.Join(dir, "state"), SocketPath: filepath.Join(dir, "sock"),
		RLSSocket: filepath.Join(dir, "rls"), Limits: config.NewHolder(set), Global: o}))
}

func shouldRateLimit(t *testing.T, c rlspb.RateLimitServiceClient, r *rlspb.RateLimitRequest) *rlspb.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// Ensure a request with a global limit and a local one is all or nothing:
// over the local limit, the global limit's tokens are given back in
// Redis; and a global limit alone decides in Redis.
func TestRLS_globalAllOrNothing(t *testing.T) {
	c := globalRLS(t, `limits:
  shared: {limit: "token_bucket:max=3,refill_time=1h", scope: global}
  mine: "token_bucket:max=2,refill_time=1h"
rls:
  - domain: d
    descriptors:
      - {key: g, rate_limit: {limit: shared}}
      - {key: l, rate_limit: {limit: mine}}
`)
	g, l := [2]string{"g", "k"}, [2]string{"l", "k"}
	for i := range 2 {
		if resp := shouldRateLimit(t, c, rlsReq(g, l)); resp.OverallCode != rlspb.RateLimitResponse_OK {
			t.Fatalf("request %d: %v", i, resp)
		}
	}
	// The local bucket is empty: the request is over, and the global
	// token it took is given back.
	resp := shouldRateLimit(t, c, rlsReq(g, l))
	if resp.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != rlspb.RateLimitResponse_OK ||
		resp.Statuses[1].Code != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("over the local limit: %v", resp)
	}
	if got := resp.Statuses[0].LimitRemaining; got != 1 {
		t.Errorf("the global limit's remaining in the denied request: %d, want 1 (as before it)", got)
	}
	resp = shouldRateLimit(t, c, rlsReq(g))
	if resp.OverallCode != rlspb.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("the global limit alone, its last token: %v", resp)
	}
	if resp = shouldRateLimit(t, c, rlsReq(g)); resp.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("the global limit, empty: %v", resp)
	}
	if cl := resp.Statuses[0].CurrentLimit; cl.GetName() != "shared" || cl.GetRequestsPerUnit() != 3 || cl.GetUnit() != rlspb.RateLimitResponse_RateLimit_HOUR {
		t.Errorf("current_limit %v, want 3 per hour named shared", cl)
	}
}

// Ensure a leased global limit decides the rate limit service's requests
// from its leases as the native protocol's: exactly its limit admitted,
// then over it.
func TestRLS_globalLeased(t *testing.T) {
	c := globalRLS(t, `limits:
  shared: {limit: "token_bucket:max=5,refill_time=1h", scope: global, lease: 2, lease_ttl: 1h}
rls:
  - domain: d
    descriptors:
      - {key: g, rate_limit: {limit: shared}}
`)
	g := [2]string{"g", "k"}
	for i := range 5 {
		if resp := shouldRateLimit(t, c, rlsReq(g)); resp.OverallCode != rlspb.RateLimitResponse_OK {
			t.Fatalf("request %d of a limit of 5: %v", i, resp)
		}
	}
	for i := range 3 {
		if resp := shouldRateLimit(t, c, rlsReq(g)); resp.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("request %d past a limit of 5: %v", 5+i, resp)
		}
	}
}

// Ensure --allow-uid applies to the rate limit service's socket: a peer
// not listed is disconnected, never served.
func TestRLS_allowUID(t *testing.T) {
	dir := shortDir(t)
	set, err := config.Parse("sluice.yaml", []byte("domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: hour, requests_per_unit: 1}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	sc := start(t, Config{StatePath: filepath.Join(dir, "state"), SocketPath: filepath.Join(dir, "sock"),
		RLSSocket: filepath.Join(dir, "rls"), Limits: config.NewHolder(set), AllowUIDs: []uint32{uint32(os.Getuid()) + 1}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := rlsClient(t, sc).ShouldRateLimit(ctx, rlsReq([2]string{"k", "v"})); err == nil {
		t.Fatal("a peer whose uid is not allowed was served")
	}
}

// Ensure a global limit's shadow and refund items are decided in Redis as
// a local limit's are: a shadow item consumes and is answered OK past its
// limit, a refund gives its hits back only in a request that is admitted,
// and is only looked at in one that is not.
func TestRLS_globalShadowAndRefund(t *testing.T) {
	c := globalRLS(t, `limits:
  shared: {limit: "token_bucket:max=3,refill_time=1h", scope: global}
  watched: {limit: "token_bucket:max=1,refill_time=1h", scope: global, shadow: true}
  mine: "token_bucket:max=1,refill_time=1h"
rls:
  - domain: d
    descriptors:
      - {key: g, rate_limit: {limit: shared}}
      - {key: s, rate_limit: {limit: watched}}
      - {key: l, rate_limit: {limit: mine}}
`)
	g, s, l := [2]string{"g", "k"}, [2]string{"s", "k"}, [2]string{"l", "k"}
	refund := func(r *rlspb.RateLimitRequest, i int, hits uint64) *rlspb.RateLimitRequest {
		r.Descriptors[i].HitsAddend, r.Descriptors[i].IsNegativeHits = wrapperspb.UInt64(hits), true
		return r
	}
	for i, want := range []uint32{0, 0} { // the shadow limit's one token, then past it
		resp := shouldRateLimit(t, c, rlsReq(s))
		if resp.OverallCode != rlspb.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != want {
			t.Fatalf("shadow request %d: %v", i, resp)
		}
	}
	if resp := shouldRateLimit(t, c, rlsReq(g)); resp.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("the global limit, one hit: %v", resp)
	}
	// Refunds in a request over the local limit: only looked at.
	shouldRateLimit(t, c, rlsReq(l))
	resp := shouldRateLimit(t, c, refund(rlsReq(g, l), 0, 1))
	if resp.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != rlspb.RateLimitResponse_OK ||
		resp.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("a global refund in a denied request: %v", resp)
	}
	// Alone, admitted: given back in Redis.
	if resp := shouldRateLimit(t, c, refund(rlsReq(g), 0, 1)); resp.OverallCode != rlspb.RateLimitResponse_OK ||
		resp.Statuses[0].LimitRemaining != 3 {
		t.Fatalf("a global refund: %v", resp)
	}
}

// Ensure each error a decision can fail with has its gRPC code.
func TestRLSCode(t *testing.T) {
	for _, c := range []struct {
		err  error
		want codes.Code
	}{
		{engine.ErrTableFull, codes.ResourceExhausted},
		{fmt.Errorf("lookup: %w", engine.ErrTableFull), codes.ResourceExhausted},
		{engine.ErrContended, codes.Unavailable},
		{&engine.LockedError{Pid: 1}, codes.Unavailable},
		{fmt.Errorf("%w: dial: refused", global.ErrUnavailable), codes.Unavailable},
		{context.DeadlineExceeded, codes.Unavailable},
		{context.Canceled, codes.Unavailable},
		{fmt.Errorf("%w: %q is not in the config file", errUnknownName, "x"), codes.FailedPrecondition},
		{errNoGlobal, codes.FailedPrecondition},
		{fmt.Errorf("%w: bad reply", global.ErrScript), codes.Internal},
		{errors.New("something else"), codes.Internal},
	} {
		if got := rlsCode(c.err); got != c.want {
			t.Errorf("rlsCode(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
