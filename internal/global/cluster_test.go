package global

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/redistest"
)

// Ensure that hosts sharing global limits on a Redis Cluster admit exactly
// the limit, for every algorithm: four Stores (four hosts' connection
// pools) with eight goroutines each, on keys spread over the three masters.
func TestClusterExact(t *testing.T) {
	c := redistest.StartCluster(t)
	const hosts, workers, rounds, n = 4, 8, 12, 300
	limits := []struct {
		l  bucket.Limit
		at int64 // explicit time for the windows (no window boundary in the test); 0: Redis's clock
	}{
		{l: tokenBucket(n, hour)},
		{l: bucket.Limit{Algorithm: bucket.GCRA, Burst: n - 1, Count: 1, Period: hour}},
		{l: bucket.Limit{Algorithm: bucket.FixedWindow, Max: n, Window: hour}, at: t0},
		{l: bucket.Limit{Algorithm: bucket.SlidingWindow, Max: n, Window: hour}, at: t0},
		{l: bucket.Limit{Algorithm: bucket.Pacer, Count: 1, Period: hour, MaxDelay: (n - 1) * hour}},
	}
	stores := make([]*Store, hosts)
	for i := range stores {
		stores[i] = newStore(t, Options{Addrs: c.Addrs()})
	}
	keys := spreadKeys(t, stores[0], 6)
	admitted := make([][]atomic.Int64, len(limits))
	for i := range admitted {
		admitted[i] = make([]atomic.Int64, len(keys))
	}
	var wg sync.WaitGroup
	start := time.Now()
	for h := range hosts {
		for range workers {
			wg.Go(func() {
				for range rounds {
					for li, lim := range limits {
						for ki, k := range keys {
							d, err := stores[h].Decide(context.Background(), Request{Limit: lim.l, Key: k, Cost: 1, At: lim.at})
							if err != nil {
								t.Error(err)
								return
							}
							if d.Allowed {
								admitted[li][ki].Add(1)
							}
						}
					}
				}
			})
		}
	}
	wg.Wait()
	total := hosts * workers * rounds * len(limits) * len(keys)
	for li := range limits {
		for ki := range keys {
			if got := admitted[li][ki].Load(); got != n {
				t.Errorf("%v key %s: admitted %d of %d requests, want exactly %d", limits[li].l.Algorithm, keys[ki], got, hosts*workers*rounds, n)
			}
		}
	}
	var st Stats
	for _, s := range stores {
		x := s.Stats()
		st.Requests += x.Requests
		st.RoundTrips += x.RoundTrips
	}
	t.Logf("%d decisions in %v, %d round trips (%.1f per pipeline)", total, time.Since(start), st.RoundTrips,
		float64(st.Requests)/float64(st.RoundTrips))

	// Leased mode on the same hosts: never above the limit, every unused
	// token back after Close.
	leases := make([]*Leases, hosts)
	for i := range leases {
		leases[i] = NewLeases(stores[i], LeaseOptions{TTL: time.Hour})
	}
	l := tokenBucket(n, hour)
	var leased [6]atomic.Int64
	for h := range hosts {
		for range workers {
			wg.Go(func() {
				for range rounds {
					for ki, k := range keys {
						d, err := leases[h].Decide(context.Background(), l, "leased-"+k, 1)
						if err != nil {
							t.Error(err)
							return
						}
						if d.Allowed {
							leased[ki].Add(1)
						}
					}
				}
			})
		}
	}
	wg.Wait()
	for _, ls := range leases {
		if err := ls.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for ki, k := range keys {
		a := leased[ki].Load()
		rem := globalRemaining(t, stores[0], l, "leased-"+k)
		if a > n || a+rem != n {
			t.Errorf("leased key %s: admitted %d, %d left in Redis after Close; want at most %d, and %d in all", k, a, rem, n, n)
		}
	}
}

// Ensure that killing a Cluster master under load crashes nothing, fails
// requests only with ErrUnavailable while its slots have no master (the
// outage policy, closed, decides them at once), resumes decisions in Redis
// once its replica is promoted, and never admits beyond the limit
// (WaitReplicas 1: a decision the replica does not hold is not returned).
func TestClusterFailover(t *testing.T) {
	c := redistest.StartCluster(t)
	const workers, n = 16, 400
	l := tokenBucket(n, hour)
	var logs strings.Builder
	var logMu sync.Mutex
	s := newStore(t, Options{Addrs: c.Addrs(), WaitReplicas: 1, Timeout: 200 * time.Millisecond, ProbeMax: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, nil))})
	f := NewFallback(s, nil)
	closed := Policy{OnUnavailable: Closed}
	keys := spreadKeys(t, s, 6)
	var admitted, failed [6]atomic.Int64 // failed: decided by the policy
	var total atomic.Int64
	var after atomic.Bool    // the replica has been promoted
	var spent [6]atomic.Bool // Redis denied the key after the promotion: its budget is spent
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ki := i % len(keys)
				promoted := after.Load()
				d, src, err := f.Decide(context.Background(), Request{Limit: l, Key: keys[ki], Cost: 1}, closed)
				switch {
				case err != nil:
					t.Errorf("key %s: %v (unavailability is the policy's to decide)", keys[ki], err)
					return
				case src == FromPolicy:
					if d.Allowed {
						t.Errorf("key %s: the closed policy admitted a request", keys[ki])
					}
					failed[ki].Add(1)
					time.Sleep(time.Millisecond)
				case d.Allowed:
					admitted[ki].Add(1)
					total.Add(1)
				}
				if src == FromRedis && promoted && !d.Allowed {
					spent[ki].Store(true)
				}
			}
		})
	}
	var stopOnce sync.Once
	halt := func() { stopOnce.Do(func() { close(stop) }); wg.Wait() }
	t.Cleanup(halt) // before the Store closes, even if the test fails early
	// Kill the master of the first key once a fifth of the budget is spent.
	for total.Load() < int64(len(keys))*n/5 {
		time.Sleep(time.Millisecond)
	}
	m, err := s.cluster.MasterForKey(context.Background(), string(AppendKey(nil, s.Prefix(), &l, keys[0])))
	if err != nil {
		t.Fatal(err)
	}
	var master *redistest.Node
	for _, node := range c.Masters() {
		if node.Addr == m.Options().Addr {
			master = node
		}
	}
	if master == nil {
		t.Fatalf("no master at %s", m.Options().Addr)
	}
	start := time.Now()
	r := c.KillMaster(t, master)
	t.Logf("killed master %s with %d admitted", master.Addr, total.Load())
	waited := c.WaitFailover(t, r)
	t.Logf("replica %s promoted after %v", r.Addr, waited)
	// Its decisions need a replica to acknowledge them (WaitReplicas):
	// the old master comes back as one.
	c.Rejoin(t, master)
	after.Store(true)
	t.Logf("old master %s back as a replica after %v", master.Addr, time.Since(start))
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		done := true
		for ki := range keys {
			done = done && spent[ki].Load()
		}
		if done {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	halt()
	// The dead master's address is left once its slots are the
	// replica's: no shard stays down.
	for deadline := time.Now().Add(10 * time.Second); f.Stats().Down != 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	st, fst := s.Stats(), f.Stats()
	t.Logf("stats %+v\npolicy %+v", st, fst)
	if fst.ToFallback == 0 || fst.ToGlobal == 0 || fst.Closed == 0 || fst.Down != 0 {
		t.Errorf("outage policy %+v: want transitions both ways and closed decisions", fst)
	}
	logMu.Lock()
	t.Logf("logs:\n%s", logs.String())
	logMu.Unlock()
	for ki, k := range keys {
		a, f := admitted[ki].Load(), failed[ki].Load()
		t.Logf("key %s: admitted %d, failed %d", k, a, f)
		if a > n {
			t.Errorf("key %s: admitted %d, above the limit %d", k, a, n)
		}
		if !spent[ki].Load() {
			t.Errorf("key %s: Redis did not decide the key until its budget was spent after the failover", k)
		}
	}
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Ensure that a request for a slot that moved to another master (the Store
// still maps it to the old one) is sent again through the Cluster client
// and decided.
func TestClusterRedirect(t *testing.T) {
	c := redistest.StartCluster(t)
	ctx := context.Background()
	s := newStore(t, Options{Addrs: c.Addrs()})
	l := tokenBucket(10, hour)
	if _, err := s.Decide(ctx, Request{Limit: l, Key: "warm-up", Cost: 1}); err != nil {
		t.Fatal(err)
	}
	key := string(AppendKey(nil, s.Prefix(), &l, "moving"))
	// The masters as the cluster serves its slots (the topology read at
	// start may list a replica that gossip had not announced yet).
	ranges, err := c.Nodes[0].Client(t).ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	var masters []*redistest.Node
	for _, r := range ranges {
		for _, n := range c.Nodes {
			if len(r.Nodes) > 0 && n.Addr == r.Nodes[0].Addr && !slices.Contains(masters, n) {
				masters = append(masters, n)
			}
		}
	}
	slot, err := masters[0].Client(t).ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	owner, err := s.cluster.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var target *redistest.Node
	for _, m := range masters {
		if m.Addr != owner.Options().Addr {
			target = m
			break
		}
	}
	// The slot is empty: move it to the target as resharding does, the
	// target importing it and the owner migrating it, then assign it on
	// every master, the target first. Importing, the target takes the slot
	// with a new config epoch, so gossip from the owner, which still
	// claims it, cannot take it back (without, under load, it did, and
	// the nodes answered MOVED to each other).
	slices.SortFunc(masters, func(a, b *redistest.Node) int {
		if a == target {
			return -1
		}
		if b == target {
			return 1
		}
		return 0
	})
	var ownerNode *redistest.Node
	for _, m := range masters {
		if m.Addr == owner.Options().Addr {
			ownerNode = m
		}
	}
	for _, step := range []struct {
		n          *redistest.Node
		state, arg string
	}{{target, "IMPORTING", ownerNode.ID}, {ownerNode, "MIGRATING", target.ID}} {
		if err := step.n.Client(t).Do(ctx, "CLUSTER", "SETSLOT", slot, step.state, step.arg).Err(); err != nil {
			t.Fatalf("CLUSTER SETSLOT %d %s at %s: %v", slot, step.state, step.n.Addr, err)
		}
	}
	for _, m := range masters {
		if err := m.Client(t).Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", target.ID).Err(); err != nil {
			t.Fatalf("CLUSTER SETSLOT %d NODE %s at %s: %v", slot, target.Addr, m.Addr, err)
		}
	}
	// Every master agrees before the store asks (it still has the old map).
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		agreed := 0
		for _, m := range masters {
			ranges, err := m.Client(t).ClusterSlots(ctx).Result()
			for _, r := range ranges {
				if err == nil && int64(r.Start) <= slot && slot <= int64(r.End) && len(r.Nodes) > 0 && r.Nodes[0].Addr == target.Addr {
					agreed++
				}
			}
		}
		if agreed == len(masters) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a minute, %d of %d masters say slot %d is on %s", agreed, len(masters), slot, target.Addr)
		}
	}
	d, err := s.Decide(ctx, Request{Limit: l, Key: "moving", Cost: 1})
	if err != nil || !d.Allowed || d.Remaining != 9 {
		t.Fatalf("a request for a moved slot: %+v, %v", d, err)
	}
	if st := s.Stats(); st.Redirects != 1 {
		t.Fatalf("stats %+v, want one redirect", st)
	}
	if n, err := target.Client(t).Exists(ctx, key).Result(); err != nil || n != 1 {
		t.Fatalf("the bucket is not on the slot's new master %s: %d, %v", target.Addr, n, err)
	}
}

// Ensure that a batch sent to one master with a key of another master's
// slot (the slot moved since the Store read the map) decides that request
// through the Cluster client, which follows the redirection, and every
// other request of the batch on its master, each once.
func TestClusterBatchOtherMaster(t *testing.T) {
	c := redistest.StartCluster(t)
	ctx := context.Background()
	s := newStore(t, Options{Addrs: c.Addrs(), Timeout: 10 * time.Second})
	l := tokenBucket(10, hour)
	p := s.prepare(l, 0)
	rkey := func(k string) string { return string(AppendKey(nil, s.Prefix(), &l, k)) }
	keys := spreadKeys(t, s, 12)
	home, err := s.cluster.MasterForKey(ctx, rkey(keys[0]))
	if err != nil {
		t.Fatal(err)
	}
	sh, err := s.shardFor(ctx, rkey(keys[0]))
	if err != nil {
		t.Fatal(err)
	}
	// The batch: keys of the first key's master, and one of another.
	var batch []*call
	var elsewhere string
	for _, k := range keys {
		m, err := s.cluster.MasterForKey(ctx, rkey(k))
		if err != nil {
			t.Fatal(err)
		}
		if m.Options().Addr != home.Options().Addr {
			if elsewhere != "" {
				continue
			}
			elsewhere = k
		}
		r := Request{Limit: l, Key: k, Cost: 1}
		key, args := r.args(s.prefix, p, 0)
		batch = append(batch, &call{ctx: ctx, alg: p.g, key: [1]string{key}, args: args, base: len(args), done: make(chan struct{})})
	}
	if elsewhere == "" || len(batch) < 3 {
		t.Fatalf("keys %v: want some on the first key's master and one elsewhere", keys)
	}
	s.send(sh, batch)
	for _, c := range batch {
		<-c.done
		var d bucket.Decision
		if c.err == nil {
			c.err = parseReply(c.v, &l, &d)
		}
		if c.err != nil || !d.Allowed || d.Remaining != 9 {
			t.Fatalf("%s: %+v, %v; want allowed with 9 left", c.key[0], d, c.err)
		}
	}
	if st := s.Stats(); st.Redirects != 1 || st.RoundTrips != 1+st.ScriptLoads {
		t.Fatalf("stats %+v, want one round trip (and the library's load) and one redirect", st)
	}
	if n, err := s.cluster.Exists(ctx, rkey(elsewhere)).Result(); err != nil || n != 1 {
		t.Fatalf("the bucket of %s is not on its master: %d, %v", elsewhere, n, err)
	}
}
