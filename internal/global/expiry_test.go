package global

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/redistest"
)

// Ensure that a bucket's key never expires before the bucket is fresh
// again (its loss would be a new bucket: requests admitted twice), while
// requests keep an expiry that is late enough rather than move it: for
// each algorithm, goroutines of their own keys (so that the Store batches
// them), random requests at Redis's clock over about two windows (the
// test sleeps only to spread them), and after each the key's
// expiry (PEXPIRETIME) against the bucket's FreshAt, package bucket's, of
// the state Redis holds, or for sliding_log, window_counters and
// concurrency against the least time their request keeps it.
func TestStoreExpiryNeverEarly(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	s := newStore(t, Options{Addrs: []string{srv.Addr}, Timeout: 10 * time.Second})
	ctx := context.Background()
	const ms = int64(time.Millisecond)
	window := 300 * ms
	limits := []bucket.Limit{
		{Algorithm: bucket.TokenBucket, Max: 20, RefillTime: 50 * ms, RefillAmount: 2},
		{Algorithm: bucket.GCRA, Burst: 9, Count: 10, Period: 500 * ms},
		{Algorithm: bucket.FixedWindow, Max: 20, Window: window},
		{Algorithm: bucket.SlidingWindow, Max: 20, Window: window},
		{Algorithm: bucket.Pacer, Count: 10, Period: 500 * ms, MaxDelay: 2e9},
		{Algorithm: bucket.SlidingLog, Max: 20, Window: window},
		{Algorithm: bucket.WindowCounters, Max: 20, Window: window, Counters: 3},
		{Algorithm: bucket.Concurrency, Max: 20, Lease: window},
	}
	const perLimit, requests = 3, 80
	var kept, checked atomic.Int64
	var wg sync.WaitGroup
	for li, l := range limits {
		for k := range perLimit {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(li), uint64(k)))
				key := "exp" + strconv.Itoa(k)
				rkey := string(AppendKey(nil, s.Prefix(), &l, key))
				var last time.Duration
				for range requests {
					// Spread over two windows: requests that find the
					// expiry set by others a while ago.
					time.Sleep(time.Duration(r.Int64N(12 * ms)))
					before, err := rdb.Time(ctx).Result()
					if err != nil {
						t.Error(err)
						return
					}
					req := Request{Limit: l, Key: key, Cost: r.Int64N(3)}
					var d bucket.Decision
					switch {
					case l.Algorithm == bucket.Concurrency:
						req.Lease = r.Int64() | 1
						d, _, err = s.Hold(ctx, req)
					case r.IntN(5) == 0:
						req.Op = Refund
						d, err = s.Decide(ctx, req)
					default:
						d, err = s.Decide(ctx, req)
					}
					if err != nil {
						t.Error(err)
						return
					}
					// The expiry and the bucket at one moment (the key
					// may expire between two calls).
					var expCmd *redis.DurationCmd
					var getCmd *redis.StringCmd
					if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
						expCmd, getCmd = p.PExpireTime(ctx, rkey), p.Get(ctx, rkey)
						return nil
					}); err != nil && err != redis.Nil {
						t.Error(err)
						return
					}
					exp := expCmd.Val()
					if exp < 0 { // no key: nothing to lose
						continue
					}
					if exp == last {
						kept.Add(1)
					}
					last = exp
					checked.Add(1)
					// PX and PTTL are whole ms of Redis's ms clock, which
					// TIME may be up to a ms ahead of.
					expires := exp.Nanoseconds() + ms
					var least int64
					switch l.Algorithm {
					case bucket.SlidingLog:
						if !d.Allowed || req.Cost == 0 || req.Op == Refund {
							continue
						}
						least = before.UnixNano() + l.Window
					case bucket.WindowCounters:
						if !d.Allowed || req.Cost == 0 || req.Op == Refund {
							continue
						}
						least = before.UnixNano() + l.Window - l.Window/l.Counters
					case bucket.Concurrency:
						if !d.Allowed {
							continue
						}
						least = before.UnixNano() + l.Lease
					default:
						st := parseStored(t, rkey, getCmd.Val())
						least = l.FreshAt(&st, nil)
					}
					if expires < least {
						t.Errorf("%v: key %s expires at %d, %v before its bucket is fresh (%d), after %+v: %+v",
							l.Algorithm, rkey, expires, time.Duration(least-expires), least, req, d)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	if st := s.Stats(); st.RoundTrips >= st.Requests {
		t.Errorf("stats %+v: no request was batched", st)
	}
	// The point of the expiry's margin: most writes keep it.
	if kept.Load()*2 < checked.Load() {
		t.Errorf("%d of %d requests kept their key's expiry, want most", kept.Load(), checked.Load())
	}
	t.Logf("%d of %d requests kept their key's expiry; %+v", kept.Load(), checked.Load(), s.Stats())
}
