package server

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/clients/go/sluice"
	"github.com/sluicehq/sluice/internal/global"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/proto"
)

// multiConfig has global limits of either outage policy, a local limit, a
// global list and a global concurrency limit, for MULTIs of global items.
const multiConfig = `limits:
  tight:
    limit: "token_bucket:max=10,refill_time=1h"
    scope: global
  loose:
    limit: "fixed_window:limit=1000,window=1h"
    scope: global
  closed:
    limit: "token_bucket:max=5,refill_time=1h"
    scope: global
    on_unavailable: closed
  here: "token_bucket:max=5,refill_time=1h"
  conc:
    limit: "concurrency:limit=2,lease=1m"
    scope: global
resp:
  - match: "test:*"
    scope: local
  - match: "*"
    scope: global
`

// Ensure that two sidecars' native MULTIs of two global items on one hash
// tag, 32 at once, admit exactly the tighter item's limit and never
// consume the looser one's when denied; and that a global MULTI answers as
// a local one would: every item's decision, all or nothing. On one Redis
// and on the Cluster alike.
func TestGlobalMulti_native(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		r := redistest.Start(t)
		nativeMulti(t, func(o *global.Options) { o.Addrs = []string{r.Addr}; patient(o) })
	})
	t.Run("cluster", func(t *testing.T) {
		if testing.Short() {
			t.Skip("starts Redis Cluster")
		}
		if testTransport() == TransportGoroutines {
			t.Skip("what the Cluster decides does not depend on the transport: run once, on the default")
		}
		cl := redistest.StartCluster(t)
		nativeMulti(t, func(o *global.Options) { o.Addrs = cl.Addrs(); patient(o) })
	})
}

func nativeMulti(t *testing.T, redis func(*global.Options)) {
	scs := []*sidecar{startGlobal(t, "", multiConfig, redis), startGlobal(t, "", multiConfig, redis)}
	cs := []*sluice.Client{dialStrict(t, scs[0]), dialStrict(t, scs[1])}
	ctx := context.Background()
	items := []sluice.Item{
		{Limit: sluice.Limit{Name: "tight"}, Key: "{tenant42}:login", Cost: 1},
		{Limit: sluice.Limit{Name: "loose"}, Key: "{tenant42}:signup", Cost: 1},
	}
	var admitted, denied atomic.Int64
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			ok, ds, err := cs[i%2].Multi(ctx, items)
			switch {
			case err != nil:
				t.Error(err)
			case len(ds) != 2 || ds[0].Degraded || ds[1].Degraded:
				t.Errorf("%+v", ds)
			case ok != (ds[0].Allowed && ds[1].Allowed) || !ds[1].Allowed:
				t.Errorf("allowed %v with %+v", ok, ds)
			case ok:
				admitted.Add(1)
			default:
				denied.Add(1)
			}
		})
	}
	wg.Wait()
	if admitted.Load() != 10 || denied.Load() != 22 {
		t.Fatalf("admitted %d and denied %d of 32 MULTIs, want 10 and 22", admitted.Load(), denied.Load())
	}
	// The looser bucket gave only what the admitted MULTIs took.
	d, err := cs[0].Peek(ctx, sluice.Limit{Name: "loose"}, "{tenant42}:signup")
	if err != nil || d.Remaining != 990 {
		t.Fatalf("loose after 10 admitted MULTIs: %+v, %v; want 990 remaining", d, err)
	}
	// A denied MULTI: the tight item's decision as a local one's, the
	// loose item allowed and untouched.
	ok, ds, err := cs[1].Multi(ctx, items)
	if err != nil || ok || ds[0].Allowed || ds[0].Remaining != 0 || ds[0].Limit != 10 || ds[0].RetryAfter <= 0 ||
		ds[0].RetryAfter > time.Hour || !ds[1].Allowed || ds[1].Remaining != 989 || ds[1].Limit != 1000 {
		t.Fatalf("a denied MULTI: %v %+v, %v", ok, ds, err)
	}
}

// Ensure that a MULTI is refused, in words that say why and how to fix
// it, when it mixes global and local items, when its global items' keys
// lie in different slots, or when it holds a concurrency limit; and that
// the refusal consumed nothing.
func TestGlobalMulti_refused(t *testing.T) {
	r := redistest.Start(t)
	sc := startGlobal(t, r.Addr, multiConfig, patient)
	c := dialStrict(t, sc)
	ctx := context.Background()
	for _, tc := range []struct {
		items []sluice.Item
		want  string
	}{
		{[]sluice.Item{{Limit: sluice.Limit{Name: "tight"}, Key: "{a}:x", Cost: 1}, {Limit: sluice.Limit{Name: "here"}, Key: "{a}:y", Cost: 1}},
			"a MULTI cannot mix limits decided fleet-wide (scope: global) with limits decided on this host"},
		{[]sluice.Item{{Limit: sluice.Limit{Name: "here"}, Key: "{a}:y", Cost: 1}, {Limit: sluice.Limit{Name: "tight"}, Key: "{a}:x", Cost: 1}},
			"item 0: a MULTI cannot mix"},
		{[]sluice.Item{{Limit: sluice.Limit{Name: "tight"}, Key: "login", Cost: 1}, {Limit: sluice.Limit{Name: "loose"}, Key: "signup", Cost: 1}},
			`must share a hash tag, so that one Redis decides them together: item 1's key "signup" and item 0's key "login" lie in different Redis Cluster slots; give the keys a common tag in braces, as {tenant42}:login and {tenant42}:signup`},
		{[]sluice.Item{{Limit: sluice.Limit{Name: "tight"}, Key: "{a}:x", Cost: 1}, {Limit: sluice.Limit{Name: "conc"}, Key: "{a}:z", Cost: 1}},
			"item 1: concurrency limits take LEASE and RELEASE"},
	} {
		_, _, err := c.Multi(ctx, tc.items)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("MULTI %+v: %v; want an error with %q", tc.items, err, tc.want)
		}
	}
	d, err := c.Peek(ctx, sluice.Limit{Name: "tight"}, "{a}:x")
	if err != nil || d.Remaining != 10 {
		t.Errorf("a refused MULTI consumed: %+v, %v", d, err)
	}
}

// Ensure what a global MULTI does while Redis is down: an item whose
// outage policy is closed denies the whole MULTI; items whose policy is
// local are decided together on this host's share of each limit (all of
// it, with one sidecar), all or nothing, on the buckets the policy's single
// requests use.
func TestGlobalMulti_outage(t *testing.T) {
	r := redistest.Start(t)
	sc := startGlobal(t, r.Addr, multiConfig)
	r.Kill()
	c := dialStrict(t, sc)
	ctx := context.Background()
	ok, ds, err := c.Multi(ctx, []sluice.Item{{Limit: sluice.Limit{Name: "tight"}, Key: "{o}:a", Cost: 1}, {Limit: sluice.Limit{Name: "closed"}, Key: "{o}:b", Cost: 1}})
	if err != nil || ok || ds[0].Allowed || ds[1].Allowed {
		t.Fatalf("a MULTI with a closed item, Redis down: %v %+v, %v; want denied", ok, ds, err)
	}
	items := []sluice.Item{{Limit: sluice.Limit{Name: "tight"}, Key: "{o}:a", Cost: 4}, {Limit: sluice.Limit{Name: "loose"}, Key: "{o}:c", Cost: 1}}
	for i, want := range []bool{true, true, false} {
		ok, ds, err := c.Multi(ctx, items)
		if err != nil || ok != want || ds[1].Allowed != true {
			t.Fatalf("local MULTI %d, Redis down: %v %+v, %v; want allowed %v", i, ok, ds, err, want)
		}
	}
	d, err := c.Acquire(ctx, sluice.Limit{Name: "loose"}, "{o}:c", 0)
	if err != nil || d.Remaining != 998 {
		t.Fatalf("loose after two local MULTIs and a denied one: %+v, %v; want 998 remaining", d, err)
	}
	d, err = c.Acquire(ctx, sluice.Limit{Name: "tight"}, "{o}:a", 2)
	if err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("tight after two local MULTIs of 4: %+v, %v; want the last 2 allowed", d, err)
	}
}

// Ensure that a global MULTI's item decisions carry, in frames of version
// 7, the marks an ACQUIRE of the item would: fails closed for an item whose
// limit's outage policy is closed, whoever decided, and, while Redis is
// down, the policy that decided the whole MULTI (the strictest); and that
// in frames of version 6 each decision's first byte stays a boolean. The Go
// client exposes the marks.
func TestGlobalMulti_outageMarks(t *testing.T) {
	r := redistest.Start(t)
	sc := startGlobal(t, r.Addr, multiConfig, patient)
	c := dial(t, sc)
	multi := func(v uint8, names ...string) proto.Result {
		t.Helper()
		items := make([]proto.MultiItem, len(names))
		for i, name := range names {
			items[i] = proto.MultiItem{Flags: proto.FlagNamed, Limit: proto.Named(name), Cost: 1, Key: []byte(fmt.Sprintf("{m}:%d", i))}
		}
		_, rs := c.sendVersion(v, 1, func(b []byte) []byte { return proto.AppendMulti(b, 0, 0, items) })
		if len(rs) != 1 || rs[0].Status != proto.StatusOK || rs[0].NDecisions != len(names) {
			t.Fatalf("MULTI of %v in version %d: %+v", names, v, rs)
		}
		return rs[0]
	}
	check := func(what string, r proto.Result, want ...proto.Marks) {
		t.Helper()
		for i, m := range want {
			if r.Marks[i] != m {
				t.Errorf("%s: item %d marked %+v, want %+v", what, i, r.Marks[i], m)
			}
		}
	}
	closed, none := proto.Marks{FailsClosed: true}, proto.Marks{}
	check("Redis up, version 7", multi(7, "closed", "tight"), closed, none)
	check("Redis up, version 6", multi(6, "closed", "tight"), none, none)

	r.Kill()
	byPolicy := proto.Marks{Outage: proto.OutageClosed, FailsClosed: true}
	res := multi(7, "closed", "closed")
	if res.Allowed || res.Decisions[0].Allowed || res.Decisions[1].Allowed {
		t.Fatalf("a MULTI of closed items, Redis down: %+v; want denied", res)
	}
	check("Redis down, version 7", res, byPolicy, byPolicy)
	check("Redis down, version 7, a local item", multi(7, "tight", "closed"), proto.Marks{Outage: proto.OutageClosed}, byPolicy)
	check("Redis down, version 7, local items", multi(7, "tight", "loose"), proto.Marks{Outage: proto.OutageLocal}, proto.Marks{Outage: proto.OutageLocal})
	check("Redis down, version 6", multi(6, "closed", "closed"), none, none)

	cl := dialStrict(t, sc)
	ok, ds, err := cl.Multi(context.Background(), []sluice.Item{{Limit: sluice.Limit{Name: "closed"}, Key: "{m}:0", Cost: 1}, {Limit: sluice.Limit{Name: "tight"}, Key: "{m}:1", Cost: 1}})
	if err != nil || ok || len(ds) != 2 || ds[0].Outage != "closed" || !ds[0].FailsClosed || ds[1].Outage != "closed" || ds[1].FailsClosed || ds[0].Degraded {
		t.Fatalf("the Go client's MULTI, Redis down: %v %+v, %v; want both decided by the closed policy, the first failing closed", ok, ds, err)
	}
}

// Ensure that a Redis transaction of rate-limit commands on global keys of
// one hash tag is decided in Redis, shared by two sidecars, and answered
// exactly as the same transaction on local keys; that one mixing global
// and local keys, or global keys of different slots, is refused when
// queued and EXEC aborts; through go-redis and redis-cli.
func TestGlobalMulti_resp(t *testing.T) {
	r := redistest.Start(t)
	scs := []*sidecar{startGlobal(t, r.Addr, multiConfig, patient), startGlobal(t, r.Addr, multiConfig, patient)}
	ctx := context.Background()
	var rdbs []*redis.Client
	for _, sc := range scs {
		rdb := redis.NewClient(&redis.Options{Network: "unix", Addr: sc.cfg.RESPSocket, ReadTimeout: 20 * time.Second})
		t.Cleanup(func() { rdb.Close() })
		rdbs = append(rdbs, rdb)
	}
	tx := func(rdb *redis.Client, prefix string) []string {
		cmds, _ := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Do(ctx, "RL.REDUCE", prefix+"{u}:a", 3, 3600)
			p.Do(ctx, "RL.REDUCE", prefix+"{u}:b", 1, 3600, "TAKE", 1)
			p.Do(ctx, "CL.THROTTLE", prefix+"{u}:c", 2, 1, 3600)
			return nil
		})
		if len(cmds) != 3 {
			t.Fatalf("%d replies to a transaction of 3", len(cmds))
		}
		var out []string
		for _, c := range cmds {
			v, err := c.(*redis.Cmd).Result()
			if cl, ok := v.([]any); ok && len(cl) == 5 {
				v = cl[:3] // CL.THROTTLE's times are the clocks' (Redis's, this host's)
			}
			out = append(out, strings.TrimSpace(strings.Join([]string{toString(v), toString(err)}, " ")))
		}
		return out
	}
	for i := range 4 {
		local := tx(rdbs[0], "test:")
		global := tx(rdbs[i%2], "")
		if strings.Join(local, "|") != strings.Join(global, "|") {
			t.Fatalf("transaction %d: global %q, local %q", i, global, local)
		}
	}
	// Mixed, and across slots: refused when queued, EXEC aborts.
	for _, keys := range [][2]string{{"test:{u}:a", "{u}:a"}, {"{u}:a", "test:{u}:a"}, {"login", "signup"}} {
		_, err := rdbs[0].TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Do(ctx, "RL.REDUCE", keys[0], 3, 3600)
			p.Do(ctx, "RL.REDUCE", keys[1], 3, 3600)
			return nil
		})
		if err == nil || !strings.Contains(err.Error(), "EXECABORT") {
			t.Errorf("a transaction of %q: %v, want EXECABORT", keys, err)
		}
	}
	if n, err := rdbs[0].Do(ctx, "RL.REDUCE", "login", 3, 3600).Int64(); err != nil || n != 3 {
		t.Errorf("an aborted transaction changed login: %d, %v", n, err)
	}
	// redis-cli: the refusals' words, and a transaction decided fleet-wide.
	cli := redisTool(t, "redis-cli")
	run := func(script string) string {
		c := exec.Command(cli, "-s", scs[1].cfg.RESPSocket)
		c.Stdin = strings.NewReader(script)
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli: %v\n%s", err, out)
		}
		return string(out)
	}
	out := run("MULTI\nRL.REDUCE login 3 3600\nRL.REDUCE signup 3 3600\nEXEC\n")
	if !strings.Contains(out, "CROSSSLOT the keys of a transaction decided fleet-wide must share a hash tag") || !strings.Contains(out, "EXECABORT") {
		t.Errorf("redis-cli, a transaction across slots:\n%s", out)
	}
	out = run("MULTI\nRL.REDUCE {cli}:a 2 3600\nRL.REDUCE test:x 3 3600\nEXEC\n")
	if !strings.Contains(out, `a transaction cannot mix keys decided fleet-wide (the global route "*") with keys decided on this host`) {
		t.Errorf("redis-cli, a mixed transaction:\n%s", out)
	}
	out = run("MULTI\nRL.REDUCE {cli}:a 2 3600\nRL.REDUCE {cli}:b 5 3600 TAKE 2\nEXEC\n")
	if want := "OK QUEUED QUEUED 2 5"; strings.Join(strings.Fields(out), " ") != want {
		t.Errorf("redis-cli, a transaction decided fleet-wide:\n%s\nwant\n%s", out, want)
	}
	if n, err := rdbs[0].Do(ctx, "RL.REDUCE", "{cli}:b", 5, 3600, "TAKE", 0).Int64(); err != nil || n != 3 {
		t.Errorf("{cli}:b on the other sidecar after the transaction took 2: %d, %v; want 3", n, err)
	}
}

// toString formats a reply or an error for comparison.
func toString(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case error:
		return x.Error()
	}
	return fmt.Sprint(v)
}

// Ensure that a frame's operations on a bucket are decided in the frame's
// order around a MULTI of global limits: the scan that decides a frame's
// global operations ahead stops at the MULTI, so an ACQUIRE after it sees
// what it consumed, and one before it what was there before.
func TestGlobalMulti_frameOrder(t *testing.T) {
	r := redistest.Start(t)
	sc := startGlobal(t, r.Addr, multiConfig, patient)
	c := dial(t, sc)
	acq := func(b []byte, key string) []byte {
		return proto.AppendItem(b, proto.OpAcquire, 0, proto.Named("tight"), 1, 0, []byte(key))
	}
	b, start := proto.BeginFrame(nil, proto.KindRequest, 1)
	b = acq(b, "{f}:a")
	b = proto.AppendMulti(b, 0, 0, []proto.MultiItem{{Limit: proto.Named("tight"), Cost: 3, Key: []byte("{f}:a")}, {Limit: proto.Named("loose"), Cost: 1, Key: []byte("{f}:b")}})
	b = acq(b, "{f}:a")
	b = proto.EndFrame(b, start, 3)
	if _, err := c.c.Write(b); err != nil {
		t.Fatal(err)
	}
	h, rs := c.recv()
	if h.ID != 1 || len(rs) != 3 {
		t.Fatalf("frame %d with %d results, want frame 1 with 3", h.ID, len(rs))
	}
	if rs[0].Status != proto.StatusOK || rs[0].Decision.Remaining != 9 || rs[1].Code != proto.OpMulti || !rs[1].Allowed ||
		rs[1].NDecisions != 2 || rs[1].Decisions[0].Remaining != 6 || rs[2].Decision.Remaining != 5 {
		t.Fatalf("ACQUIRE, MULTI, ACQUIRE on one bucket: %+v", rs)
	}
}

// listConfig has global lists of either outage policy, and the lists'
// limits on their own (the same buckets: a bucket's Redis key is its
// limit's, whatever the name).
const listConfig = `limits:
  login:
    limit: ["token_bucket:max=10,refill_time=1h", "fixed_window:limit=1000,window=1h"]
    scope: global
  strict:
    limit: ["token_bucket:max=2,refill_time=1h", "fixed_window:limit=1000,window=1h"]
    scope: global
    on_unavailable: closed
  tb: {limit: "token_bucket:max=10,refill_time=1h", scope: global}
  fw: {limit: "fixed_window:limit=1000,window=1h", scope: global}
`

// Ensure that a global named list decides its limits all or nothing in
// Redis, shared by two sidecars: 32 concurrent ACQUIREs admit exactly the
// tighter limit's 10, and the looser limit's bucket is charged for those
// only; the decision reports the limit that denied and the least
// remaining; PEEK, REFUND and RESET apply to each limit; LEASE and a MULTI
// item naming it are refused.
func TestGlobalList(t *testing.T) {
	r := redistest.Start(t)
	scs := []*sidecar{startGlobal(t, r.Addr, listConfig, patient), startGlobal(t, r.Addr, listConfig, patient)}
	cs := []*sluice.Client{dialStrict(t, scs[0]), dialStrict(t, scs[1])}
	ctx := context.Background()
	login := sluice.Limit{Name: "login"}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			d, err := cs[i%2].Acquire(ctx, login, "alice", 1)
			switch {
			case err != nil || d.Degraded:
				t.Error(d, err)
			case d.Allowed:
				admitted.Add(1)
			case d.Limit != 10 || d.Remaining != 0 || d.RetryAfter <= 0:
				t.Errorf("a denial reports the token bucket: %+v", d)
			}
		})
	}
	wg.Wait()
	if admitted.Load() != 10 {
		t.Fatalf("admitted %d of 32, want exactly 10", admitted.Load())
	}
	d, err := cs[0].Peek(ctx, sluice.Limit{Name: "fw"}, "alice")
	if err != nil || d.Remaining != 990 {
		t.Fatalf("the window after 10 admitted: %+v, %v; want 990 remaining", d, err)
	}
	if d, err = cs[1].Peek(ctx, login, "alice"); err != nil || d.Allowed || d.Remaining != 0 || d.Limit != 10 {
		t.Errorf("peek of the list: %+v, %v", d, err)
	}
	// Each limit's decision too (protocol version 7): the bucket binds, the window allows.
	if len(d.Limits) != 2 || d.Bound != 0 || d.Limits[0].Allowed || d.Limits[0].Limit != 10 || !d.Limits[1].Allowed || d.Limits[1].Remaining != 990 {
		t.Errorf("the limits of the list's peek: %+v", d)
	}
	if d, err = cs[1].Refund(ctx, login, "alice", 2); err != nil || d.Remaining != 2 || d.Limit != 10 {
		t.Errorf("refund of 2 to each: %+v, %v", d, err)
	}
	if d, err = cs[0].Peek(ctx, sluice.Limit{Name: "fw"}, "alice"); err != nil || d.Remaining != 992 {
		t.Errorf("the window after the refund: %+v, %v; want 992", d, err)
	}
	if existed, err := cs[0].Reset(ctx, login, "alice"); err != nil || !existed {
		t.Errorf("reset: %v, %v", existed, err)
	}
	if d, err = cs[0].Peek(ctx, sluice.Limit{Name: "tb"}, "alice"); err != nil || d.Remaining != 10 {
		t.Errorf("the bucket after the reset: %+v, %v", d, err)
	}
	if _, err := cs[0].Lease(ctx, login, "alice"); err == nil || !strings.Contains(err.Error(), "a list of limits cannot be leased") {
		t.Errorf("lease of a global list: %v", err)
	}
	if _, _, err := cs[0].Multi(ctx, []sluice.Item{{Limit: login, Key: "alice", Cost: 1}}); err == nil || !strings.Contains(err.Error(), "cannot name a list") {
		t.Errorf("a MULTI item naming a global list: %v", err)
	}
}

// Ensure what a global list does while Redis is down: closed denies; local
// decides its limits all or nothing on this host's share (all of it, with
// one sidecar alone).
func TestGlobalList_outage(t *testing.T) {
	r := redistest.Start(t)
	sc := startGlobal(t, r.Addr, listConfig)
	r.Kill()
	c := dialStrict(t, sc)
	ctx := context.Background()
	if d, err := c.Acquire(ctx, sluice.Limit{Name: "strict"}, "bob", 1); err != nil || d.Allowed || d.Outage != "closed" || !d.FailsClosed || len(d.Limits) != 2 {
		t.Fatalf("a closed list, Redis down: %+v, %v; want the policy's denial, marked, with each limit's decision", d, err)
	}
	for i := range 12 {
		d, err := c.Acquire(ctx, sluice.Limit{Name: "login"}, "bob", 1)
		if err != nil || d.Allowed != (i < 10) || d.Outage != "local" {
			t.Fatalf("acquire %d of a local list, Redis down: %+v, %v", i, d, err)
		}
	}
	if d, err := c.Acquire(ctx, sluice.Limit{Name: "fw"}, "bob", 0); err != nil || d.Remaining != 990 {
		t.Fatalf("the window after 10 allowed and 2 denied by the policy: %+v, %v; want 990 remaining", d, err)
	}
}

// Ensure that a global list in a frame is decided once, in the frame's
// order: the scan that decides a frame's global operations ahead stops at
// it (deciding it there would take its first limit alone, and again when
// answered).
func TestGlobalList_frameOrder(t *testing.T) {
	r := redistest.Start(t)
	sc := startGlobal(t, r.Addr, listConfig, patient)
	c := dial(t, sc)
	acq := func(b []byte, name string) []byte {
		return proto.AppendItem(b, proto.OpAcquire, 0, proto.Named(name), 1, 0, []byte("carol"))
	}
	b, start := proto.BeginFrame(nil, proto.KindRequest, 1)
	b = proto.EndFrame(acq(acq(acq(b, "tb"), "login"), "tb"), start, 3)
	if _, err := c.c.Write(b); err != nil {
		t.Fatal(err)
	}
	h, rs := c.recv()
	if h.ID != 1 || len(rs) != 3 {
		t.Fatalf("frame %d with %d results, want frame 1 with 3", h.ID, len(rs))
	}
	for i, want := range []int64{9, 8, 7} {
		if rs[i].Status != proto.StatusOK || !rs[i].Decision.Allowed || rs[i].Decision.Remaining != want {
			t.Errorf("result %d: %+v, want %d remaining", i, rs[i], want)
		}
	}
}
