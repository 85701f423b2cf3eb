package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clients/go/sluice"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/global"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/proto"
)

// Ensure that a global concurrency limit holds its leases in Redis: two
// sidecars share a limit of 2 (leased for an hour); a third lease is
// denied on either; a RELEASE frees a slot for the other sidecar; a
// connection that closes gives its leases back through its sidecar, at
// once; and the leases of a sidecar that stops (of a limit leased for 2 s)
// free at their lease time, not before.
func TestGlobal_concurrency(t *testing.T) {
	redis := redistest.Start(t)
	const text = `limits:
  jobs: {limit: "concurrency:limit=2,lease=1h", scope: global, on_unavailable: closed}
  short: {limit: "concurrency:limit=2,lease=2s", scope: global, on_unavailable: closed}
`
	a, b := startGlobal(t, redis.Addr, text, patient), startGlobal(t, redis.Addr, text, patient)
	ctx := context.Background()
	limit, key := sluice.Limit{Name: "jobs"}, "k"
	lease := func(c *sluice.Client) sluice.Lease {
		t.Helper()
		ls, err := c.Lease(ctx, limit, key)
		if err != nil {
			t.Fatal(err)
		}
		return ls
	}
	ca, cb := dialStrict(t, a), dialStrict(t, b)
	l1, l2 := lease(ca), lease(cb)
	if !l1.Allowed || !l2.Allowed || l1.ID == 0 || l2.ID == 0 {
		t.Fatalf("the first two leases: %+v %+v, want both granted", l1, l2)
	}
	if l3 := lease(cb); l3.Allowed || l3.ID != 0 {
		t.Fatalf("a third lease across the sidecars: %+v, want denied", l3)
	}
	if ok, err := l2.Release(); !ok || err != nil {
		t.Fatalf("release: %v %v, want released", ok, err)
	}
	l4 := lease(ca) // through the other sidecar
	if !l4.Allowed {
		t.Fatalf("a lease after a release: %+v, want granted", l4)
	}
	// ca holds l1 and l4; closing it gives both back through sidecar a.
	ca.Close()
	var got []sluice.Lease
	for deadline := time.Now().Add(time.Minute); len(got) < 2; {
		if ls := lease(cb); ls.Allowed {
			got = append(got, ls)
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("a closed connection's leases were not given back: %d free", len(got))
		}
		time.Sleep(time.Millisecond)
	}
	// Sidecar b's leases of the short limit outlive b only until their
	// lease time: Redis frees them then.
	limit, key = sluice.Limit{Name: "short"}, "s" // a bucket of its own: the same spec but the lease
	if l1, l2 := lease(cb), lease(cb); !l1.Allowed || !l2.Allowed {
		t.Fatalf("short leases: %+v %+v, want both granted", l1, l2)
	}
	start := time.Now()
	b.stop(t)
	cc := dialStrict(t, a)
	for !lease(cc).Allowed {
		if time.Since(start) > time.Minute {
			t.Fatal("a stopped sidecar's leases were not freed at their lease time")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if el := time.Since(start); el < 1900*time.Millisecond {
		t.Errorf("a stopped sidecar's lease freed after %v, before its lease time (2s)", el)
	}
}

// Ensure that a global concurrency limit refuses ACQUIRE and REFUND as a
// local one does, and that LEASE on another global limit is refused.
func TestGlobal_concurrencyOps(t *testing.T) {
	redis := redistest.Start(t)
	sc := startGlobal(t, redis.Addr, `limits:
  jobs: {limit: "concurrency:limit=2,lease=1h", scope: global}
  tb: {limit: "token_bucket:max=2,refill_time=1h", scope: global}
`)
	c := dialStrict(t, sc)
	ctx := context.Background()
	if _, err := c.Acquire(ctx, sluice.Limit{Name: "jobs"}, "k", 1); !errors.Is(err, sluice.ErrInvalidLimit) {
		t.Errorf("ACQUIRE of a global concurrency limit: %v, want an invalid limit", err)
	}
	if _, err := c.Lease(ctx, sluice.Limit{Name: "tb"}, "k"); !errors.Is(err, sluice.ErrInvalidLimit) {
		t.Errorf("LEASE of a global token bucket: %v, want an invalid limit", err)
	}
	if d, err := c.Peek(ctx, sluice.Limit{Name: "jobs"}, "k"); err != nil || d.Remaining != 2 {
		t.Errorf("PEEK of a global concurrency limit: %+v %v, want 2 free", d, err)
	}
}

// Ensure that PEEK of a global sliding_log and window_counters replies as
// the local algorithm does: a full log or window says when a request of 1
// passes.
func TestGlobal_peekExt(t *testing.T) {
	redis := redistest.Start(t)
	sc := startGlobal(t, redis.Addr, `limits:
  log: {limit: "sliding_log:limit=2,window=1h", scope: global}
  wc: {limit: "window_counters:limit=2,window=1h,counters=6", scope: global}
`, patient)
	c := dialStrict(t, sc)
	ctx := context.Background()
	for _, name := range []string{"log", "wc"} {
		l := sluice.Limit{Name: name}
		for range 2 {
			if d, err := c.Acquire(ctx, l, "k", 1); err != nil || !d.Allowed {
				t.Fatalf("%s: %+v %v", name, d, err)
			}
		}
		d, err := c.Peek(ctx, l, "k")
		if err != nil || d.Allowed || d.Remaining != 0 || d.RetryAfter < 50*time.Minute || d.RetryAfter > time.Hour+10*time.Minute {
			t.Errorf("%s: peek of a full bucket %+v %v, want denied, retry after about an hour", name, d, err)
		}
	}
}

// dialStrict returns a client of sc that waits 10 s and fails with an
// error, closed at cleanup.
func dialStrict(t *testing.T, sc *sidecar) *sluice.Client {
	t.Helper()
	c, err := sluice.Dial(sc.cfg.SocketPath, sluice.WithTimeout(10*time.Second), sluice.WithFailurePolicy(sluice.FailError))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Ensure that a LEASE and a RELEASE of a global concurrency limit that
// its outage policy decided (Redis stopped) say so, closed or local, in
// frames of version 5 as an ACQUIRE's decision does, and in no older
// frame (whose clients read the byte as a boolean); and that the Go client
// exposes it (a Lease's Decision.Outage, a pipelined Release's).
func TestGlobal_leaseOutageMark(t *testing.T) {
	redis := redistest.Start(t)
	sc := startGlobal(t, redis.Addr, `limits:
  closed: {limit: "concurrency:limit=8,lease=1h", scope: global, on_unavailable: closed}
  local: {limit: "concurrency:limit=8,lease=1h", scope: global, on_unavailable: local, fallback_share: 0.5}
`)
	c := dial(t, sc)
	key := []byte("k")
	lease := func(v uint8, name string) proto.Result {
		t.Helper()
		_, rs := c.sendVersion(v, 1, func(b []byte) []byte { return proto.AppendLease(b, 0, proto.Named(name), key) })
		if len(rs) != 1 || rs[0].Status != proto.StatusOK {
			t.Fatalf("LEASE %s, version %d: %+v", name, v, rs)
		}
		return rs[0]
	}
	release := func(v uint8, name string, id uint64) proto.Result {
		t.Helper()
		_, rs := c.sendVersion(v, 1, func(b []byte) []byte { return proto.AppendRelease(b, 0, proto.Named(name), id, key) })
		if len(rs) != 1 || rs[0].Status != proto.StatusOK {
			t.Fatalf("RELEASE %s, version %d: %+v", name, v, rs)
		}
		return rs[0]
	}
	mark := func(v uint8, o proto.Outage) proto.Outage {
		if v < 5 {
			return proto.OutageNone
		}
		return o
	}
	inRedis := map[string]uint64{} // a lease each, taken in Redis
	for _, name := range []string{"closed", "local"} {
		r := lease(5, name)
		if !r.Decision.Allowed || r.Outage != proto.OutageNone {
			t.Fatalf("%s with Redis up: %+v, want granted, no outage mark", name, r)
		}
		inRedis[name] = r.Lease
	}
	redis.Kill()
	for v := uint8(3); v <= 5; v++ {
		if r := lease(v, "closed"); r.Decision.Allowed || r.Lease != 0 || r.Outage != mark(v, proto.OutageClosed) {
			t.Errorf("LEASE closed, version %d, Redis stopped: %+v; want denied, outage %q", v, r, mark(v, proto.OutageClosed))
		}
		if r := release(v, "closed", inRedis["closed"]); r.Released || r.Outage != mark(v, proto.OutageClosed) {
			t.Errorf("RELEASE closed, version %d, Redis stopped: %+v; want not released, outage %q", v, r, mark(v, proto.OutageClosed))
		}
		r := lease(v, "local") // this host's share: 4 slots
		if !r.Decision.Allowed || r.Lease == 0 || r.Outage != mark(v, proto.OutageLocal) {
			t.Fatalf("LEASE local, version %d, Redis stopped: %+v; want granted by the share, outage %q", v, r, mark(v, proto.OutageLocal))
		}
		if r := release(v, "local", r.Lease); !r.Released || r.Outage != mark(v, proto.OutageLocal) {
			t.Errorf("RELEASE local, version %d, Redis stopped: %+v; want released from the share, outage %q", v, r, mark(v, proto.OutageLocal))
		}
	}

	gc := dialStrict(t, sc)
	ctx := context.Background()
	if ls, err := gc.Lease(ctx, sluice.Limit{Name: "closed"}, "k"); err != nil || ls.Allowed || ls.Outage != "closed" {
		t.Errorf("the Go client's Lease of closed, Redis stopped: %+v, %v; want denied, Outage closed", ls, err)
	}
	ls, err := gc.Lease(ctx, sluice.Limit{Name: "local"}, "k")
	if err != nil || !ls.Allowed || ls.Outage != "local" {
		t.Fatalf("the Go client's Lease of local, Redis stopped: %+v, %v; want granted, Outage local", ls, err)
	}
	p := gc.Pipeline()
	p.Release(sluice.Limit{Name: "local"}, "k", ls.ID)
	if res, err := p.Exec(ctx); err != nil || !res[0].Released || res[0].Decision.Outage != "local" {
		t.Errorf("the Go client's pipelined Release of local, Redis stopped: %+v, %v; want released, Outage local", res, err)
	}
}

// Ensure that with --global-wait-replicas 1 a global concurrency limit
// never has more holders than its limit across a Cluster failover that
// loses the master's last writes: a LEASE is answered granted only once a
// replica holds it, so the promoted replica has every lease a client was
// granted. The replica's link to its master is cut (it is given
// credentials the master refuses, and its connection killed) while a
// second LEASE is asked for, so that the master's write of it cannot
// reach it; the master is then killed and the replica promoted. With the
// wait, that LEASE was denied (the closed policy: no replica acknowledged
// it), and the holders plus the slots the promoted master has free are
// the limit.
// (Without it, that LEASE is granted and lost with the master: the
// promoted master grants its slot again, 3 holders of a limit of 2.)
func TestGlobal_clusterWaitReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Redis Cluster")
	}
	cl := redistest.StartCluster(t)
	const text = `limits:
  jobs: {limit: "concurrency:limit=2,lease=1h", scope: global, on_unavailable: closed}
`
	onCluster := func(wait int) func(*global.Options) {
		return func(o *global.Options) {
			o.Addrs, o.WaitReplicas, o.Timeout = cl.Addrs(), wait, 500*time.Millisecond
		}
	}
	a := startGlobal(t, "", text, onCluster(1))
	c := dialStrict(t, a)
	ctx := context.Background()
	limit := sluice.Limit{Name: "jobs"}
	held := 0
	lease := func() sluice.Lease {
		t.Helper()
		ls, err := c.Lease(ctx, limit, "k")
		if err != nil {
			t.Fatal(err)
		}
		if ls.Allowed {
			held++
		}
		return ls
	}
	// The first lease, once the Store has warmed up (its first call
	// loads the scripts) and the cluster answers in time.
	for deadline := time.Now().Add(time.Minute); !lease().Allowed; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no lease granted in a minute")
		}
	}
	m := masterOf(t, cl, "k")
	r := cl.ReplicaOf(m)
	cutReplica(t, m, r)
	ls := lease() // written on the master, never on its replica
	m.Kill()
	if ls.Allowed || ls.Outage != "closed" {
		t.Errorf("a lease its master's replica could not acknowledge: %+v, want denied by the closed policy", ls)
	}
	t.Logf("replica %s promoted after %v", r.Addr, cl.WaitFailover(t, r))
	// The promoted master has no replica: a sidecar without the wait
	// reads what it holds.
	b := startGlobal(t, "", text, onCluster(0))
	var free int64
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		d, err := dialStrict(t, b).Peek(ctx, limit, "k")
		if err == nil && d.Outage == "" {
			free = d.Remaining
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the promoted master did not answer: %+v, %v", d, err)
		}
	}
	t.Logf("%d leases held by clients, %d slots free on the promoted master", held, free)
	if int64(held)+free > 2 {
		t.Errorf("%d leases held and %d slots free after the failover: more holders than the limit, 2, can be granted", held, free)
	}
}

// cutReplica cuts the replication link from master m to its replica r
// until m dies: r is given credentials m refuses, and its connection is
// killed; cutReplica returns once m has no replica connected.
func cutReplica(t *testing.T, m, r *redistest.Node) {
	t.Helper()
	ctx := context.Background()
	rc, mc := r.Client(t), m.Client(t)
	if err := rc.ConfigSet(ctx, "masteruser", "nobody").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.ConfigSet(ctx, "masterauth", "refused").Err(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		mc.Do(ctx, "client", "kill", "type", "replica")
		info, err := mc.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "connected_slaves:0") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("master %s keeps its replica: %s %v", m.Addr, info, err)
		}
	}
}

// Ensure that a connection's lease cache decides each bucket from its own
// lease: one connection alternates between two keys of a leased limit, a
// limit of other lease settings on the same key and one that a reload
// replaces (the same settings, a new limit), and every bucket admits
// exactly its limit, no more.
func TestGlobal_leaseCacheBuckets(t *testing.T) {
	redis := redistest.Start(t)
	const text = `limits:
  a: {limit: "token_bucket:max=12,refill_time=1h,refill_amount=1", scope: global, lease: 5, lease_ttl: 1h}
  b: {limit: "token_bucket:max=13,refill_time=1h,refill_amount=1", scope: global, lease: 4, lease_ttl: 1h}
  r: {limit: "token_bucket:max=14,refill_time=1h,refill_amount=1", scope: global, lease: 5, lease_ttl: 1h}
`
	set, err := config.Parse("sluice.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	holder := config.NewHolder(set)
	redistest.QuietClientLogs()
	sc := start(t, Config{Limits: holder, Global: &global.Options{Addrs: []string{redis.Addr}, Timeout: 10 * time.Second}})
	c := dialStrict(t, sc)
	ctx := context.Background()
	buckets := []struct {
		name, key string
		limit     int
	}{{"a", "k1", 12}, {"a", "k2", 12}, {"b", "k1", 13}, {"r", "k1", 14}}
	admitted := make([]int, len(buckets))
	for round := range 20 {
		if round == 7 {
			reloaded, err := config.Parse("sluice.yaml", []byte(text)) // a new config.Limit for each name
			if err != nil {
				t.Fatal(err)
			}
			holder.Swap(reloaded)
		}
		for i, bk := range buckets {
			d, err := c.Acquire(ctx, sluice.Limit{Name: bk.name}, bk.key, 1)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				admitted[i]++
			}
		}
	}
	for i, bk := range buckets {
		if admitted[i] != bk.limit {
			t.Errorf("%s %s: %d admitted, want its limit, %d", bk.name, bk.key, admitted[i], bk.limit)
		}
	}
}

// Ensure that a batch of leased acquires, decided from the connection's
// lease, allocates nothing (with a local limit's acquires between them, as
// BenchmarkHandleGlobal sends): neither the lease's lookup nor the frame
// scan that looks for operations to send Redis.
func TestGlobal_leasedNoAllocs(t *testing.T) {
	s, handle := leasedBatches(t, "lease_ttl: 1h", 4, 4)
	handle() // the first lease, from Redis
	handle() // the connection's buffers and caches at their size
	// AllocsPerRun counts the whole process: the membership refresh (a
	// Redis call every second) would count on a host slow enough to take
	// a second over the runs. The lease needs no more of Redis.
	if err := s.global.members.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, handle); n > 0.05 {
		t.Errorf("a batch of 16 leased and 16 local acquires: %v allocations", n)
	}
	// 103 batches (AllocsPerRun runs one more), of which one acquire took
	// the lease and every other came from it.
	if st := s.global.stats(); st.LeaseGrants != 1 || st.LeaseLocal != 16*103-1 {
		t.Errorf("%d leases granted and %d acquires decided from them, want 1 and %d", st.LeaseGrants, st.LeaseLocal, 16*103-1)
	}
}
