package server

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/clients/go/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
)

var fleetLeases = flag.Int("fleet.leases", 8, "leases each client process takes in TestFleet_concurrency (the long form: 500)")

// fleetHolder is a concurrency client's part. With Rounds > 0 it takes
// Rounds leases of Limit on Key, one after another (with Rounds -1, until
// stdin closes), and while it holds each, counts itself in the witness (a
// Redis of the test's own: INCR "holders" after the grant, DECR before the
// release; INCR "leases" per grant), then prints "max N U", the largest
// count it saw and how many of its releases found no lease held. With
// Rounds 0 it takes one lease, prints "held" and holds it until it is
// killed or stdin closes.
type fleetHolder struct {
	Socket, Limit, Key string
	Rounds             int
	Witness            string
}

func (p *fleetHolder) run() int {
	c, err := sluice.Dial(p.Socket, sluice.WithTimeout(30*time.Second), sluice.WithFailurePolicy(sluice.FailError))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	ctx := context.Background()
	limit := sluice.Limit{Name: p.Limit}
	var done atomic.Bool
	if p.Rounds < 0 {
		go func() { io.Copy(io.Discard, os.Stdin); done.Store(true) }()
	}
	lease := func() (sluice.Lease, error) {
		for !done.Load() {
			ls, err := c.Lease(ctx, limit, p.Key)
			if err != nil || ls.Allowed {
				return ls, err
			}
			time.Sleep(time.Millisecond)
		}
		return sluice.Lease{}, nil
	}
	if p.Rounds == 0 {
		if _, err := lease(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println("held")
		io.Copy(io.Discard, os.Stdin)
		return 0
	}
	w := redis.NewClient(&redis.Options{Network: "unix", Addr: p.Witness})
	defer w.Close()
	most, unreleased := int64(0), 0
	for i := 0; (p.Rounds < 0 || i < p.Rounds) && !done.Load(); i++ {
		ls, err := lease()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if !ls.Allowed {
			break // stdin closed while waiting
		}
		n, err := w.Incr(ctx, "holders").Result()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		most = max(most, n)
		w.Incr(ctx, "leases")
		time.Sleep(time.Millisecond)
		if err := w.Decr(ctx, "holders").Err(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		ok, err := ls.Release()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if !ok {
			unreleased++
		}
	}
	fmt.Println("max", most, unreleased)
	return 0
}

// A global concurrency limit of 5 across four sidecars: 32 client
// processes (8 per sidecar) take leases in turn, and a witness of their
// own never counts more than 5 holders at once; 5 holders killed with
// SIGKILL give their slots back through their sidecars at once (the
// leases are for an hour); and the slots of 5 holders whose sidecar is
// killed with SIGKILL free at their lease time (3 s), not before and not
// much after.
func TestFleet_concurrency(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Redis and 45 processes")
	}
	rdb, witness := redistest.Start(t), redistest.Start(t)
	const text = `limits:
  jobs: {limit: "concurrency:limit=5,lease=1h", scope: global, on_unavailable: closed}
  short: {limit: "concurrency:limit=5,lease=3s", scope: global, on_unavailable: closed}
`
	const hosts, clients = 4, 8
	socks, sidecars := startFleet(t, hosts, text, fleetSidecar{Addrs: []string{rdb.Addr}, Timeout: 5 * time.Second})

	var wg sync.WaitGroup
	var mu sync.Mutex
	most, unreleased := 0, 0
	for h := range hosts {
		for range clients {
			cmd, _, out := startPart(t, "SLUICE_FLEET_HOLDER", fleetHolder{Socket: socks[h], Limit: "jobs", Key: "k",
				Rounds: *fleetLeases, Witness: witness.Addr})
			wg.Go(func() {
				for out.Scan() {
					var n, u int
					fmt.Sscanf(out.Text(), "max %d %d", &n, &u)
					mu.Lock()
					most, unreleased = max(most, n), unreleased+u
					mu.Unlock()
				}
				if err := cmd.Wait(); err != nil {
					t.Errorf("a client exited with %v", err)
				}
			})
		}
	}
	wg.Wait()
	if most > 5 || most < 1 {
		t.Fatalf("the witness counted at most %d holders at once, want 1 to 5", most)
	}
	if unreleased > 0 {
		t.Errorf("%d releases found their lease not held", unreleased)
	}
	t.Logf("%d clients x %d leases: at most %d holders at once", hosts*clients, *fleetLeases, most)

	c, err := sluice.Dial(socks[0], sluice.WithTimeout(30*time.Second), sluice.WithFailurePolicy(sluice.FailError))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	try := func(limit, key string) bool {
		ls, err := c.Lease(context.Background(), sluice.Limit{Name: limit}, key)
		if err != nil {
			t.Fatal(err)
		}
		return ls.Allowed
	}
	// holders starts 5 holders of limit on key, the i-th through sidecar
	// on(i), and waits until they hold; a sixth lease must then be denied
	// unless the first could have expired meanwhile (its lease time since
	// it was asked for: starting 5 processes can take that long on a
	// loaded host).
	holders := func(limit, key string, lease time.Duration, on func(i int) int) []*partCmd {
		var cmds []*partCmd
		asked := time.Now()
		for i := range 5 {
			cmd, _, out := startPart(t, "SLUICE_FLEET_HOLDER", fleetHolder{Socket: socks[on(i)], Limit: limit, Key: key})
			if !out.Scan() || strings.TrimSpace(out.Text()) != "held" {
				t.Fatal("a holder did not take its lease")
			}
			cmds = append(cmds, cmd)
		}
		if try(limit, key) {
			if time.Since(asked) < lease {
				t.Fatalf("%s: a sixth lease was granted", limit)
			}
			t.Logf("%s: a sixth lease was granted %v after the first was asked for, past its lease time", limit, time.Since(asked))
		}
		return cmds
	}

	// Holders killed: their sidecars give their slots back at once.
	for _, cmd := range holders("jobs", "k2", time.Hour, func(i int) int { return i % hosts }) {
		cmd.Process.Kill()
		cmd.Wait()
	}
	got := 0
	for deadline := time.Now().Add(time.Minute); got < 5; {
		if try("jobs", "k2") {
			got++
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("killed holders' slots not given back: %d of 5 free", got)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if try("jobs", "k2") {
		t.Fatal("a sixth lease was granted after the holders' slots came back")
	}

	// A sidecar killed with its 5 holders' leases: Redis frees them at their
	// lease time.
	before := time.Now()
	holders("short", "k3", 3*time.Second, func(int) int { return hosts - 1 })
	allHeld := time.Now()
	sidecars[hosts-1].Process.Kill()
	sidecars[hosts-1].Wait()
	for !try("short", "k3") {
		if time.Since(allHeld) > time.Minute {
			t.Fatal("a killed sidecar's leases were not freed at their lease time")
		}
		time.Sleep(5 * time.Millisecond)
	}
	freed := time.Now()
	t.Logf("a killed sidecar's lease freed %v after the first grant could be, %v after all were held",
		freed.Sub(before), freed.Sub(allHeld))
	if freed.Sub(before) < 3*time.Second {
		t.Errorf("freed %v after the leases were asked for, before their lease time (3 s)", freed.Sub(before))
	}
	if freed.Sub(allHeld) > 3*time.Second+2*time.Second {
		t.Errorf("freed %v after the leases were held, well after their lease time (3 s)", freed.Sub(allHeld))
	}
	stopFleet(t, sidecars[:hosts-1])
}
