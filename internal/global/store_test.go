package global

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/redistest"
)

const hour = 3600 * 1e9

// newStore returns a Store for the given Redis addresses, closed at cleanup.
func newStore(t testing.TB, o Options) *Store {
	t.Helper()
	if o.Timeout == 0 {
		// Generous unless a test is about timeouts: a loaded CI machine
		// can take longer than the default 50 ms to answer.
		o.Timeout = 5 * time.Second
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func tokenBucket(max, refill int64) bucket.Limit {
	return bucket.Limit{Algorithm: bucket.TokenBucket, Max: max, RefillTime: refill, RefillAmount: max}
}

// Ensure that a decision at Redis's clock counts down the bucket and that
// the key expires when the bucket is full again.
func TestStoreRedisClock(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addrs: []string{srv.Addr}})
	ctx := context.Background()
	l := tokenBucket(3, 2e9) // 3 per 2 s
	for i := range 4 {
		d, err := s.Decide(ctx, Request{Limit: l, Key: "k", Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		if want := i < 3; d.Allowed != want || d.Limit != 3 {
			t.Fatalf("request %d: %+v, want allowed %v", i, d, want)
		}
		if i == 3 && (d.RetryAfter <= 0 || d.RetryAfter > 2e9 || d.Remaining != 0) {
			t.Fatalf("denied request: %+v, want retry_after in (0, 2 s]", d)
		}
		if i < 3 && d.Remaining != int64(2-i) {
			t.Fatalf("request %d: remaining %d, want %d", i, d.Remaining, 2-i)
		}
	}
	key := string(AppendKey(nil, s.Prefix(), &l, "k"))
	pttl, err := srv.Client(t).PTTL(ctx, key).Result()
	// Full again 2 s after the first request; the expiry set then is a
	// quarter more, and kept by the requests that follow.
	if err != nil || pttl <= 0 || pttl > 2500*time.Millisecond {
		t.Fatalf("PTTL %s: %v, %v; want in (0, 2.5 s]", key, pttl, err)
	}
}

// Ensure that a Store's decisions, made one after another, are the
// script's and package bucket's, whatever the batching.
func TestStoreSequence(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addrs: []string{srv.Addr}})
	ctx := context.Background()
	r := rand.New(rand.NewPCG(1, 2))
	for _, g := range limitGens {
		l := g.gen(r)
		l.Validate()
		var m model
		now := t0
		for i := range 100 {
			now += r.Int64N(g.step(l) + 1)
			req := Request{Limit: l, Key: g.name, At: now, Cost: r.Int64N(g.cost(l) + 1)}
			got, err := s.Decide(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if want := m.do(&l, req); got != want {
				t.Fatalf("%s op %d: store %+v, bucket %+v", g.name, i, got, want)
			}
		}
	}
}

// Ensure that concurrent requests travel in shared pipelines, each decided
// on its own: exactly the limit is admitted, and the counters add up.
func TestStoreBatching(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addrs: []string{srv.Addr}})
	const goroutines, each, limit = 64, 40, 1000
	l := bucket.Limit{Algorithm: bucket.FixedWindow, Max: limit, Window: hour}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				d, err := s.Decide(context.Background(), Request{Limit: l, Key: "shared", Cost: 1, At: t0})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if got := admitted.Load(); got != limit {
		t.Fatalf("admitted %d of %d requests, want exactly %d", got, goroutines*each, limit)
	}
	st := s.Stats()
	var batches uint64
	for _, n := range st.Batches {
		batches += n
	}
	t.Logf("%d requests in %d round trips (%.1f per pipeline), batches by size %v", st.Requests, st.RoundTrips,
		float64(st.Requests)/float64(st.RoundTrips), st.Batches)
	// Commands: one per round trip (a pipeline's requests in one call of
	// the batch function), and the library's load.
	if st.Requests != goroutines*each || st.Commands != st.RoundTrips+st.ScriptLoads ||
		batches != st.RoundTrips || st.Errors != 0 {
		t.Fatalf("stats %+v", st)
	}
	if st.RoundTrips >= st.Requests {
		t.Fatalf("%d round trips for %d concurrent requests: nothing was batched", st.RoundTrips, st.Requests)
	}
}

// Ensure that a batch sends a limit's parameters once for the calls in a
// row that share them, again when they change, and a call without known
// parameters whole (lua/batch.lua).
func TestBatchArgs(t *testing.T) {
	tb := algorithms[bucket.TokenBucket]
	pa, pb := []any{int64(10), int64(1e9), int64(1), int64(0)}, []any{int64(20), int64(1e9), int64(2), int64(0)}
	mk := func(key string, params []any, tail ...any) *call {
		args := append(append([]any{"a", int64(1)}, params...), tail...)
		return &call{alg: tb, key: [1]string{key}, args: args, base: 2 + len(params), params: args[2 : 2+len(params)]}
	}
	// Calls of one limit share its prepared parameters (one slice).
	a1, a2 := mk("k1", pa), mk("k2", pa)
	a2.params = a1.params
	copy(a2.args[2:], a1.params)
	b := mk("k3", pb, int64(5), "", int64(7)) // with a tail after the parameters
	whole := &call{alg: tb, key: [1]string{"k4"}, args: []any{"a", int64(1), int64(10), int64(1e9), int64(1), int64(0)}}
	a3 := &call{alg: tb, key: [1]string{"k5"}, args: slices.Clone(a1.args), params: a1.params}
	got := batchArgs([]*call{a1, a2, b, whole, a3})
	i := tb.index
	want := []any{
		0, 4, int64(10), int64(1e9), int64(1), int64(0),
		i, "k1", 2, "a", int64(1),
		i, "k2", 2, "a", int64(1),
		0, 4, int64(20), int64(1e9), int64(2), int64(0),
		i, "k3", 5, "a", int64(1), int64(5), "", int64(7),
		0, 0,
		i, "k4", 6, "a", int64(1), int64(10), int64(1e9), int64(1), int64(0),
		0, 4, int64(10), int64(1e9), int64(1), int64(0),
		i, "k5", 2, "a", int64(1),
	}
	if !slices.Equal(got, want) {
		t.Fatalf("batch args\n%v\nwant\n%v", got, want)
	}
}

// Ensure that a Redis that is down fails requests with ErrUnavailable
// within the timeout, and that decisions resume when it is back, reloading
// the script it lost.
func TestStoreUnavailable(t *testing.T) {
	srv := redistest.Start(t)
	const timeout = 50 * time.Millisecond
	s := newStore(t, Options{Addrs: []string{srv.Addr}, Timeout: timeout})
	ctx := context.Background()
	l := tokenBucket(100, hour)
	if _, err := s.Decide(ctx, Request{Limit: l, Key: "k", Cost: 1}); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	for range 5 {
		start := time.Now()
		_, err := s.Decide(ctx, Request{Limit: l, Key: "k", Cost: 1})
		took := time.Since(start)
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("with Redis down: %v, want ErrUnavailable", err)
		}
		// Bounded by the timeout, not by go-redis's own (seconds): the
		// margin is for a busy machine, which took 200 ms beside 50.
		if took > timeout+2*time.Second {
			t.Fatalf("with Redis down the request took %v, timeout %v", took, timeout)
		}
	}
	srv.Restart(t)
	var d bucket.Decision
	var err error
	// The shard is down until a probe finds Redis again (within 100 ms of
	// its answering), and the pool may hold a dead connection or two:
	// requests fail until then.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if d, err = s.Decide(ctx, Request{Limit: l, Key: "k", Cost: 1}); err == nil {
			break
		}
	}
	if err != nil || !d.Allowed || d.Remaining != 99 {
		t.Fatalf("after a restart: %+v, %v; want allowed with 99 remaining (a new Redis holds nothing)", d, err)
	}
	if st := s.Stats(); st.ScriptLoads == 0 || st.Timeouts+st.Errors == 0 {
		t.Fatalf("stats %+v: want a script load and errors counted", st)
	}
}

// Ensure that a Store authenticates with a password, and that a wrong one
// is a clear error.
func TestStoreAuth(t *testing.T) {
	srv := redistest.Start(t, "--requirepass", "s3cret")
	ctx := context.Background()
	l := tokenBucket(1, hour)
	good := newStore(t, Options{Addrs: []string{srv.Addr}, Password: "s3cret"})
	if d, err := good.Decide(ctx, Request{Limit: l, Key: "k", Cost: 1}); err != nil || !d.Allowed {
		t.Fatalf("with the password: %+v, %v", d, err)
	}
	bad := newStore(t, Options{Addrs: []string{srv.Addr}, Password: "wrong"})
	_, err := bad.Decide(ctx, Request{Limit: l, Key: "k", Cost: 1})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("with a wrong password: %v, want ErrUnavailable", err)
	}
	t.Logf("wrong password: %v", err)
}

// Ensure that limits a global bucket cannot hold exactly are refused with
// a clear error, and the largest that can are accepted.
func TestCheck(t *testing.T) {
	ok := []bucket.Limit{
		{Algorithm: bucket.TokenBucket, Max: MaxCount, RefillTime: MaxDuration, RefillAmount: MaxCount},
		{Algorithm: bucket.GCRA, Burst: MaxCount - 1, Count: 1, Period: 1},
		{Algorithm: bucket.FixedWindow, Max: MaxCount, Window: MaxDuration},
		{Algorithm: bucket.SlidingWindow, Max: MaxCount, Window: MaxDuration / 2},
		{Algorithm: bucket.Pacer, Count: 1, Period: 1, MaxDelay: MaxDuration - 1},
	}
	for _, l := range ok {
		if err := Check(l); err != nil {
			t.Errorf("%+v: %v", l, err)
		}
	}
	bad := []bucket.Limit{
		{Algorithm: bucket.TokenBucket, Max: MaxCount + 1, RefillTime: ms, RefillAmount: 1},
		{Algorithm: bucket.TokenBucket, Max: 2, RefillTime: MaxDuration/2 + 1, RefillAmount: 1}, // 2 steps to refill
		{Algorithm: bucket.GCRA, Burst: MaxCount, Count: 1, Period: 1},
		{Algorithm: bucket.GCRA, Burst: 1, Count: 1, Period: MaxDuration/2 + 1},
		{Algorithm: bucket.FixedWindow, Max: 1, Window: MaxDuration + 1},
		{Algorithm: bucket.SlidingWindow, Max: 1, Window: MaxDuration/2 + 1},
		{Algorithm: bucket.SlidingWindow, Max: MaxCount + 1, Window: ms},
		{Algorithm: bucket.Pacer, Count: 1, Period: 2, MaxDelay: MaxDuration - 1},
	}
	for _, l := range bad {
		err := Check(l)
		if !errors.Is(err, ErrUnsupported) {
			t.Errorf("%+v: %v, want ErrUnsupported", l, err)
		} else {
			t.Log(err)
		}
	}
	if err := Check(bucket.Limit{Algorithm: bucket.TokenBucket}); !errors.Is(err, bucket.ErrOutOfRange) {
		t.Errorf("an invalid limit: %v", err)
	}
}

// Ensure that bucket keys are distinct for distinct identities and share
// a hash tag per caller key.
func TestAppendKey(t *testing.T) {
	for _, c := range []struct {
		l    bucket.Limit
		want string
	}{
		{tokenBucket(10, 60e9), "p:{a}:token_bucket:10:60000000000:10"},
		{bucket.Limit{Algorithm: bucket.GCRA, Burst: 5, Count: 1, Period: 1e9}, "p:{a}:gcra"},
		{bucket.Limit{Algorithm: bucket.SlidingWindow, Max: 5, Window: 1e9}, "p:{a}:sliding_window:1000000000"},
		{bucket.Limit{Algorithm: bucket.Pacer, Count: 1, Period: 1e9}, "p:{a}:pacer"},
	} {
		if got := string(AppendKey(nil, "p:", &c.l, "a")); got != c.want {
			t.Errorf("%v: %q, want %q", c.l.Algorithm, got, c.want)
		}
	}
}

// keysOnEveryMaster returns n keys, and checks they spread over the
// cluster's three masters.
func spreadKeys(t *testing.T, s *Store, n int) []string {
	t.Helper()
	keys := make([]string, n)
	masters := map[string]bool{}
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%d", i)
		m, err := s.cluster.MasterForKey(context.Background(), string(AppendKey(nil, s.Prefix(), &bucket.Limit{Algorithm: bucket.GCRA}, keys[i])))
		if err != nil {
			t.Fatal(err)
		}
		masters[m.Options().Addr] = true
	}
	if len(masters) != 3 {
		t.Fatalf("%d keys on %d masters, want 3", n, len(masters))
	}
	return keys
}

// Ensure that an idle bucket's key vanishes once the bucket is full again,
// for every algorithm.
func TestStoreExpiry(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addrs: []string{srv.Addr}})
	rdb := srv.Client(t)
	ctx := context.Background()
	const w = 100 * ms
	limits := []bucket.Limit{
		tokenBucket(2, w),
		{Algorithm: bucket.GCRA, Burst: 1, Count: 1, Period: w},
		{Algorithm: bucket.FixedWindow, Max: 2, Window: w},
		{Algorithm: bucket.SlidingWindow, Max: 2, Window: w},
		{Algorithm: bucket.Pacer, Count: 1, Period: w, MaxDelay: w},
	}
	var keys []string
	for _, l := range limits {
		if _, err := s.Decide(ctx, Request{Limit: l, Key: "idle", Cost: 1}); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, string(AppendKey(nil, s.Prefix(), &l, "idle")))
	}
	if n, err := rdb.Exists(ctx, keys...).Result(); err != nil || n != int64(len(keys)) {
		t.Fatalf("%d of %d keys exist after a request, %v", n, len(keys), err)
	}
	time.Sleep(2*time.Duration(w) + 50*time.Millisecond) // a sliding window remembers two windows
	if n, err := rdb.Exists(ctx, keys...).Result(); err != nil || n != 0 {
		t.Fatalf("%d keys left after every bucket is full again, %v", n, err)
	}
}
