package engine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/shm"
)

const (
	sec = int64(1e9)
	t0  = int64(1_700_000_000) * sec // a fixed anchor, Unix ns
)

// newEngine returns an engine over a heap table that is verified after the
// test.
func newEngine(t testing.TB, slots uint64) *Engine {
	t.Helper()
	tb, err := shm.NewHeap(shm.Options{SlotCount: slots})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tb.Verify(); err != nil {
			t.Errorf("Verify after test: %v", err)
		}
	})
	return New(tb)
}

// lim builds a Limit known to be valid.
func lim(b bucket.Limit) *Limit {
	l := MustLimit(b)
	return &l
}

func tokenBucket(max, refillSec, amount int64) *Limit {
	return lim(bucket.Limit{Algorithm: bucket.TokenBucket, Max: max, RefillTime: refillSec * sec, RefillAmount: amount})
}

func gcra(burst, count, periodSec int64) *Limit {
	return lim(bucket.Limit{Algorithm: bucket.GCRA, Burst: burst, Count: count, Period: periodSec * sec})
}

type step struct {
	at        int64 // seconds after t0
	cost      int64
	flags     bucket.Flags
	allowed   bool
	remaining int64
}

// run replays steps against key's bucket under l.
func run(t *testing.T, e *Engine, key string, l *Limit, steps []step) {
	t.Helper()
	for i, s := range steps {
		d, err := acquire(e, []byte(key), l, s.cost, t0+s.at*sec, s.flags)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if d.Allowed != s.allowed || d.Remaining != s.remaining {
			t.Errorf("step %d: Acquire(at=%d, cost=%d) = allowed %v remaining %d; want %v %d",
				i, s.at, s.cost, d.Allowed, d.Remaining, s.allowed, s.remaining)
		}
	}
}

// Ensure smyte/ratelimit's upstream script (reference vector S1) holds
// through the table: the reply is the pre-deduction count and a denial
// drains the bucket.
func TestAcquire_smyteVectorS1(t *testing.T) {
	e := newEngine(t, 64)
	l := tokenBucket(10, 5, 3)
	S, St := bucket.Smyte, bucket.Smyte|bucket.Strict
	run(t, e, "a", l, []step{
		{2, 1, S, true, 10}, {2, 1, S, true, 9}, {2, 0, S, true, 8}, {2, 0, S, true, 8},
		{2, 5, S, true, 8}, {2, 5, S, false, 3}, {2, 0, S, true, 0}, {8, 0, S, true, 3},
		{8, 2, S, true, 3}, {8, 1, S, true, 1}, {9, 1, S, false, 0}, {13, 0, S, true, 3},
		{14, 4, St, false, 3}, {16, 4, St, false, 0}, {18, 1, St, false, 0}, {23, 2, St, true, 3},
	})
}

// Ensure a bucket's identity: token-bucket parameters are part of it, gcra's
// are not (a rate can change on the fly), and algorithms never share.
func TestAcquire_identity(t *testing.T) {
	e := newEngine(t, 64)
	now := t0
	a := func(l *Limit) int64 {
		d, err := acquire(e, []byte("k"), l, 1, now, bucket.Smyte)
		if err != nil {
			t.Fatal(err)
		}
		return d.Remaining
	}
	if a(tokenBucket(2, 60, 2)) != 2 || a(tokenBucket(3, 60, 3)) != 3 || a(tokenBucket(2, 60, 2)) != 1 {
		t.Errorf("RL.REDUCE k 2 60 and k 3 60 must be two buckets")
	}
	ms := lim(bucket.Limit{Algorithm: bucket.TokenBucket, Max: 2, RefillTime: 60000 * bucket.Millisecond, RefillAmount: 2})
	if a(ms) != 0 {
		t.Errorf("RL.PREDUCE k 2 60000 must share RL.REDUCE k 2 60's bucket")
	}
	g1, g2 := gcra(4, 1, 1), gcra(19, 10, 1) // T 1 s, then T 100 ms and tau 2 s
	d1, _ := acquire(e, []byte("k"), g1, 1, now, 0)
	d2, _ := acquire(e, []byte("k"), g2, 1, now, 0)
	if d1.Remaining != 4 || d2.Remaining != 9 { // (2 s - 1.1 s) / 100 ms
		t.Errorf("gcra with new parameters must read the same bucket: %d then %d", d1.Remaining, d2.Remaining)
	}
	if st := e.Table().Stats(); st.Inserts != 3 {
		t.Errorf("%d buckets created, want 3", st.Inserts)
	}
}

// Ensure that requests that change nothing never create a bucket.
func TestAcquire_noCreateWithoutChange(t *testing.T) {
	e := newEngine(t, 64)
	l := tokenBucket(5, 1, 5)
	if d, _ := acquire(e, []byte("k"), l, 6, t0, 0); d.Allowed {
		t.Errorf("cost above max allowed")
	}
	if d, _ := acquire(e, []byte("k"), l, 0, t0, 0); !d.Allowed || d.Remaining != 5 {
		t.Errorf("cost 0: %+v", d)
	}
	if d, _ := peek(e, []byte("k"), l, t0); !d.Allowed || d.Remaining != 5 {
		t.Errorf("peek: %+v", d)
	}
	if d, _ := refund(e, []byte("k"), l, 3, t0); d.Remaining != 5 {
		t.Errorf("refund of a new bucket: %+v", d)
	}
	if ok, _ := e.Reset([]byte("k"), l, Time{}); ok {
		t.Errorf("reset reported a bucket that never existed")
	}
	if st := e.Table().Stats(); st.Inserts != 0 {
		t.Errorf("%d buckets created by requests that change nothing", st.Inserts)
	}
}

// Ensure peek, refund and reset on an existing bucket.
func TestOperations(t *testing.T) {
	e := newEngine(t, 64)
	l := tokenBucket(5, 3600, 1)
	k := []byte("login:alice")
	for range 4 {
		acquire(e, k, l, 1, t0, 0)
	}
	// Peek reports the bucket as it stands: 1 left, and a cost of 1 passes.
	if d, _ := peek(e, k, l, t0); !d.Allowed || d.Remaining != 1 || d.RetryAfter != -1 {
		t.Errorf("peek with 1 left: %+v", d)
	}
	if d, _ := peek(e, k, l, t0); d.Remaining != 1 {
		t.Errorf("peek consumed: %+v", d)
	}
	acquire(e, k, l, 1, t0, 0)
	if d, _ := peek(e, k, l, t0); d.Allowed || d.Remaining != 0 || d.RetryAfter != 3600*sec {
		t.Errorf("peek of an empty bucket: %+v, want denied, retry in an hour", d)
	}
	refund(e, k, l, 1, t0)
	if d, _ := refund(e, k, l, 2, t0); d.Remaining != 3 {
		t.Errorf("refund 2 onto 1: %+v", d)
	}
	if d, _ := refund(e, k, l, 100, t0); d.Remaining != 5 {
		t.Errorf("refund is not capped at max: %+v", d)
	}
	acquire(e, k, l, 5, t0, 0)
	if ok, _ := e.Reset(k, l, Time{}); !ok {
		t.Errorf("reset of an existing bucket reported false")
	}
	if d, _ := acquire(e, k, l, 1, t0, 0); d.Remaining != 4 {
		t.Errorf("after reset: %+v", d)
	}
}

// Ensure that bad input is an error, never a panic.
func TestAcquire_badInput(t *testing.T) {
	e := newEngine(t, 64)
	good := tokenBucket(5, 1, 5)
	cases := []struct {
		key  []byte
		l    *Limit
		cost int64
		want error
	}{
		{nil, good, 1, ErrEmptyKey},
		{[]byte(strings.Repeat("k", 1025)), good, 1, ErrKeyTooLong},
		{[]byte("k"), good, -1, ErrNegativeCost},
		{[]byte("k"), &Limit{}, 1, ErrInvalidLimit},
		{[]byte("k"), nil, 1, ErrInvalidLimit},
	}
	for i, c := range cases {
		_, err := acquire(e, c.key, c.l, c.cost, t0, 0)
		if err == nil || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("case %d: %v, want %v", i, err, c.want)
		}
	}
	if _, err := NewLimit(bucket.Limit{Algorithm: bucket.GCRA, Count: 1, Period: 0}); err == nil {
		t.Errorf("NewLimit accepted a zero period")
	}
	if _, err := acquire(e, []byte(strings.Repeat("k", 1024)), good, 1, t0, 0); err != nil {
		t.Errorf("1024-byte key: %v", err)
	}
}

// Ensure that a full table is an error, counted, and harms no existing bucket.
func TestAcquire_tableFull(t *testing.T) {
	e := newEngine(t, 8)
	l := tokenBucket(5, 3600, 1)
	for i := range 8 {
		if _, err := acquire(e, fmt.Appendf(nil, "k%d", i), l, 1, t0, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := acquire(e, []byte("one-too-many"), l, 1, t0, 0); !errors.Is(err, ErrTableFull) {
		t.Errorf("9th bucket in 8 slots: %v", err)
	}
	if d, _ := acquire(e, []byte("k3"), l, 1, t0, 0); d.Remaining != 3 {
		t.Errorf("existing bucket after table full: %+v", d)
	}
	// An hour later every bucket is full again: their slots are reclaimable.
	if _, err := acquire(e, []byte("one-too-many"), l, 1, t0+3600*sec, 0); err != nil {
		t.Errorf("insert after buckets refilled: %v", err)
	}
}

// Ensure no over-admission when many goroutines hammer one bucket.
func TestAcquire_concurrentOneKey(t *testing.T) {
	e := newEngine(t, 64)
	for _, l := range []*Limit{tokenBucket(1000, 3600, 1), gcra(999, 1, 3600),
		lim(bucket.Limit{Algorithm: bucket.FixedWindow, Max: 1000, Window: 3600 * sec}),
		lim(bucket.Limit{Algorithm: bucket.SlidingWindow, Max: 1000, Window: 3600 * sec})} {
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 200 {
					d, err := acquire(e, []byte("hot"), l, 1, t0, 0)
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						admitted.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		if n := admitted.Load(); n != 1000 {
			t.Errorf("%v: admitted %d of 3200, want exactly 1000", l.Bucket().Algorithm, n)
		}
	}
}

// Ensure that a slot found torn after a crash is replaced by a drained state:
// the bucket grants no burst, then refills normally.
func TestAcquire_conservativeAfterCrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state")
	tb, err := shm.Create(path, shm.Options{SlotCount: 64}, 0)
	if err != nil {
		t.Fatal(err)
	}
	e := New(tb)
	l := tokenBucket(10, 1, 1)
	acquire(e, []byte("k"), l, 1, t0, 0)
	// Crash while the slot is locked: copy the file as the kernel holds it.
	sl, _, _ := tb.Lookup(e.fingerprint([]byte("k"), l), nil)
	img, err := os.ReadFile(path)
	sl.Release()
	tb.Close()
	if err != nil {
		t.Fatal(err)
	}
	crashed := filepath.Join(t.TempDir(), "crashed")
	os.WriteFile(crashed, img, 0o600)
	tb, err = shm.Open(crashed)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	e = New(tb)
	if d, _ := acquire(e, []byte("k"), l, 1, t0+500e6, 0); d.Allowed {
		t.Errorf("torn bucket granted a request: %+v", d)
	}
	if d, _ := acquire(e, []byte("k"), l, 1, t0+1500e6, 0); !d.Allowed || d.Remaining != 0 {
		t.Errorf("torn bucket does not refill: %+v", d)
	}
	if err := tb.Verify(); err != nil {
		t.Error(err)
	}
}

// Ensure that the hot paths allocate nothing.
func TestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("counted in make test's run without the race detector, under which sync.Pool drops its items at random")
	}
	e := newEngine(t, 1024)
	l := gcra(1000, 1000, 1)
	key := []byte("hot")
	items := []Item{{Key: key, Limit: l, Cost: 1}, {Key: []byte("other"), Limit: tokenBucket(10, 1, 10), Cost: 1}}
	dst := make([]bucket.Decision, 0, 4)
	now := t0
	var d bucket.Decision
	for name, fn := range map[string]func(){
		"acquire": func() { now += 1e6; e.Acquire(&d, key, l, 1, At(now), 0) },
		"peek":    func() { e.Peek(&d, key, l, At(now)) },
		"multi":   func() { now += 1e6; dst, _, _ = e.Multi(dst[:0], items, At(now)) },
	} {
		if n := testing.AllocsPerRun(100, fn); n != 0 {
			t.Errorf("%s: %v allocs/op", name, n)
		}
	}
}

// acquire, peek and refund return the decision, for tests that read better so.
func acquire(e *Engine, key []byte, l *Limit, cost, now int64, f bucket.Flags) (d bucket.Decision, err error) {
	err = e.Acquire(&d, key, l, cost, At(now), f)
	return d, err
}

func peek(e *Engine, key []byte, l *Limit, now int64) (d bucket.Decision, err error) {
	err = e.Peek(&d, key, l, At(now))
	return d, err
}

func refund(e *Engine, key []byte, l *Limit, amount, now int64) (d bucket.Decision, err error) {
	err = e.Refund(&d, key, l, amount, At(now), 0)
	return d, err
}

// drawKeys returns n distinct keys in random order, from a fixed seed.
func drawKeys(n int) [][]byte {
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "user:%d", i)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	rng.Shuffle(n, func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	return keys
}

// Ensure that the FreshAt the engine stores with a bucket (derived from the
// decision's ResetAfter) is never earlier than the algorithm's own FreshAt,
// and no later than the request time when the bucket is fresh: the table
// reclaims slots on it.
func TestStore_freshAt(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	e := newEngine(t, 64)
	limits := []*Limit{tokenBucket(5, 10, 2), gcra(3, 2, 1),
		lim(bucket.Limit{Algorithm: bucket.FixedWindow, Max: 4, Window: 2 * sec}),
		lim(bucket.Limit{Algorithm: bucket.SlidingWindow, Max: 4, Window: 2 * sec}),
		lim(bucket.Limit{Algorithm: bucket.Pacer, Count: 2, Period: sec, MaxDelay: 3 * sec})}
	now := t0
	for i := range 2000 {
		l := limits[rng.IntN(len(limits))]
		now += rng.Int64N(sec)
		key := []byte{byte('a' + rng.IntN(3))}
		if rng.IntN(4) == 0 {
			refund(e, key, l, 1+rng.Int64N(3), now)
		} else {
			acquire(e, key, l, rng.Int64N(4), now, 0)
		}
		sl, ok, _ := e.Table().Lookup(e.fingerprint(key, l), nil)
		if !ok {
			continue
		}
		if sl.Live() {
			s := bucket.State(*sl.State())
			want := max(l.Bucket().FreshAt(&s, nil), now)
			if got := sl.FreshAt(); got < l.Bucket().FreshAt(&s, nil) || got > want {
				t.Fatalf("op %d %v: slot FreshAt %d, algorithm %d, now %d", i, l.Bucket().Algorithm, got, l.Bucket().FreshAt(&s, nil), now)
			}
		}
		sl.Release()
	}
}
