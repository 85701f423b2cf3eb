package server

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/global"
	"github.com/sluicehq/sluice/internal/redistest"
)

// routesConfig routes test keys to this host, leased:* to leases of 3 and
// every other key to Redis.
const routesConfig = `resp:
  - match: "test:*"
    scope: local
  - match: "leased:*"
    scope: global
    lease: 3
  - match: "*"
    scope: global
    on_unavailable: closed
`

// Ensure the Redis-protocol commands of keys a global route matches share
// one budget across sidecars, through go-redis and redis-cli in their
// default configurations, answered as local ones are; that a local route
// keeps its keys on each host; that AT is refused for them, and a MULTI
// that mixes them with local keys.
func TestRESP_globalRoutes(t *testing.T) {
	r := redistest.Start(t)
	// A generous Redis timeout: no request of this test is left to the
	// outage policy on a loaded host, so every count is exact.
	scs := []*sidecar{startGlobal(t, r.Addr, routesConfig, patient), startGlobal(t, r.Addr, routesConfig, patient)}
	ctx := context.Background()
	var rdbs []*redis.Client
	for _, sc := range scs {
		rdb := redis.NewClient(&redis.Options{Network: "unix", Addr: sc.cfg.RESPSocket})
		t.Cleanup(func() { rdb.Close() })
		rdbs = append(rdbs, rdb)
	}

	// RL.REDUCE: one bucket of 10 for both sidecars, counted down exactly.
	for i := range 14 {
		n, err := rdbs[i%2].Do(ctx, "RL.REDUCE", "login:alice", 10, 3600).Int64()
		want := max(int64(10-i), 0)
		if err != nil || n != want {
			t.Fatalf("RL.REDUCE %d on sidecar %d: %d, %v; want %d", i, i%2, n, err, want)
		}
	}
	// CL.THROTTLE: a burst of 4 (5 at once), then limited, whichever
	// sidecar is asked.
	for i := range 8 {
		v, err := rdbs[i%2].Do(ctx, "CL.THROTTLE", "api:x", 4, 1, 3600).Int64Slice()
		limited := int64(0)
		if i >= 5 {
			limited = 1
		}
		if err != nil || len(v) != 5 || v[0] != limited || v[1] != 5 || v[2] != max(int64(4-i), 0) {
			t.Fatalf("CL.THROTTLE %d on sidecar %d: %v, %v", i, i%2, v, err)
		}
	}
	// redis-cli, one process per call, alternating sidecars.
	cli := redisTool(t, "redis-cli")
	for i := range 4 {
		out, err := exec.Command(cli, "-s", scs[i%2].cfg.RESPSocket, "CL.THROTTLE", "cli:k", "1", "1", "3600").CombinedOutput()
		want := "0"
		if i >= 2 {
			want = "1"
		}
		if first, _, _ := strings.Cut(string(out), "\n"); err != nil || first != want {
			t.Fatalf("redis-cli CL.THROTTLE %d: %q, %v; want first line %s", i, out, err, want)
		}
	}
	// A local route: each host its own bucket.
	for _, rdb := range rdbs {
		for i := range 3 {
			if n, err := rdb.Do(ctx, "RL.REDUCE", "test:1", 3, 3600).Int64(); err != nil || n != int64(3-i) {
				t.Fatalf("local RL.REDUCE %d: %d, %v", i, n, err)
			}
		}
	}
	// A leased route never admits more than the limit across both.
	admitted := 0
	for i := range 40 {
		v, err := rdbs[i%2].Do(ctx, "CL.THROTTLE", "leased:k", 9, 1, 3600).Int64Slice()
		if err != nil || len(v) != 5 {
			t.Fatalf("leased CL.THROTTLE %d: %v, %v", i, v, err)
		}
		if v[0] == 0 {
			admitted++
		}
	}
	if admitted > 10 || admitted < 6 {
		t.Errorf("a leased route of 10 admitted %d across two sidecars with leases of 3", admitted)
	}
	// AT: Redis's clock is the only clock.
	if err := rdbs[0].Do(ctx, "RL.REDUCE", "login:bob", 10, 60, "AT", 1700000000).Err(); err == nil ||
		!strings.Contains(err.Error(), `AT is not accepted for the key "login:bob": it is decided fleet-wide`) {
		t.Errorf("RL.REDUCE with AT on a global key: %v", err)
	}
	// MULTI: a command whose key is global is refused beside a local one,
	// the rest queued.
	_, err := rdbs[0].TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Do(ctx, "RL.REDUCE", "test:2", 3, 3600)
		p.Do(ctx, "CL.THROTTLE", "api:y", 4, 1, 3600)
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "EXECABORT") {
		t.Errorf("a transaction with a global key: %v, want EXECABORT", err)
	}
	if v, err := rdbs[0].Do(ctx, "CL.THROTTLE", "api:y", 4, 1, 3600).Int64Slice(); err != nil || v[2] != 4 {
		t.Errorf("the refused transaction changed api:y: %v, %v", v, err)
	}
}

// Ensure an event loop does not wait for Redis on a routed command: with
// Redis holding one connection's CL.THROTTLE (CLIENT PAUSE WRITE parks
// the sidecar's call), another connection of the same, only, loop is
// answered at once.
func TestRESP_globalRouteEpollLoop(t *testing.T) {
	r := redistest.Start(t)
	set, err := config.Parse("sluice.yaml", []byte(routesConfig))
	if err != nil {
		t.Fatal(err)
	}
	redistest.QuietClientLogs()
	sc := start(t, Config{Limits: config.NewHolder(set), Transport: TransportEpoll, Loops: 1,
		Global: &global.Options{Addrs: []string{r.Addr}, Timeout: time.Minute}})
	ctx := context.Background()
	a := redis.NewClient(&redis.Options{Network: "unix", Addr: sc.cfg.RESPSocket, ReadTimeout: time.Minute})
	b := redis.NewClient(&redis.Options{Network: "unix", Addr: sc.cfg.RESPSocket, ReadTimeout: 10 * time.Second})
	t.Cleanup(func() { a.Close(); b.Close() })
	if err := b.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	rc := r.Client(t)
	if err := rc.Do(ctx, "CLIENT", "PAUSE", 60000, "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	defer rc.Do(ctx, "CLIENT", "UNPAUSE")
	held := make(chan error, 1)
	go func() { held <- a.Do(ctx, "CL.THROTTLE", "api:held", 4, 1, 3600).Err() }()
	waitHeld(t, rc)
	if err := b.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING beside a routed command Redis holds: %v", err)
	}
	if n, err := b.Do(ctx, "RL.REDUCE", "test:free", 3, 60).Int64(); err != nil || n != 3 {
		t.Fatalf("a local RL.REDUCE beside a routed command Redis holds: %d, %v", n, err)
	}
	rc.Do(ctx, "CLIENT", "UNPAUSE")
	if err := <-held; err != nil {
		t.Fatalf("the held command: %v", err)
	}
}
