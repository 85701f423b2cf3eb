package global

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/redistest"
)

// globalRemaining peeks at the global bucket.
func globalRemaining(t *testing.T, s *Store, l bucket.Limit, key string) int64 {
	t.Helper()
	d, err := s.Decide(context.Background(), Request{Limit: l, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	return d.Remaining
}

// Ensure that hosts deciding from leases never admit more than the global
// limit, measure how much they under-admit while the global bucket is
// empty (tokens idle in other hosts' leases), and that Close returns every
// unused token.
func TestLeaseUnderAdmission(t *testing.T) {
	for _, alg := range []bucket.Limit{
		tokenBucket(1000, hour),
		{Algorithm: bucket.GCRA, Burst: 999, Count: 1, Period: hour},
	} {
		t.Run(alg.Algorithm.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			const hosts, workers, size, limit = 4, 8, 50, 1000
			leases := make([]*Leases, hosts)
			var stores []*Store
			for i := range leases {
				s := newStore(t, Options{Addrs: []string{srv.Addr}})
				stores = append(stores, s)
				leases[i] = NewLeases(s, LeaseOptions{Size: size, TTL: time.Hour})
			}
			var admitted atomic.Int64
			var maxGap atomic.Int64 // limit - admitted, when a host was first denied
			var wg sync.WaitGroup
			for h := range hosts {
				for range workers {
					wg.Go(func() {
						denials := 0
						for denials < 20 {
							d, err := leases[h].Decide(context.Background(), alg, "shared", 1)
							if err != nil {
								t.Error(err)
								return
							}
							if d.Allowed {
								if admitted.Add(1) > limit {
									t.Errorf("admitted beyond the limit of %d", limit)
								}
								continue
							}
							if denials == 0 {
								gap := limit - admitted.Load()
								for {
									m := maxGap.Load()
									if gap <= m || maxGap.CompareAndSwap(m, gap) {
										break
									}
								}
							}
							denials++
						}
					})
				}
			}
			wg.Wait()
			got := admitted.Load()
			t.Logf("%d hosts, leases of %d: admitted %d of %d; under-admission when a host was first denied: at most %d tokens (bound (hosts-1)*size = %d)",
				hosts, size, got, limit, maxGap.Load(), (hosts-1)*size)
			if got > limit {
				t.Fatalf("admitted %d, above the limit %d", got, limit)
			}
			if maxGap.Load() > (hosts-1)*size {
				t.Errorf("under-admission %d tokens, above the bound %d", maxGap.Load(), (hosts-1)*size)
			}
			for _, ls := range leases {
				if err := ls.Close(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			if rem := globalRemaining(t, stores[0], alg, "shared"); got+rem != limit {
				t.Fatalf("after Close: %d admitted + %d left in Redis = %d, want %d (every unused token back)", got, rem, got+rem, limit)
			}
			var st LeaseStats
			for _, ls := range leases {
				x := ls.Stats()
				st.Grants += x.Grants
				st.Granted += x.Granted
				st.Returned += x.Returned
				st.Local += x.Local
			}
			if st.Granted-st.Returned != uint64(got) {
				t.Fatalf("granted %d - returned %d != admitted %d", st.Granted, st.Returned, got)
			}
		})
	}
}

// Ensure that an automatic lease grows with demand: a busy host makes
// fewer than 0.05 Redis commands per decision.
func TestLeaseAuto(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addrs: []string{srv.Addr}})
	ls := NewLeases(s, LeaseOptions{TTL: time.Hour})
	defer ls.Close(context.Background())
	l := tokenBucket(1_000_000, hour)
	const workers, each = 8, 2000
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				d, err := ls.Decide(context.Background(), l, "busy", 1)
				if err != nil || !d.Allowed {
					t.Errorf("%+v, %v", d, err)
					return
				}
			}
		})
	}
	wg.Wait()
	st, lst := s.Stats(), ls.Stats()
	perDecision := float64(st.Commands) / (workers * each)
	t.Logf("%d decisions: %d leases (%d tokens), %d Redis commands, %.4f per decision", workers*each, lst.Grants, lst.Granted, st.Commands, perDecision)
	if perDecision >= 0.05 {
		t.Errorf("%.4f Redis commands per decision, want < 0.05", perDecision)
	}
}

// Ensure that the unused tokens of an expired lease go back to the global
// bucket, and that a pacer cannot be leased.
func TestLeaseExpiry(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addrs: []string{srv.Addr}})
	ls := NewLeases(s, LeaseOptions{Size: 10, TTL: 100 * time.Millisecond})
	defer ls.Close(context.Background())
	l := tokenBucket(100, hour)
	if d, err := ls.Decide(context.Background(), l, "k", 1); err != nil || !d.Allowed || d.Remaining != 9 {
		t.Fatalf("%+v, %v; want allowed with 9 left in the lease", d, err)
	}
	if rem := globalRemaining(t, s, l, "k"); rem != 90 {
		t.Fatalf("global remaining %d with a lease of 10, want 90", rem)
	}
	deadline := time.Now().Add(2 * time.Second)
	for globalRemaining(t, s, l, "k") != 99 {
		if time.Now().After(deadline) {
			t.Fatalf("global remaining %d 2 s after the lease expired, want 99", globalRemaining(t, s, l, "k"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st := ls.Stats(); st.Returns != 1 || st.Returned != 9 {
		t.Fatalf("stats %+v, want one return of 9 tokens", st)
	}
	// The empty, expired lease is forgotten on a later round.
	for len(ls.snapshot()) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d leases kept after expiry", len(ls.snapshot()))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if d, err := ls.Decide(context.Background(), l, "k", 1); err != nil || !d.Allowed || d.Remaining != 9 {
		t.Fatalf("a new lease after a forgotten one: %+v, %v", d, err)
	}
	_, err := ls.Decide(context.Background(), bucket.Limit{Algorithm: bucket.Pacer, Count: 1, Period: 1e9}, "k", 1)
	if !errors.Is(err, ErrUnsupported) {
		t.Fatalf("a leased pacer: %v, want ErrUnsupported", err)
	}
}

// Ensure that after a denied lease, requests as large are denied without
// asking Redis until the global bucket's retry_after, and smaller ones
// still ask.
func TestLeaseHold(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addrs: []string{srv.Addr}})
	ls := NewLeases(s, LeaseOptions{Size: 5, TTL: time.Hour})
	defer ls.Close(context.Background())
	l := tokenBucket(5, hour)
	ctx := context.Background()
	for range 5 {
		if d, err := ls.Decide(ctx, l, "k", 1); err != nil || !d.Allowed {
			t.Fatalf("%+v, %v", d, err)
		}
	}
	d, err := ls.Decide(ctx, l, "k", 2)
	if err != nil || d.Allowed || d.RetryAfter <= 0 {
		t.Fatalf("an empty bucket: %+v, %v; want denied with a retry_after", d, err)
	}
	before := s.Stats().Requests
	for range 10 {
		if d, err := ls.Decide(ctx, l, "k", 3); err != nil || d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > hour {
			t.Fatalf("held: %+v, %v", d, err)
		}
	}
	if got := s.Stats().Requests; got != before {
		t.Fatalf("%d Redis requests for held denials, want 0", got-before)
	}
	if _, err := ls.Decide(ctx, l, "k", 1); err != nil || s.Stats().Requests != before+1 {
		t.Fatalf("a smaller request did not ask Redis: %v", err)
	}
	if st := ls.Stats(); st.Held != 10 {
		t.Fatalf("stats %+v, want 10 held denials", st)
	}
}

// Ensure that a decision from a lease allocates nothing, journaled too.
func TestLeaseNoAllocs(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addrs: []string{srv.Addr}})
	j, err := OpenJournal(filepath.Join(t.TempDir(), "leases"), 4)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	ls := NewLeases(s, LeaseOptions{Size: 1 << 40, TTL: time.Hour, Journal: j})
	defer ls.Close(context.Background())
	l := tokenBucket(1<<50, hour)
	ctx := context.Background()
	if _, err := ls.Decide(ctx, l, "k", 1); err != nil { // takes the lease
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		if d, err := ls.Decide(ctx, l, "k", 1); err != nil || !d.Allowed {
			t.Fatal(d, err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per leased decision, want 0", allocs)
	}
	allocs = testing.AllocsPerRun(1000, func() {
		if d, ok := ls.Local(l, "k", 1); !ok || !d.Allowed {
			t.Fatal(d, ok)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per Local decision, want 0", allocs)
	}
	if st := ls.Stats(); st.Grants != 1 || st.Local < 2000 {
		t.Fatalf("stats %+v: want every decision from the first lease", st)
	}
}

// Ensure that a host keeps deciding from its lease while Redis is down,
// and reports ErrUnavailable once the lease is spent.
func TestLeaseOutage(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addrs: []string{srv.Addr}})
	ls := NewLeases(s, LeaseOptions{Size: 10, TTL: time.Hour})
	l := tokenBucket(100, hour)
	ctx := context.Background()
	if d, err := ls.Decide(ctx, l, "k", 1); err != nil || !d.Allowed {
		t.Fatalf("%+v, %v", d, err)
	}
	srv.Kill()
	for i := range 9 {
		if d, err := ls.Decide(ctx, l, "k", 1); err != nil || !d.Allowed || d.Remaining != int64(8-i) {
			t.Fatalf("request %d from the lease with Redis down: %+v, %v", i, d, err)
		}
	}
	if _, err := ls.Decide(ctx, l, "k", 1); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("the lease spent, Redis down: %v, want ErrUnavailable", err)
	}
	if err := ls.Close(ctx); err != nil {
		t.Fatalf("Close with an empty lease and Redis down: %v", err)
	}
}

// Ensure that tokens sent back in a lease call whose reply is lost are
// never admitted again on this host: Redis may have taken them back (it
// ran the call after the caller gave up), so they count as returned.
func TestLeaseLostReturn(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addrs: []string{srv.Addr}, Timeout: 50 * time.Millisecond})
	warm(t, s)
	ls := NewLeases(s, LeaseOptions{Size: 10, TTL: time.Hour})
	defer ls.Close(context.Background())
	l := tokenBucket(10, hour)
	ctx := context.Background()
	admitted := int64(0)
	for range 2 { // a lease of all 10; 2 left in it
		if d, err := ls.Decide(ctx, l, "k", 4); err != nil || !d.Allowed {
			t.Fatal(d, err)
		}
		admitted += 4
	}
	srv.Pause()
	// Needs a new lease: the call returns the 2 left and asks for more,
	// and gets no reply. Redis runs it when it resumes.
	if _, err := ls.Decide(ctx, l, "k", 4); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("with Redis paused: %v, want ErrUnavailable", err)
	}
	srv.Resume()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		d, err := ls.Decide(ctx, l, "k", 1)
		if err == nil && !d.Allowed {
			break
		}
		if err == nil {
			admitted++
		}
	}
	ls.Close(ctx)
	left := globalRemaining(t, s, l, "k")
	if admitted+left > 10 {
		t.Errorf("admitted %d and %d left in Redis: above the limit of 10 (the 2 returned tokens were used twice)", admitted, left)
	}
	t.Logf("admitted %d, %d left in Redis", admitted, left)
}

// Ensure that LocalAt through a LeaseCache decides from the bucket's own
// lease only: a lease's tokens are spent once, another key or limit does
// not find it, a lease the sweeper forgot is replaced by the bucket's new
// one, the given time decides expiry, and a hit allocates nothing.
func TestLeaseLocalAtCache(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addrs: []string{srv.Addr}})
	ls := NewLeases(s, LeaseOptions{Size: 10, TTL: time.Hour})
	defer ls.Close(context.Background())
	l, other := tokenBucket(1000, hour), tokenBucket(999, hour)
	ctx := context.Background()
	if d, err := ls.Decide(ctx, l, "k", 1); err != nil || !d.Allowed || d.Remaining != 9 {
		t.Fatal(d, err) // takes a lease of 10
	}
	var c LeaseCache
	now := time.Now()
	if d, ok := ls.LocalAt(&c, &l, []byte("k2"), 1, now); ok {
		t.Fatalf("another key decided from k's lease: %+v", d)
	}
	if d, ok := ls.LocalAt(&c, &other, []byte("k"), 1, now); ok {
		t.Fatalf("another limit decided from k's lease: %+v", d)
	}
	if d, ok := ls.LocalAt(&c, &l, []byte("k"), 1, now.Add(2*time.Hour)); ok {
		t.Fatalf("decided from a lease expired at the given time: %+v", d)
	}
	admitted := 0
	for {
		d, ok := ls.LocalAt(&c, &l, []byte("k"), 1, now)
		if !ok {
			break
		}
		if !d.Allowed || d.Remaining != int64(8-admitted) {
			t.Fatalf("decision %d from the lease: %+v", admitted, d)
		}
		admitted++
		if c.l == nil || admitted > 9 {
			t.Fatalf("%d admitted, cache %+v", admitted, c)
		}
	}
	if admitted != 9 {
		t.Fatalf("%d admitted from the lease's 9 unused tokens", admitted)
	}
	// The sweeper forgets the spent lease; the next Decide takes a new one,
	// which the cache, holding the old, must find.
	old := c.l
	old.mu.Lock()
	ls.forget(old)
	old.mu.Unlock()
	if d, err := ls.Decide(ctx, l, "k", 1); err != nil || !d.Allowed || d.Remaining != 9 {
		t.Fatal(d, err)
	}
	if d, ok := ls.LocalAt(&c, &l, []byte("k"), 1, time.Now()); !ok || !d.Allowed || d.Remaining != 8 || c.l == old {
		t.Fatalf("after the lease was replaced: %+v %v (cache holds the old lease: %v)", d, ok, c.l == old)
	}
	key := []byte("k")
	allocs := testing.AllocsPerRun(5, func() {
		if d, ok := ls.LocalAt(&c, &l, key, 1, now); !ok || !d.Allowed {
			t.Fatal(d, ok)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per LocalAt from the cache, want 0", allocs)
	}
	if st := ls.Stats(); st.Grants != 2 || st.Local != 9+1+6 {
		t.Fatalf("stats %+v", st)
	}
}
