package server

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clients/go/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
)

// The outage fleet tests: three sidecars in their default configuration
// (default Redis timeout, on_unavailable local with the default share) and
// their clients in their default configuration (50 ms, failing open), one
// global token bucket of 10 per hour, and one 300 ms stall of a healthy
// Redis (CLIENT PAUSE 300 ALL, as DEBUG SLEEP 0.3 would): 3 requests during the stall, 60 once it is
// over. Before, one slow call sent each host to fallback for a second with
// the whole limit to itself: 35 admitted.

const outageConfig = `limits:
  tb: {limit: "token_bucket:max=10,refill_time=1h", scope: global}
`

// outageCounts are what the fleet decided, by who decided.
type outageCounts struct {
	byRedis, byPolicy, byClient int // admitted by Redis, by the outage policy, by the client's fail-open
	decided                     int // requests the policy or the client decided (not Redis)
}

// stallFleet runs the stall against a fleet of three default sidecars and
// returns what they admitted, and their STATS.
func stallFleet(t *testing.T) (outageCounts, []map[string]uint64) {
	redis := redistest.Start(t)
	socks, sidecars := startFleet(t, 3, outageConfig, fleetSidecar{Addrs: []string{redis.Addr}})
	// The clients in their default configuration (under the race
	// detector, 4 times its timeout: see dialDefault), and for STATS,
	// clients that wait.
	var opts []sluice.Option
	if raceEnabled {
		opts = append(opts, sluice.WithTimeout(4*sluice.DefaultTimeout))
	}
	clients, admins := make([]*sluice.Client, len(socks)), make([]*sluice.Client, len(socks))
	for i, s := range socks {
		c, err := sluice.Dial(s, opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		a, err := sluice.Dial(s, sluice.WithTimeout(5*time.Second), sluice.WithFailurePolicy(sluice.FailError))
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		clients[i], admins[i] = c, a
	}
	// Each sidecar counts the three: the default share is a third.
	for i, c := range admins {
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			st, err := c.Stats(context.Background())
			if err == nil && st["global_hosts"] == 3 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("sidecar %d counts %d hosts (%v), want 3", i, st["global_hosts"], err)
			}
		}
	}
	var mu sync.Mutex
	var n outageCounts
	acquire := func(c *sluice.Client) {
		d, err := c.Acquire(context.Background(), sluice.Limit{Name: "tb"}, "k", 1)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			t.Errorf("acquire: %v", err)
		case d.Degraded:
			n.decided++
			if d.Allowed {
				n.byClient++
			}
		case d.Outage != "":
			n.decided++
			if d.Allowed {
				n.byPolicy++
			}
		case d.Allowed:
			n.byRedis++
		}
	}
	over := redis.Stall(t, 300*time.Millisecond)
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Go(func() { acquire(c) })
	}
	wg.Wait()
	<-over
	for range 20 {
		for _, c := range clients {
			wg.Go(func() { acquire(c) })
		}
		wg.Wait()
	}
	stats := make([]map[string]uint64, len(admins))
	for i, c := range admins {
		st, err := c.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		stats[i] = st
	}
	stopFleet(t, sidecars)
	return n, stats
}

// checkOutageBound checks the documented bound: the fleet admits at most
// the limit plus what was decided without Redis (the policy's share, per
// host and period, and whatever a client's own fail-open admitted).
func checkOutageBound(t *testing.T, n outageCounts) {
	t.Helper()
	total := n.byRedis + n.byPolicy + n.byClient
	t.Logf("admitted %d: %d by Redis, %d by the outage policy, %d by the clients' fail-open; %d requests decided without Redis",
		total, n.byRedis, n.byPolicy, n.byClient, n.decided)
	if n.byRedis > 10 {
		t.Errorf("Redis admitted %d, above the limit of 10", n.byRedis)
	}
	if total > 10+n.decided {
		t.Errorf("the fleet admitted %d, above the limit plus the %d requests decided without Redis", total, n.decided)
	}
	if n.byPolicy > 3*3 {
		t.Errorf("the policy admitted %d, above three hosts' share of 3", n.byPolicy)
	}
}

// Ensure that one 300 ms stall of a healthy Redis costs the fleet at most
// the requests decided during it (the 3 sent then, on an idle host), and
// that no host falls back: one slow call is not an outage.
func TestFleet_stall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 sidecars and Redis")
	}
	n, stats := stallFleet(t)
	checkOutageBound(t, n)
	for i, st := range stats {
		if st["fallbacks"] != 0 {
			t.Errorf("sidecar %d fell back %d times: one slow call is not an outage", i, st["fallbacks"])
		}
	}
}

// Ensure that the same stall under CPU contention, busy loops on every
// core, admits nothing above the documented bound.
func TestFleet_stallContention(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 sidecars, Redis and a busy loop per core")
	}
	for range runtime.NumCPU() {
		_, in, _ := startPart(t, "SLUICE_FLEET_BUSY", struct{}{})
		t.Cleanup(func() { in.Close() })
	}
	n, _ := stallFleet(t)
	checkOutageBound(t, n)
}

// Ensure that a sidecar killed with kill -9 while it holds a lease does
// not take the lease's unused tokens with it: restarted on its state file,
// it returns them (its lease journal), and the fleet admits the limit. A
// token bucket, and window counters (sub-windows of 100 h: the lease,
// which ends with its sub-window, outlives the test).
func TestFleet_kill9Leases(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 2 sidecars and Redis")
	}
	for _, limit := range []string{"token_bucket:max=100,refill_time=1h", "window_counters:limit=100,window=600h,counters=6"} {
		t.Run(limit[:strings.IndexByte(limit, ':')], func(t *testing.T) { kill9Leases(t, limit) })
	}
}

func kill9Leases(t *testing.T, limit string) {
	redis := redistest.Start(t)
	cfgPath := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(cfgPath, []byte(`limits:
  leased: {limit: "`+limit+`", scope: global, lease: 20, lease_ttl: 1h, on_unavailable: closed}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	part := func() fleetSidecar {
		// Redis is healthy throughout: a timeout a loaded host does not
		// miss, so that no request is left to the closed policy.
		return fleetSidecar{Dir: shortDir(t), Config: cfgPath, Addrs: []string{redis.Addr}, Timeout: 10 * time.Second}
	}
	a, b := part(), part()
	acmd, asock := startSidecarPart(t, a)
	bcmd, bsock := startSidecarPart(t, b)
	admit := func(sock string, most int) int {
		c, err := sluice.Dial(sock, sluice.WithTimeout(5*time.Second), sluice.WithFailurePolicy(sluice.FailError))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		n := 0
		for ; n < most; n++ {
			d, err := c.Acquire(context.Background(), sluice.Limit{Name: "leased"}, "k", 1)
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed {
				break
			}
		}
		return n
	}
	total := admit(asock, 1) // A takes a lease of 20 and spends 1
	acmd.Process.Kill()
	acmd.Wait()
	total += admit(bsock, 1000) // B has what Redis has left: 80
	acmd, asock = startSidecarPart(t, a)
	c, err := sluice.Dial(asock, sluice.WithFailurePolicy(sluice.FailError))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		st, err := c.Stats(context.Background())
		if err == nil && st["lease_tokens_recovered"] == 19 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restarted sidecar returned %d tokens (%v), want the 19 its lease had left", st["lease_tokens_recovered"], err)
		}
	}
	c.Close()
	total += admit(asock, 1000) // A again: the 19 it returned
	t.Logf("the fleet admitted %d of a limit of 100", total)
	if total != 100 {
		t.Errorf("the fleet admitted %d, want the limit, 100", total)
	}
	stopFleet(t, []*partCmd{acmd, bcmd})
}
