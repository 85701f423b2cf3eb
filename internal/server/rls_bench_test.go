package server

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/clients/go/sluice"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/redistest"
)

// BenchmarkRLS compares, in one run, four ways to decide the same fixed
// windows (per client address, 1 or 2 descriptors a request) with as many
// callers at once: Envoy's rate limit service of sluiced (gRPC over its
// Unix socket, the generated client, one connection as an Envoy worker
// holds), the native protocol (the Go client, one acquire per descriptor,
// a MULTI for two), and envoyproxy/ratelimit's design (a Redis INCRBY and
// EXPIRE per descriptor, pipelined in one round trip, Redis on a Unix
// socket), called directly (redis-incr-expire) and behind the same gRPC
// service on a Unix socket (grpc-redis), as envoyproxy/ratelimit serves
// it. Each reports decisions/s (descriptors decided a second) and the
// p99 of one request's latency.
//
//	go test -run '^$' -bench BenchmarkRLS -benchtime 3s -count 5 ./internal/server
func BenchmarkRLS(b *testing.B) {
	dir := shortDir(b)
	set, err := config.Parse("rls.yaml", []byte(`limits:
  per_ip: "fixed_window:limit=4000000000,window=1h"
`+benchRules))
	if err != nil {
		b.Fatal(err)
	}
	sc := start(b, Config{
		StatePath: filepath.Join(dir, "state"), SocketPath: filepath.Join(dir, "sock"), RESPSocket: "-",
		RLSSocket: filepath.Join(dir, "rls"), Limits: config.NewHolder(set), Slots: 1 << 18, SlotSize: 64,
		Now: func() int64 { return time.Now().UnixNano() },
	})
	conn, err := grpc.NewClient("unix://"+sc.cfg.RLSSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	rc := rlspb.NewRateLimitServiceClient(conn)
	nc, err := sluice.Dial(sc.cfg.SocketPath, sluice.WithFailurePolicy(sluice.FailError), sluice.WithTimeout(30*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	rd := redistest.Start(b)
	red := redis.NewClient(&redis.Options{Network: rd.Network, Addr: rd.Addr, PoolSize: 64, Protocol: 2, DisableIdentity: true})
	defer red.Close()
	window := sluice.FixedWindow(4_000_000_000, time.Hour)
	ec := envoyDesign(b, red)
	ctx := context.Background()

	for _, n := range []int{1, 2} {
		b.Run(fmt.Sprintf("descriptors=%d/rls", n), func(b *testing.B) {
			run(b, n, func(ip string) error {
				resp, err := rc.ShouldRateLimit(ctx, benchRequest(ip, n))
				if err == nil && resp.OverallCode != rlspb.RateLimitResponse_OK {
					err = fmt.Errorf("over limit: %v", resp)
				}
				return err
			})
		})
		b.Run(fmt.Sprintf("descriptors=%d/grpc-redis", n), func(b *testing.B) {
			run(b, n, func(ip string) error {
				_, err := ec.ShouldRateLimit(ctx, benchRequest(ip, n))
				return err
			})
		})
		b.Run(fmt.Sprintf("descriptors=%d/native", n), func(b *testing.B) {
			run(b, n, func(ip string) error {
				if n == 1 {
					d, err := nc.Acquire(ctx, window, "ip:"+ip, 1)
					if err == nil && !d.Allowed {
						err = fmt.Errorf("denied: %+v", d)
					}
					return err
				}
				ok, ds, err := nc.Multi(ctx, []sluice.Item{{Limit: window, Key: "ip:" + ip, Cost: 1}, {Limit: window, Key: "path:/api", Cost: 1}})
				if err == nil && !ok {
					err = fmt.Errorf("denied: %+v", ds)
				}
				return err
			})
		})
		b.Run(fmt.Sprintf("descriptors=%d/redis-incr-expire", n), func(b *testing.B) {
			run(b, n, func(ip string) error {
				_, err := incrExpire(ctx, red, benchRequest(ip, n))
				return err
			})
		})
	}
}

// benchRequest is a request of n descriptors: the client's address, and
// the path.
// benchRules are the benchmarks' rate limit service rules: fixed windows
// of an hour per client address and per path, too large to be reached.
const benchRules = `rls:
  - domain: bench
    descriptors:
      - key: remote_address
        rate_limit: {unit: hour, requests_per_unit: 4000000000}
      - key: path
        rate_limit: {unit: hour, requests_per_unit: 4000000000}
`

func benchRequest(ip string, n int) *rlspb.RateLimitRequest {
	req := &rlspb.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitpb.RateLimitDescriptor{
		{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: "remote_address", Value: ip}}},
	}}
	if n == 2 {
		req.Descriptors = append(req.Descriptors, &ratelimitpb.RateLimitDescriptor{
			Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: "path", Value: "/api"}}})
	}
	return req
}

// incrExpire decides req as envoyproxy/ratelimit's Redis cache does: for
// each descriptor, INCRBY and EXPIRE on the key of its domain, entries and
// window (an hour), all in one pipeline; over the limit when a count
// passes it.
func incrExpire(ctx context.Context, red *redis.Client, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	window := strconv.FormatInt(time.Now().Unix()/3600*3600, 10)
	p := red.Pipeline()
	incrs := make([]*redis.IntCmd, len(req.Descriptors))
	for i, d := range req.Descriptors {
		k := req.Domain + "_"
		for _, e := range d.Entries {
			k += e.Key + "_" + e.Value + "_"
		}
		k += window
		incrs[i] = p.IncrBy(ctx, k, 1)
		p.Expire(ctx, k, time.Hour)
	}
	if _, err := p.Exec(ctx); err != nil {
		return nil, err
	}
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}
	for _, c := range incrs {
		st := &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK,
			CurrentLimit: &rlspb.RateLimitResponse_RateLimit{RequestsPerUnit: 4_000_000_000, Unit: rlspb.RateLimitResponse_RateLimit_HOUR}}
		if c.Val() > 4_000_000_000 {
			st.Code, resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT, rlspb.RateLimitResponse_OVER_LIMIT
		}
		resp.Statuses = append(resp.Statuses, st)
	}
	return resp, nil
}

// envoyDesign serves envoyproxy/ratelimit's design: the rate limit
// service's gRPC on a Unix socket, each request decided by incrExpire. It
// returns a client of it.
func envoyDesign(b *testing.B, red *redis.Client) rlspb.RateLimitServiceClient {
	path := filepath.Join(shortDir(b), "envoy")
	ln, err := net.Listen("unix", path)
	if err != nil {
		b.Fatal(err)
	}
	g := grpc.NewServer(grpc.NumStreamWorkers(uint32(max(4, runtime.GOMAXPROCS(0)))))
	rlspb.RegisterRateLimitServiceServer(g, incrExpireService{red: red})
	go g.Serve(ln)
	b.Cleanup(g.Stop)
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return rlspb.NewRateLimitServiceClient(conn)
}

type incrExpireService struct {
	rlspb.UnimplementedRateLimitServiceServer
	red *redis.Client
}

func (s incrExpireService) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	return incrExpire(ctx, s.red, req)
}

// run calls do from 16 goroutines per CPU, each with addresses of its own,
// b.N times in all, and reports descriptors decided a second and the p99
// of one call.
func run(b *testing.B, descriptors int, do func(ip string) error) {
	var mu sync.Mutex
	var all []time.Duration
	var next sync.Mutex
	id := 0
	b.SetParallelism(16)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		next.Lock()
		id++
		me := id
		next.Unlock()
		lat := make([]time.Duration, 0, 1024)
		i := 0
		for pb.Next() {
			ip := fmt.Sprintf("10.%d.%d.%d", me, i/256%4, i%256) // 1024 addresses per caller
			i++
			t := time.Now()
			if err := do(ip); err != nil {
				b.Error(err)
				return
			}
			lat = append(lat, time.Since(t))
		}
		mu.Lock()
		all = append(all, lat...)
		mu.Unlock()
	})
	elapsed := time.Since(start)
	b.StopTimer()
	if len(all) == 0 {
		return
	}
	slices.Sort(all)
	b.ReportMetric(float64(b.N*descriptors)/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkRLSDecide is the rate limit service's work without gRPC:
// ShouldRateLimit called in process (matching, deciding, the response),
// on fixed windows (1 and 2 descriptors: an engine.Do, an engine.Multi)
// and on a leased global limit beside a local one (the global limit's
// Remote, decided from its lease). It reports the process's CPU time per
// request too, which a busy host disturbs less than the wall time.
//
//	go test -run '^$' -bench BenchmarkRLSDecide -count 6 ./internal/server
func BenchmarkRLSDecide(b *testing.B) {
	set, err := config.Parse("rls.yaml", []byte(`limits:
  leased: {limit: "token_bucket:max=1000000000000,refill_time=1s", scope: global, lease: 100000000}
  local: "token_bucket:max=1000000000000,refill_time=1s"
`+benchRules+`      - key: g
        rate_limit: {limit: leased}
      - key: l
        rate_limit: {limit: local}
`))
	if err != nil {
		b.Fatal(err)
	}
	svc := &rlsService{s: globalServer(b, set)}
	desc := func(k, v string) *ratelimitpb.RateLimitDescriptor {
		return &ratelimitpb.RateLimitDescriptor{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: k, Value: v}}}
	}
	ctx := context.Background()
	for _, c := range []struct {
		name string
		req  *rlspb.RateLimitRequest
	}{
		{"windows=1", benchRequest("10.0.0.1", 1)},
		{"windows=2", benchRequest("10.0.0.1", 2)},
		{"leased+local", &rlspb.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitpb.RateLimitDescriptor{desc("g", "k"), desc("l", "k")}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			if _, err := svc.ShouldRateLimit(ctx, c.req); err != nil { // the first lease, from Redis
				b.Fatal(err)
			}
			b.ReportAllocs()
			cpu := processCPU()
			b.ResetTimer()
			for range b.N {
				resp, err := svc.ShouldRateLimit(ctx, c.req)
				if err != nil || resp.OverallCode != rlspb.RateLimitResponse_OK {
					b.Fatal(resp, err)
				}
			}
			b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}
