package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clients/go/sluice"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/proto"
)

var tb10 = sluice.TokenBucket(10, time.Hour, 1) // 10 tokens, 1 more per hour

// want is an expected decision; run checks one against it.
type want struct {
	allowed           bool
	remaining         int64
	retry, reset, dly time.Duration
}

func check(t *testing.T, what string, d sluice.Decision, err error, w want) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	got := want{d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter, d.Delay}
	if got != w || d.Degraded {
		t.Errorf("%s: got %+v (degraded %v), want %+v", what, got, d.Degraded, w)
	}
}

func TestClient_decisions(t *testing.T) {
	sc := startSidecar(t)
	c := dial(t, sc.cfg.SocketPath)
	cx := ctx(t)
	const h = time.Hour

	for i := range 3 {
		d, err := c.Acquire(cx, tb10, "login:alice", 1)
		check(t, fmt.Sprint("acquire ", i), d, err, want{true, int64(9 - i), -1, time.Duration(i+1) * h, 0})
		if d.Limit != 10 {
			t.Errorf("limit %d, want 10", d.Limit)
		}
	}
	// A peek reports the bucket as it stands, changing nothing.
	d, err := c.Peek(cx, tb10, "login:alice")
	check(t, "peek", d, err, want{true, 7, -1, 3 * h, 0})
	d, err = c.Refund(cx, tb10, "login:alice", 2)
	check(t, "refund 2 onto 7", d, err, want{true, 9, -1, h, 0})
	d, err = c.Acquire(cx, tb10, "login:alice", 11)
	check(t, "cost above max: never", d, err, want{false, 9, -1, h, 0})
	d, err = c.Acquire(cx, tb10, "login:alice", 10)
	check(t, "cost 10 with 9 left", d, err, want{false, 9, h, h, 0})
	d, err = c.Acquire(cx, tb10, "login:alice", 0)
	check(t, "cost 0 peeks", d, err, want{true, 9, -1, h, 0})

	existed, err := c.Reset(cx, tb10, "login:alice")
	if err != nil || !existed {
		t.Errorf("reset: %v, %v; want true", existed, err)
	}
	existed, err = c.Reset(cx, tb10, "login:alice")
	if err != nil || existed {
		t.Errorf("second reset: %v, %v; want false", existed, err)
	}
	d, err = c.Acquire(cx, tb10, "login:alice", 1)
	check(t, "after reset", d, err, want{true, 9, -1, h, 0})

	// A pacer spaces requests: the decision carries the wait.
	pace := sluice.Pacer(4, time.Second, time.Second)
	for i := range 3 {
		d, err := c.Acquire(cx, pace, "pace", 1)
		if err != nil || !d.Allowed || d.Delay != time.Duration(i)*250*time.Millisecond {
			t.Errorf("pacer %d: %+v, %v; want a delay of %v", i, d, err, time.Duration(i)*250*time.Millisecond)
		}
	}
}

// Ensure At, Strict and Smyte reach the sidecar.
func TestClient_requestOptions(t *testing.T) {
	sc := startSidecar(t)
	c := dial(t, sc.cfg.SocketPath)
	cx := ctx(t)
	at := func(d time.Duration) sluice.RequestOption { return sluice.At(time.Unix(0, t0).Add(d)) }

	// At: the bucket lives at the client's times, not the sidecar's.
	d, err := c.Acquire(cx, tb10, "replay", 5, at(2*time.Hour))
	check(t, "at +2h", d, err, want{true, 5, -1, 5 * time.Hour, 0})
	d, err = c.Acquire(cx, tb10, "replay", 1, at(3*time.Hour))
	check(t, "at +3h: one refill", d, err, want{true, 5, -1, 5 * time.Hour, 0})
	d, err = c.Peek(cx, tb10, "replay", at(4*time.Hour))
	check(t, "peek at +4h", d, err, want{true, 6, -1, 4 * time.Hour, 0})

	// Strict: emptying the bucket restarts its refill clock, so the refill
	// due at +1s comes at +1.5s.
	tb2 := sluice.TokenBucket(2, time.Second, 1)
	for _, key := range []string{"plain", "strict"} {
		var opts []sluice.RequestOption
		if key == "strict" {
			opts = append(opts, sluice.Strict())
		}
		c.Acquire(cx, tb2, key, 1, at(0))
		c.Acquire(cx, tb2, key, 1, append(opts, at(500*time.Millisecond))...)
		d, err := c.Acquire(cx, tb2, key, 1, at(time.Second))
		if err != nil || d.Allowed != (key == "plain") {
			t.Errorf("%s: at +1s: %+v, %v", key, d, err)
		}
	}

	// Smyte: a denial drains the bucket and reports the count before it.
	tb5 := sluice.TokenBucket(5, time.Hour, 1)
	c.Acquire(cx, tb5, "smyte", 3)
	d, err = c.Acquire(cx, tb5, "smyte", 3, sluice.Smyte())
	if err != nil || d.Allowed || d.Remaining != 2 {
		t.Errorf("smyte denial: %+v, %v; want denied with remaining 2", d, err)
	}
	d, err = c.Acquire(cx, tb5, "smyte", 1)
	if err != nil || d.Allowed {
		t.Errorf("after a smyte denial: %+v, %v; want denied (drained)", d, err)
	}
}

// A quota through the client and the sidecar: the period is the local day
// of its zone, a day of 23 hours across the spring DST change, and the
// reply's reset is the exact time to the local midnight.
func TestClient_quota(t *testing.T) {
	sc := startSidecar(t)
	c := dial(t, sc.cfg.SocketPath)
	cx := ctx(t)
	q, err := sluice.Quota(2, "day", "America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	noon := time.Date(2024, 3, 10, 12, 0, 0, 0, ny) // 2 a.m. did not happen that day
	for i := range 3 {
		d, err := c.Acquire(cx, q, "tenant:acme", 1, sluice.At(noon))
		if err != nil || d.Allowed != (i < 2) {
			t.Fatalf("request %d: %+v, %v", i, d, err)
		}
		if want := 12 * time.Hour; d.ResetAfter != want {
			t.Errorf("request %d: reset after %v, want %v", i, d.ResetAfter, want)
		}
	}
	d, err := c.Acquire(cx, q, "tenant:acme", 1, sluice.At(noon.Add(12*time.Hour)))
	if err != nil || !d.Allowed || d.Remaining != 1 {
		t.Errorf("at the next local midnight: %+v, %v; want a new day", d, err)
	}
	if _, err := sluice.Quota(1, "day", "Mars/Olympus_Mons"); err != nil {
		t.Fatalf("the spec is syntax: %v", err)
	}
	bad, _ := sluice.Quota(1, "day", "Mars/Olympus_Mons")
	if _, err := c.Acquire(cx, bad, "k", 1); !errors.Is(err, sluice.ErrInvalidLimit) || !strings.Contains(err.Error(), "unknown time zone") {
		t.Errorf("an unknown zone: %v, want an invalid limit naming it", err)
	}
}

func TestClient_multi(t *testing.T) {
	sc := startSidecar(t)
	c := dial(t, sc.cfg.SocketPath)
	cx := ctx(t)
	one := sluice.TokenBucket(1, time.Hour, 1)
	items := []sluice.Item{{Limit: tb10, Key: "ip:1", Cost: 1}, {Limit: one, Key: "acct:bob", Cost: 1}}

	allowed, ds, err := c.Multi(cx, items)
	if err != nil || !allowed || len(ds) != 2 || ds[0].Remaining != 9 || ds[1].Remaining != 0 {
		t.Fatalf("multi: %v %+v %v", allowed, ds, err)
	}
	allowed, ds, err = c.Multi(cx, items)
	if err != nil || allowed || !ds[0].Allowed || ds[1].Allowed || ds[1].RetryAfter != time.Hour {
		t.Fatalf("second multi: %v %+v %v; want denied by item 1", allowed, ds, err)
	}
	if d, _ := c.Acquire(cx, tb10, "ip:1", 0); d.Remaining != 9 {
		t.Errorf("a denied multi consumed: %+v", d)
	}
	// At applies to every item: an hour later acct:bob has its token back.
	allowed, _, err = c.Multi(cx, items, sluice.At(time.Unix(0, t0).Add(time.Hour)))
	if err != nil || !allowed {
		t.Errorf("multi an hour later: %v, %v", allowed, err)
	}
}

func TestClient_info(t *testing.T) {
	sc := startSidecar(t)
	c := dial(t, sc.cfg.SocketPath)
	cx := ctx(t)
	if err := c.Ping(cx); err != nil {
		t.Fatal(err)
	}
	h, err := c.Hello(cx)
	if err != nil || h.Version != proto.Version || h.SlotCount != 4096 || h.SlotSize != 128 || h.MaxMulti != proto.MaxMulti {
		t.Errorf("hello: %+v, %v", h, err)
	}
	c.Acquire(cx, tb10, "k", 1)
	c.Acquire(cx, tb10, "k", 20)
	st, err := c.Stats(cx)
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]uint64{"slot_count": 4096, "slot_size": 128, "used_slots": 1, "allowed": 1, "denied": 1, "connections_total": 1} {
		if st[name] != v {
			t.Errorf("stats[%q] = %d, want %d (all: %v)", name, st[name], v, st)
		}
	}
}

func TestClient_scan(t *testing.T) {
	sc := startSidecar(t)
	c := dial(t, sc.cfg.SocketPath)
	cx := ctx(t)
	var keys []string
	for i := range 7 {
		keys = append(keys, fmt.Sprintf("user:%d", i))
		c.Acquire(cx, tb10, keys[i], 1)
		c.Acquire(cx, tb10, fmt.Sprintf("ip:%d", i), 1)
	}
	var got []string
	cursor, calls := uint64(0), 0
	for {
		es, next, err := c.Scan(cx, "user:", cursor, 2)
		if err != nil {
			t.Fatal(err)
		}
		calls++
		if len(es) > 2 {
			t.Errorf("scan returned %d entries, asked for 2", len(es))
		}
		for _, e := range es {
			if e.Algorithm != proto.TokenBucket || !e.FreshAt.Equal(time.Unix(0, t0).Add(time.Hour)) {
				t.Errorf("entry %+v", e)
			}
			got = append(got, e.Key)
		}
		if next == 0 {
			break
		}
		cursor = next
	}
	slices.Sort(got)
	if !slices.Equal(got, keys) || calls < 4 {
		t.Errorf("scan listed %v in %d calls, want %v in at least 4", got, calls, keys)
	}
	all, _, err := c.Scan(cx, "", 0, 0)
	if err != nil || len(all) != 14 {
		t.Errorf("scan of everything: %d entries, %v; want 14", len(all), err)
	}
}

func TestClient_errors(t *testing.T) {
	sc := startSidecar(t)
	c := dial(t, sc.cfg.SocketPath, sluice.WithFailurePolicy(sluice.FailOpen))
	cx := ctx(t)

	// Statuses come back as *StatusError matching the sentinel, with the
	// sidecar's message; the failure policy does not hide them.
	_, err := c.Acquire(cx, sluice.TokenBucket(0, time.Hour, 1), "k", 1)
	var se *sluice.StatusError
	if !errors.Is(err, sluice.ErrInvalidLimit) || !errors.As(err, &se) || se.Status != proto.StatusInvalidLimit ||
		se.Op != proto.OpAcquire || se.Message == "" || !strings.HasPrefix(err.Error(), "invalid limit: ") {
		t.Errorf("max 0: %v (%#v)", err, se)
	}
	if _, err := c.Acquire(cx, tb10, "k", -1); !errors.Is(err, sluice.ErrInvalidCost) {
		t.Errorf("cost -1: %v", err)
	}
	if _, err := c.Refund(cx, tb10, "k", -1); !errors.Is(err, sluice.ErrInvalidCost) {
		t.Errorf("refund -1: %v", err)
	}
	if _, _, err := c.Multi(cx, []sluice.Item{{Limit: tb10, Key: "a", Cost: 1}, {Limit: sluice.GCRA(1, 0, time.Second), Key: "b", Cost: 1}}); !errors.Is(err, sluice.ErrInvalidLimit) {
		t.Errorf("multi with count 0: %v", err)
	}
	// What the sidecar's decoder would reject (closing the connection) is
	// refused before it is sent.
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"empty key", second(c.Acquire(cx, tb10, "", 1)), sluice.ErrInvalidKey},
		{"long key", second(c.Peek(cx, tb10, strings.Repeat("k", proto.MaxKeyLen+1))), sluice.ErrInvalidKey},
		{"zero limit", second(c.Acquire(cx, sluice.Limit{}, "k", 1)), sluice.ErrInvalidLimit},
		{"reset bad algorithm", second(c.Reset(cx, sluice.Limit{Algorithm: 9}, "k")), sluice.ErrInvalidLimit},
		{"no items", third(c.Multi(cx, nil)), sluice.ErrTooManyItems},
		{"17 items", third(c.Multi(cx, make([]sluice.Item, 17))), sluice.ErrTooManyItems},
		{"multi empty key", third(c.Multi(cx, []sluice.Item{{Limit: tb10}})), sluice.ErrInvalidKey},
		{"long prefix", third(c.Scan(cx, strings.Repeat("p", proto.MaxKeyLen+1), 0, 1)), sluice.ErrInvalidKey},
	} {
		if !errors.Is(tc.err, tc.want) || errors.Is(tc.err, sluice.ErrUnavailable) {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.want)
		}
	}
	// The connection survived all of it.
	if st, err := c.Stats(cx); err != nil || st["connections_total"] != 1 || st["malformed"] != 0 {
		t.Errorf("after the errors: %v, %v", st, err)
	}
}

func second[T any](_ T, err error) error        { return err }
func third[T, U any](_ T, _ U, err error) error { return err }

func TestClient_tableFullAndUnsupported(t *testing.T) {
	sc := startSidecar(t, func(c *server.Config) { c.Slots, c.SlotSize = 8, 64 })
	c := dial(t, sc.cfg.SocketPath)
	cx := ctx(t)
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		_, err = c.Acquire(cx, tb10, fmt.Sprint("key:", i), 1)
	}
	if !errors.Is(err, sluice.ErrTableFull) {
		t.Errorf("filling 8 slots: %v, want ErrTableFull", err)
	}
	if _, _, err := c.Scan(cx, "", 0, 10); !errors.Is(err, sluice.ErrUnsupported) {
		t.Errorf("scan without inline keys: %v, want ErrUnsupported", err)
	}
}

func TestParseLimit(t *testing.T) {
	for spec, want := range map[string]sluice.Limit{
		"token_bucket:max=10,refill_time=1h,refill_amount=1": sluice.TokenBucket(10, time.Hour, 1),
		"token_bucket:max=10,refill_time=1h":                 sluice.TokenBucket(10, time.Hour, 10),
		"gcra:burst=4,count=1,period=1s":                     sluice.GCRA(4, 1, time.Second),
		"fixed_window:limit=100,window=1m":                   sluice.FixedWindow(100, time.Minute),
		"sliding_window:limit=100,window=1m":                 sluice.SlidingWindow(100, time.Minute),
		"pacer:rate=4,period=1s,max_delay=2s":                sluice.Pacer(4, time.Second, 2*time.Second),
	} {
		l, err := sluice.ParseLimit(spec)
		if err != nil || l != want {
			t.Errorf("ParseLimit(%q) = %v, %v; want %v", spec, l, err, want)
		}
	}
	if _, err := sluice.ParseLimit("gcra:burst=x"); !errors.Is(err, sluice.ErrInvalidLimit) {
		t.Errorf("bad spec: %v", err)
	}
}

// 64 goroutines on one client, one key: exactly the limit is admitted.
func TestClient_concurrentOneKey(t *testing.T) {
	sc := startSidecar(t)
	c := dial(t, sc.cfg.SocketPath)
	cx := ctx(t)
	l := sluice.TokenBucket(500, time.Hour, 1)
	const goroutines, each = 64, 25
	var admitted, denied atomic.Int64
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				d, err := c.Acquire(cx, l, "shared", 1)
				switch {
				case err != nil:
					t.Error(err)
					return
				case d.Allowed:
					admitted.Add(1)
				default:
					denied.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if admitted.Load() != 500 || denied.Load() != goroutines*each-500 {
		t.Errorf("admitted %d, denied %d; want 500 and %d", admitted.Load(), denied.Load(), goroutines*each-500)
	}
}

// Concurrent callers share writes: the client writes many frames at once.
func TestClient_pipelining(t *testing.T) {
	sc := startSidecar(t)
	var writes, dials atomic.Int64
	c := dial(t, sc.cfg.SocketPath, sluice.WithDial(countingDial(&writes, &dials)))
	cx := ctx(t)
	const goroutines, each = 64, 50
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				if _, err := c.Acquire(cx, tb10, fmt.Sprint("k", g, ":", i%3), 1); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	calls, w := int64(goroutines*each), writes.Load()
	t.Logf("%d calls in %d writes (%.1f frames per write)", calls, w, float64(calls)/float64(w))
	if w > calls/2 || dials.Load() != 1 {
		t.Errorf("%d calls took %d writes and %d connections; want at most %d writes on one connection", calls, w, dials.Load(), calls/2)
	}
	st, err := c.Stats(cx)
	if err != nil || st["frames"] != uint64(calls)+1 {
		t.Errorf("the sidecar saw %d frames (%v), want %d and the start check's", st["frames"], err, calls)
	}
}

// A call's context bounds its wait; the answer that comes later is read
// and dropped, and the connection goes on.
func TestClient_contextCancel(t *testing.T) {
	release := make(chan struct{})
	path := fakeSidecar(t, func(fc *fakeConn) {
		h, _, _ := fc.next() // the first request: held until released
		<-release
		fc.pong(h.ID)
		fc.echo()
	})
	c := dial(t, path)

	cx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := c.Ping(cx); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, sluice.ErrUnavailable) {
		t.Errorf("ping past its deadline: %v", err)
	}
	cx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	if _, err := c.Acquire(cx, tb10, "k", 1); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled acquire: %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("cancelled calls took %v", time.Since(start))
	}
	if err := c.Ping(cx); !errors.Is(err, context.Canceled) {
		t.Errorf("ping with a cancelled context: %v", err)
	}
	close(release)
	if err := c.Ping(ctx(t)); err != nil {
		t.Errorf("ping after the held answers: %v", err)
	}
}

// Without a deadline in the context, the client's default timeout applies,
// and counts as the sidecar being unavailable.
func TestClient_defaultTimeout(t *testing.T) {
	path := fakeSidecar(t, func(fc *fakeConn) { fc.next(); fc.wait() })
	c := dial(t, path, sluice.WithTimeout(30*time.Millisecond))
	err := c.Ping(context.Background())
	if !errors.Is(err, sluice.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("ping of a silent sidecar: %v", err)
	}
	open := dial(t, path, sluice.WithTimeout(30*time.Millisecond), sluice.WithFailurePolicy(sluice.FailOpen))
	d, err := open.Acquire(context.Background(), tb10, "k", 1)
	if err != nil || !d.Allowed || !d.Degraded {
		t.Errorf("fail-open acquire of a silent sidecar: %+v, %v", d, err)
	}
}

func TestClient_close(t *testing.T) {
	path := fakeSidecar(t, func(fc *fakeConn) { fc.wait() })
	c := dial(t, path)
	errc := make(chan error, 1)
	go func() { errc <- c.Ping(context.Background()) }()
	time.Sleep(20 * time.Millisecond) // let the ping be sent
	c.Close()
	if err := <-errc; !errors.Is(err, sluice.ErrClosed) {
		t.Errorf("ping in flight at Close: %v", err)
	}
	if _, err := c.Acquire(context.Background(), tb10, "k", 1); !errors.Is(err, sluice.ErrClosed) {
		t.Errorf("acquire after Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// A lone caller reads its own answer; cancelling its context interrupts
// that read, and the answer that comes later is dropped by the reader
// goroutine without disturbing the calls after it.
func TestClient_cancelDirectRead(t *testing.T) {
	release := make(chan struct{})
	path := fakeSidecar(t, func(fc *fakeConn) {
		h, _, _ := fc.next() // the cancelled ping: answered only once released
		<-release
		fc.pong(h.ID)
		fc.echo()
	})
	c := dial(t, path)
	cx, cancel := context.WithCancel(context.Background()) // no deadline: only the cancellation can end the read
	time.AfterFunc(20*time.Millisecond, cancel)
	start := time.Now()
	if err := c.Ping(cx); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ping: %v", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the cancellation took %v to end the read (the client's timeout is %v)", took, testTimeout)
	}
	close(release)
	for i := range 3 {
		if err := c.Ping(ctx(t)); err != nil {
			t.Fatalf("ping %d after the late answer: %v", i, err)
		}
	}
}
