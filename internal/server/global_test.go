package server

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/clients/go/sluice"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/global"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/proto"
)

// startGlobal starts a sidecar whose limits are text, deciding the global
// ones in the Redis at addr (by default with the default timeout, 50 ms).
func startGlobal(t *testing.T, addr, text string, edit ...func(*global.Options)) *sidecar {
	t.Helper()
	set, err := config.Parse("sluice.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	redistest.QuietClientLogs()
	o := &global.Options{Addrs: []string{addr}}
	for _, e := range edit {
		e(o)
	}
	return start(t, Config{Limits: config.NewHolder(set), Global: o})
}

// patient gives Redis all the time a loaded host needs: no request of the
// test is left to the outage policy, so every count is exact.
func patient(o *global.Options) { o.Timeout = 10 * time.Second }

// dialDefault returns a Go client of sc in its default configuration
// (a 50 ms timeout, failing open), closed at cleanup. Under the race
// detector, which slows every step several times over, its timeout is 4
// times the default: the sidecar's answers scale with it.
func dialDefault(t *testing.T, sc *sidecar) *sluice.Client {
	t.Helper()
	var opts []sluice.Option
	if raceEnabled {
		opts = append(opts, sluice.WithTimeout(4*sluice.DefaultTimeout))
	}
	c, err := sluice.Dial(sc.cfg.SocketPath, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Ensure that a leased limit does not wait for a Redis that answers
// nothing: once its lease is spent and Redis has missed a few pipelines,
// its closed policy answers at once, each denial marked as the policy's.
func TestGlobal_leasedOutage(t *testing.T) {
	redis := redistest.Start(t)
	sc := startGlobal(t, redis.Addr, `limits:
  leased: {limit: "token_bucket:max=1000,refill_time=1h", scope: global, lease: 10, on_unavailable: closed}
  here: "token_bucket:max=1000000,refill_time=1h"
`)
	c := dialDefault(t, sc)
	ctx := context.Background()
	l, here := sluice.Limit{Name: "leased"}, sluice.Limit{Name: "here"}
	if d, err := c.Acquire(ctx, l, "k", 1); err != nil || !d.Allowed || d.Outage != "" {
		t.Fatalf("with Redis up: %+v, %v", d, err)
	}
	redis.Pause()
	// A local limit's answers, taken in turn with the leased limit's, are
	// what this host's load alone costs a round trip to the sidecar.
	var took, local []time.Duration
	allowed := 0
	for range 200 {
		start := time.Now()
		d, err := c.Acquire(ctx, l, "k", 1)
		took = append(took, time.Since(start))
		switch {
		case err != nil || d.Degraded:
			t.Fatalf("the client decided (%+v, %v): the sidecar did not answer in time", d, err)
		case d.Allowed:
			allowed++ // from the lease
		case d.Outage != "closed" || d.RetryAfter <= 0:
			t.Fatalf("a denial with Redis paused: %+v, want the closed policy's with a retry_after", d)
		}
		start = time.Now()
		if _, err := c.Acquire(ctx, here, "k", 1); err != nil {
			t.Fatal(err)
		}
		local = append(local, time.Since(start))
	}
	slices.Sort(took)
	slices.Sort(local)
	med, localMed := took[len(took)/2], local[len(local)/2]
	t.Logf("Redis paused: %d allowed from the lease; answers in %v (median), %v (90th), %v (max); a local limit's in %v (median)",
		allowed, med, took[len(took)*9/10], took[len(took)-1], localMed)
	if allowed != 9 {
		t.Errorf("%d allowed, want the 9 tokens left in the lease", allowed)
	}
	// Under 10 ms; on a host so loaded that a local limit's round trip
	// takes that long, no slower than twice that round trip: a wait on
	// Redis (its 50 ms timeout) fails either way.
	if med >= 10*time.Millisecond && med > 2*localMed+time.Millisecond {
		t.Errorf("median answer %v with Redis paused (a local limit's %v), want under 10ms", med, localMed)
	}
}

// Ensure that every decision of a global limit whose outage policy is
// closed says so (bit 4), whoever made it: Redis, a lease, or the policy;
// and no other limit's, nor any in a frame of a version before 4, whose
// clients cannot read it.
func TestGlobal_failsClosedMark(t *testing.T) {
	redis := redistest.Start(t)
	sc := startGlobal(t, redis.Addr, `limits:
  closed: {limit: "token_bucket:max=1000,refill_time=1h", scope: global, on_unavailable: closed}
  leased: {limit: "token_bucket:max=1000,refill_time=1h", scope: global, lease: 10, on_unavailable: closed}
  open: {limit: "token_bucket:max=1000,refill_time=1h", scope: global, on_unavailable: open}
  local: {limit: "token_bucket:max=1000,refill_time=1h", scope: global}
  here: "token_bucket:max=1000,refill_time=1h"
`, func(o *global.Options) { o.Timeout = time.Second }) // Redis healthy: no policy decision on a busy host
	c := dial(t, sc)
	ops := func(name string) func(b []byte) []byte {
		return func(b []byte) []byte {
			l := proto.Named(name)
			b = proto.AppendItem(b, proto.OpAcquire, 0, l, 1, 0, []byte("k"))
			b = proto.AppendItem(b, proto.OpPeek, 0, l, 0, 0, []byte("k"))
			return proto.AppendItem(b, proto.OpRefund, 0, l, 1, 0, []byte("k"))
		}
	}
	for _, name := range []string{"closed", "leased", "open", "local", "here"} {
		for _, v := range []uint8{2, 3, 4} {
			_, rs := c.sendVersion(v, 3, ops(name))
			for _, r := range rs {
				want := v >= 4 && (name == "closed" || name == "leased")
				if r.Status != proto.StatusOK || r.FailsClosed != want || r.Outage != proto.OutageNone {
					t.Errorf("%s, version %d, %v: %+v; want fails closed %v", name, v, r.Code, r, want)
				}
			}
		}
	}
	redis.Pause()
	defer redis.Resume()
	byPolicy := 0
	for range 20 { // spend the lease; then the policy decides
		_, rs := c.sendVersion(4, 1, func(b []byte) []byte {
			return proto.AppendItem(b, proto.OpAcquire, 0, proto.Named("leased"), 1, 0, []byte("k"))
		})
		r := rs[0]
		if r.Status != proto.StatusOK || !r.FailsClosed || !r.Decision.Allowed && r.Outage != proto.OutageClosed {
			t.Fatalf("leased, Redis paused: %+v; want the lease's or the closed policy's, marked as failing closed", r)
		}
		if r.Outage == proto.OutageClosed {
			byPolicy++
		}
	}
	if byPolicy == 0 {
		t.Errorf("20 requests on a lease of 10 with Redis paused: none decided by the closed policy")
	}
}

// Ensure that through the default Go client a closed limit is never
// admitted by the client's own fail-open when Redis is slow (a proxy
// delaying each request by 20 or 80 ms), whatever the scheduling: the
// sidecar answers each request by the middle of the client's time, by the
// closed policy if Redis is late, and a request whose answer comes too
// late all the same (this process or the sidecar stopped for longer than
// the margin) is denied by the client, which has heard that the limit
// fails closed. Two goroutines share the client, as two handlers of a
// service do.
func TestGlobal_slowRedis(t *testing.T) {
	for _, delay := range []time.Duration{20 * time.Millisecond, 80 * time.Millisecond} {
		t.Run(delay.String(), func(t *testing.T) {
			redis := redistest.Start(t)
			proxy := redistest.StartProxy(t, redis, delay)
			sc := startGlobal(t, proxy.Addr, `limits:
  closed: {limit: "token_bucket:max=100000,refill_time=1h", scope: global, on_unavailable: closed}
`)
			c := dialDefault(t, sc)
			l := sluice.Limit{Name: "closed"}
			// Before the first answer on a name, a client cannot know how
			// it fails: peek (which admits nothing) until one comes.
			for deadline := time.Now().Add(10 * time.Second); ; {
				d, err := c.Peek(context.Background(), l, "k")
				if err == nil && !d.Degraded && d.FailsClosed {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no answer of the sidecar in 10s: %+v, %v", d, err)
				}
			}
			var mu sync.Mutex
			var byRedis, byPolicy, degraded int
			var slowest time.Duration
			var wg sync.WaitGroup
			for range 2 {
				wg.Go(func() {
					for range 100 {
						start := time.Now()
						d, err := c.Acquire(context.Background(), l, "k", 1)
						mu.Lock()
						slowest = max(slowest, time.Since(start))
						switch {
						case err != nil:
							t.Errorf("%v", err)
						case d.Degraded && d.Allowed:
							t.Errorf("decision %+v: the client's fail-open admitted a request of a limit that fails closed", d)
						case d.Degraded && d.Outage == "closed":
							degraded++ // the sidecar's answer came too late; the client denied it
						case d.Outage == "closed" && !d.Allowed && d.FailsClosed:
							byPolicy++
						case d.Outage == "" && d.Allowed && d.FailsClosed:
							byRedis++
						default:
							t.Errorf("decision %+v: a closed limit's policy admits nothing, and every decision says the limit fails closed", d)
						}
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			t.Logf("Redis %v away: %d decided by Redis, %d by the closed policy, %d denied by the client (no answer in time); slowest answer %v",
				delay, byRedis, byPolicy, degraded, slowest)
			if delay > global.DefaultTimeout && byPolicy == 0 {
				t.Errorf("Redis %v away, beyond the sidecar's timeout: no decision of the closed policy", delay)
			}
		})
	}
}

// Ensure that the global requests of frames that arrive together share
// Redis's round trips: eight frames written at once, each an ACQUIRE of
// its own key, are decided together, not one after the other (which left
// the frames behind the first to their policy). Redis holds the first
// pipeline (CLIENT PAUSE WRITE) until all eight requests are queued, as a
// distant Redis would for a while: they take one or two pipelines. How
// long that takes a loaded host does not matter: Redis waits for it, and
// the sidecar waits up to a minute for Redis.
func TestGlobal_framesTogether(t *testing.T) {
	redis := redistest.Start(t)
	sc := startGlobal(t, redis.Addr, `limits:
  g: {limit: "token_bucket:max=100,refill_time=1h", scope: global, on_unavailable: closed}
`, func(o *global.Options) { o.Timeout = time.Minute })
	c, stats := dial(t, sc), dial(t, sc) // c's frames wait for Redis: the stats come by another connection
	if r := c.acquire("warm-up", proto.Named("g"), 1, 0); r.Status != proto.StatusOK || !r.Decision.Allowed {
		t.Fatalf("warm-up (loads the script): %+v", r)
	}
	trips, requests := stat(t, stats, "global_round_trips"), stat(t, stats, "global_requests")
	rc := redis.Client(t)
	ctx := context.Background()
	if err := rc.Do(ctx, "CLIENT", "PAUSE", 60000, "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	defer rc.Do(ctx, "CLIENT", "UNPAUSE")
	var b []byte
	for i := range 8 {
		var start int
		b, start = proto.BeginFrame(b, proto.KindRequest, uint32(100+i))
		b = proto.AppendItem(b, proto.OpAcquire, 0, proto.Named("g"), 1, 0, []byte(fmt.Sprint("k", i)))
		b = proto.EndFrame(b, start, 1)
	}
	if _, err := c.c.Write(b); err != nil {
		t.Fatal(err)
	}
	// The first pipeline is held: the others can reach the queue only if
	// they are not waiting for it.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		n := stat(t, stats, "global_requests") - requests
		if n == 8 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("with Redis holding the first pipeline, %d of the 8 frames' requests were queued after 30s: the frames wait for each other", n)
		}
	}
	if err := rc.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		h, rs := c.recv()
		if h.ID != uint32(100+i) || rs[0].Status != proto.StatusOK || !rs[0].Decision.Allowed || rs[0].Outage != proto.OutageNone {
			t.Fatalf("frame %d: %+v %+v, want Redis's decision, allowed", i, h, rs[0])
		}
	}
	if n := stat(t, stats, "global_round_trips") - trips; n > 2 {
		t.Errorf("8 frames written together took %d round trips to Redis, want 1 or 2", n)
	}
}

// Ensure an event loop does not wait for Redis: with Redis holding a
// global request's call (CLIENT PAUSE WRITE parks it), another connection
// that a sidecar with one loop serves is still answered at once: the
// native connection that sent the global request hands the loop over
// before it waits (loop_handoffs), whichever way its request goes to Redis:
// an exact acquire (decided by the scan of its frames), a peek, and a
// leased acquire that renews its lease, and then another connection's
// acquire of that lease, which waits for the renewal off the loop too.
func TestGlobal_loopNotHeldByRedis(t *testing.T) {
	for _, transport := range []string{TransportEpoll, TransportAuto} {
		t.Run(transport, func(t *testing.T) { testLoopNotHeldByRedis(t, transport) })
	}
}

func testLoopNotHeldByRedis(t *testing.T, transport string) {
	redis := redistest.Start(t)
	set, err := config.Parse("sluice.yaml", []byte(`limits:
  g: {limit: "token_bucket:max=10,refill_time=1h", scope: global}
  l: {limit: "token_bucket:max=10,refill_time=1h", scope: global, lease: 3}
`))
	if err != nil {
		t.Fatal(err)
	}
	redistest.QuietClientLogs()
	sc := start(t, Config{Limits: config.NewHolder(set), Transport: transport, Loops: 1,
		Global: &global.Options{Addrs: []string{redis.Addr}, Timeout: time.Minute}})
	a, b, c := dial(t, sc), dial(t, sc), dial(t, sc)
	op := func(code proto.Opcode, name string) func(p []byte) []byte {
		return func(p []byte) []byte { return proto.AppendItem(p, code, 0, proto.Named(name), 1, 0, []byte("k")) }
	}
	for _, o := range []func(p []byte) []byte{op(proto.OpAcquire, "g"), op(proto.OpAcquire, "l"), op(proto.OpAcquire, "l"), op(proto.OpAcquire, "l")} {
		if r := a.do(o); r.Status != proto.StatusOK || !r.Decision.Allowed {
			t.Fatalf("before the pause: %+v", r)
		}
	} // l's lease of 3 is spent: its next acquire renews it
	rc := redis.Client(t)
	ctx := context.Background()
	defer rc.Do(ctx, "CLIENT", "UNPAUSE")
	local := func(what string) {
		t.Helper()
		within(t, 10*time.Second, "a local request beside "+what, func() {
			if r := b.acquire("local", tb10, 1, 0); r.Status != proto.StatusOK || !r.Decision.Allowed {
				t.Fatalf("a local request beside %s: %+v", what, r)
			}
		})
	}
	handoffs := stat(t, b, "loop_handoffs")
	for _, tc := range []struct {
		what string
		op   func(p []byte) []byte
		peek bool
	}{
		{"an exact acquire", op(proto.OpAcquire, "g"), false},
		{"a peek", op(proto.OpPeek, "g"), true},
		{"a lease's renewal", op(proto.OpAcquire, "l"), false},
	} {
		if err := rc.Do(ctx, "CLIENT", "PAUSE", 60000, "WRITE").Err(); err != nil {
			t.Fatal(err)
		}
		a.send(1, tc.op)
		waitHeld(t, rc) // the sidecar has sent it
		local(tc.what)
		want := handoffs + 1
		if tc.what == "a lease's renewal" {
			// The lease is busy with Redis: another connection's acquire
			// of it waits off the loop as well.
			c.send(1, tc.op)
			local("an acquire of a lease being renewed")
			want++
		}
		if n := stat(t, b, "loop_handoffs"); n != want {
			t.Errorf("%s: loop_handoffs = %d, want %d: the loop did not hand itself over", tc.what, n, want)
		}
		handoffs = want
		if err := rc.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
			t.Fatal(err)
		}
		if _, rs := a.recv(); len(rs) != 1 || rs[0].Status != proto.StatusOK || !tc.peek && !rs[0].Decision.Allowed {
			t.Fatalf("%s: %+v", tc.what, rs)
		}
		if tc.what == "a lease's renewal" {
			if _, rs := c.recv(); len(rs) != 1 || rs[0].Status != proto.StatusOK || !rs[0].Decision.Allowed {
				t.Fatalf("the acquire of a lease being renewed: %+v", rs)
			}
		}
	}
	// Back on the loop: decided from the renewed lease (its third token), in place.
	if r := c.do(op(proto.OpAcquire, "l")); r.Status != proto.StatusOK || !r.Decision.Allowed {
		t.Fatalf("after the renewal: %+v", r)
	}
	if n := stat(t, b, "loop_handoffs"); n != handoffs {
		t.Errorf("loop_handoffs = %d after an acquire from a lease, want %d", n, handoffs)
	}
}

// waitHeld waits until the paused Redis that rc speaks to holds one call of
// another client (CLIENT PAUSE WRITE parks it: INFO counts it blocked).
func waitHeld(t *testing.T, rc *redis.Client) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		info, err := rc.Info(context.Background(), "clients").Result()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(info, "blocked_clients:1") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis never held the sidecar's call:\n%s", info)
		}
	}
}

// Ensure an operation decideGlobals decoded is answered as the frame's own
// decoding would give it: keep and load carry every field of proto.Op, of
// every operation (a MULTI's items too, and no item of an earlier MULTI
// is left behind).
func TestScannedOp(t *testing.T) {
	head := reflect.TypeFor[scannedOp]()
	for f := range reflect.TypeFor[proto.Op]().Fields() {
		if f.Name == "Items" {
			continue // frameGlobals.items
		}
		if _, ok := head.FieldByNameFunc(func(n string) bool { return strings.EqualFold(n, f.Name) }); !ok &&
			!(f.Name == "N" || f.Name == "At") {
			t.Errorf("proto.Op.%s is not kept by scannedOp", f.Name)
		}
	}
	tb := proto.TokenBucketLimit(10, time.Minute, 10)
	items := []proto.MultiItem{
		{Limit: tb, Cost: 1, Key: []byte("a")},
		{Limit: proto.Named("login"), Cost: 2, Key: []byte("b"), Flags: proto.FlagStrict},
		{Limit: tb, Cost: 3, Key: []byte("c")},
	}
	var body []byte
	body = proto.AppendItem(body, proto.OpAcquire, proto.FlagDeadline|proto.FlagShadow, proto.Named("login"), 2, 1_700_000_000_000_000_000, []byte("alice"))
	body = proto.AppendMulti(body, proto.FlagAt, 1_700_000_000_000_000_001, items)
	body = proto.AppendItem(body, proto.OpPeek, proto.FlagAt, tb, 0, 1_700_000_000_000_000_002, []byte("bob"))
	body = proto.AppendMulti(body, 0, 0, items[:1])
	body = proto.AppendItem(body, proto.OpRefund, proto.FlagSmyte, tb, 4, 0, []byte("carol"))
	body = proto.AppendItem(body, proto.OpReset, 0, proto.Named("login"), 0, 0, []byte("dave"))
	body = proto.AppendLease(body, 0, proto.Named("jobs"), []byte("eve"))
	body = proto.AppendRelease(body, 0, proto.Named("jobs"), 77, []byte("eve"))
	body = proto.AppendScan(body, 5, 100, []byte("user:"))
	body = proto.AppendPing(body)
	body = proto.AppendStats(body)
	body = proto.AppendHello(body)
	body = proto.AppendRegister(body, proto.OpRegCAS, 5, 6, int64(time.Minute), []byte("frank"))
	body = proto.AppendRegister(body, proto.OpRegSet, 0, 7, int64(time.Hour), []byte("grace"))
	var fg frameGlobals
	var decoded, loaded proto.Op
	loaded.Items[2].Key = []byte("stale") // as an earlier frame's MULTI leaves it
	loaded.NItems = 3
	for n := 0; len(body) > 0; n++ {
		rest, err := proto.DecodeOpVersion(body, proto.Version, &decoded)
		if err != nil {
			t.Fatalf("operation %d: %v", n, err)
		}
		body = rest
		fg.keep(&decoded)
		fg.load(&loaded)
		if !reflect.DeepEqual(decoded, loaded) {
			t.Errorf("operation %d (%v): loaded\n%+v\nwant\n%+v", n, decoded.Code, loaded, decoded)
		}
	}
}

// Ensure that frames with global operations, which the scan decodes before
// they are answered, are answered as the frames say, in one write: global
// and local operations mixed in a frame, an error among them, a MULTI and
// a PING; and a frame with bytes after its last operation, which the scan
// leaves for the frame's own decoding to refuse, still has its global
// operation answered before the connection closes.
func TestGlobal_framesScanned(t *testing.T) {
	redis := redistest.Start(t)
	sc := startGlobal(t, redis.Addr, `limits:
  g: {limit: "token_bucket:max=3,refill_time=1h", scope: global}
  l: {limit: "token_bucket:max=3,refill_time=1h"}
`, func(o *global.Options) { o.Timeout = 5 * time.Second })
	c := dial(t, sc)
	frame := func(b []byte, id uint32, n int, ops func([]byte) []byte) []byte {
		b, start := proto.BeginFrame(b, proto.KindRequest, id)
		return proto.EndFrame(ops(b), start, n)
	}
	acq := func(b []byte, f proto.Flags, name, key string) []byte {
		return proto.AppendItem(b, proto.OpAcquire, f, proto.Named(name), 1, 0, []byte(key))
	}
	tb := proto.TokenBucketLimit(3, time.Hour, 3)
	var b []byte
	b = frame(b, 1, 6, func(b []byte) []byte {
		b = acq(b, 0, "g", "k")
		b = acq(b, 0, "l", "k")
		b = proto.AppendItem(b, proto.OpAcquire, proto.FlagAt, proto.Named("g"), 1, 1_700_000_000_000_000_000, []byte("k"))
		b = proto.AppendMulti(b, 0, 0, []proto.MultiItem{{Limit: tb, Cost: 1, Key: []byte("m")}, {Limit: tb, Cost: 1, Key: []byte("n")}})
		b = proto.AppendPing(b)
		return acq(b, 0, "g", "k")
	})
	// Frames in flight at once are decided at once: a bucket of their own.
	b = frame(b, 2, 2, func(b []byte) []byte { return acq(acq(b, 0, "g", "k2"), 0, "g", "k2") })
	b = frame(b, 3, 1, func(b []byte) []byte { return append(acq(b, 0, "g", "k3"), 0) }) // a byte too many
	if _, err := c.c.Write(b); err != nil {
		t.Fatal(err)
	}
	h, rs := c.recv()
	if h.ID != 1 || len(rs) != 6 {
		t.Fatalf("frame %d with %d results, want frame 1 with 6", h.ID, len(rs))
	}
	for i, want := range []struct {
		st        proto.Status
		allowed   bool
		remaining int64
	}{{proto.StatusOK, true, 2}, {proto.StatusOK, true, 2}, {proto.StatusInvalidLimit, false, 0}, {proto.StatusOK, false, 0}, {proto.StatusOK, false, 0}, {proto.StatusOK, true, 1}} {
		r := rs[i]
		if r.Status != want.st || r.Code == proto.OpAcquire && r.Status == proto.StatusOK && (r.Decision.Allowed != want.allowed || r.Decision.Remaining != want.remaining) {
			t.Errorf("frame 1, result %d: %v %+v (%s), want %v allowed %v remaining %d", i, r.Status, r.Decision, r.Message, want.st, want.allowed, want.remaining)
		}
	}
	if rs[3].Code != proto.OpMulti || !rs[3].Allowed || rs[4].Code != proto.OpPing {
		t.Errorf("frame 1's MULTI and PING: %+v, %+v", rs[3], rs[4])
	}
	if h, rs = c.recv(); h.ID != 2 || len(rs) != 2 || rs[0].Decision.Remaining != 2 || rs[1].Decision.Remaining != 1 {
		t.Fatalf("frame %d: %+v, want frame 2: two tokens of three, in order", h.ID, rs)
	}
	if h, rs = c.recv(); h.ID != 3 || len(rs) != 1 || rs[0].Status != proto.StatusOK || rs[0].Decision.Remaining != 2 {
		t.Fatalf("frame %d: %+v, want frame 3's token", h.ID, rs)
	}
	if _, _, err := c.tryRecv(); err == nil {
		t.Fatal("the connection stays open after a frame with bytes after its last operation")
	}
}

// Ensure that a leased acquire is decided as of its batch's read only
// until a request of the batch waits: a lease valid when the batch was
// read but expired since (the batch waited for a lock or on Redis, which
// can take seconds) admits nothing.
func TestGlobal_leaseBatchTime(t *testing.T) {
	redis := redistest.Start(t)
	redistest.QuietClientLogs()
	set, err := config.Parse("sluice.yaml", []byte(`limits:
  l: {limit: "token_bucket:max=1000,refill_time=1h,refill_amount=1", scope: global, lease: 100, lease_ttl: 1ms}
`))
	if err != nil {
		t.Fatal(err)
	}
	l, _ := set.Lookup("l")
	g, err := newGlobalLimits(global.Options{Addrs: []string{redis.Addr}, Timeout: 10 * time.Second}, quiet(), t.TempDir()+"/leases")
	if err != nil {
		t.Fatal(err)
	}
	defer g.close()
	var st stream
	var cache leaseCache
	for range 20 { // the sweeper may return a lease before its end: try again
		arrived := time.Now()
		st.clock = arrived
		call := globalCall{g: g, l: l, arrived: arrived, cache: &cache, batch: &st}
		res, err := call.Decide(engineAcquire("k"))
		if err != nil || !res.Decision.Allowed {
			t.Fatal(res, err) // takes a lease of 100 tokens, for 1 ms from when it was asked for
		}
		// Past the lease's end: counted from Decide's return, not from
		// arrived, since a loaded host may take longer than the lease
		// between the two.
		for decided := time.Now(); time.Since(decided) < 5*time.Millisecond; {
			time.Sleep(time.Millisecond)
		}
		st.clock = arrived // as of arrived, the lease granted after it holds
		st.leaveLoop()     // but a request of the batch waited 5 ms
		r := engineAcquire("k")
		if d, ok := call.local(&r); ok && d.Allowed {
			t.Fatalf("admitted from a lease expired since the batch was read: %+v", d)
		}
	}
}

// engineAcquire is an ACQUIRE of 1 on key as a Remote receives it.
func engineAcquire(key string) engine.Request {
	return engine.Request{Op: proto.OpAcquire, Key: []byte(key), N: 1}
}

// Ensure that the clock a batch's requests are decided by (stream.wall)
// is the batch's: read again for each batch, and after a request of the
// batch waited, never an earlier batch's.
func TestStream_wallPerBatch(t *testing.T) {
	st := stream{s: &server{now: func() int64 { return 0 }}}
	old := time.Now().Add(-time.Hour)
	st.clock = old // an earlier batch's
	var first, afterWait time.Time
	st.handleBatch(func() {
		first = st.wall()
		if again := st.wall(); again != first {
			t.Errorf("the clock read twice in one batch: %v, then %v", first, again)
		}
		st.clock = old // as if the batch had been read an hour ago
		st.leaveLoop() // and a request of it waited
		afterWait = st.wall()
	})
	if time.Since(first) > time.Minute || time.Since(afterWait) > time.Minute {
		t.Fatalf("a batch decided by an old clock: %v at its start, %v after a wait (now %v)", first, afterWait, time.Now())
	}
}
