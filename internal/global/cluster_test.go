package global

import (
	"context"
	"errors"
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
		stores[i] = newStore(t, Options{Addrs: c.Addrs(), Timeout: 2 * time.Second})
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
}

// Ensure that killing a Cluster master under load crashes nothing, fails
// requests only with ErrUnavailable while its slots have no master, resumes
// decisions once its replica is promoted, and never admits beyond the limit
// (WaitReplicas 1: a decision the replica does not hold is not returned).
func TestClusterFailover(t *testing.T) {
	c := redistest.StartCluster(t)
	const workers, n = 16, 400
	l := tokenBucket(n, hour)
	s := newStore(t, Options{Addrs: c.Addrs(), WaitReplicas: 1, Timeout: 200 * time.Millisecond})
	keys := spreadKeys(t, s, 6)
	var admitted, failed [6]atomic.Int64
	var total atomic.Int64
	var after atomic.Bool      // the replica has been promoted
	var afterOK [6]atomic.Bool // a decision succeeded on the key after the promotion
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
				d, err := s.Decide(context.Background(), Request{Limit: l, Key: keys[ki], Cost: 1})
				switch {
				case err != nil:
					if !errors.Is(err, ErrUnavailable) {
						t.Errorf("key %s: %v, want ErrUnavailable", keys[ki], err)
					}
					failed[ki].Add(1)
					time.Sleep(time.Millisecond)
				case d.Allowed:
					admitted[ki].Add(1)
					total.Add(1)
				}
				if err == nil && promoted {
					afterOK[ki].Store(true)
				}
			}
		})
	}
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
			done = done && afterOK[ki].Load() && admitted[ki].Load()+failed[ki].Load() >= n
		}
		if done {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	st := s.Stats()
	t.Logf("stats %+v", st)
	for ki, k := range keys {
		a, f := admitted[ki].Load(), failed[ki].Load()
		t.Logf("key %s: admitted %d, failed %d", k, a, f)
		if a > n {
			t.Errorf("key %s: admitted %d, above the limit %d", k, a, n)
		}
		if !afterOK[ki].Load() {
			t.Errorf("key %s: no decision after the failover", k)
		}
		if a+f < n {
			t.Errorf("key %s: admitted %d with %d failures: the budget of %d was not spent", k, a, f, n)
		}
	}
}
