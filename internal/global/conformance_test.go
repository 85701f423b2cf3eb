package global

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
	_ "time/tzdata"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/redistest"
)

func TestMain(m *testing.M) {
	redistest.QuietClientLogs()
	if os.Getenv(workerEnv) != "" {
		os.Exit(worker())
	}
	os.Exit(m.Run())
}

// t0 is a fixed time anchor, 2023-11-14T22:13:20Z, plus a few ns so that
// times are not whole microseconds.
const t0 = int64(1_700_000_000)*1e9 + 123

// model is package bucket's side of the conformance tests: a bucket as the
// script keeps it. A state fresh at now is a new bucket (the script reads
// it as one, as the table may reclaim it), and only a changed state is
// stored.
type model struct {
	s       bucket.State
	written bool
}

func (m *model) do(l *bucket.Limit, r Request) bucket.Decision {
	s := m.s
	if !m.written || l.FreshAt(&s, nil) <= r.At {
		l.Init(r.At, &s, nil)
	}
	var d bucket.Decision
	var changed bool
	if r.Op == Refund {
		d, changed = l.Refund(r.At, &s, r.Cost, r.Flags)
	} else {
		d, changed = l.Apply(r.At, &s, r.Cost, r.Flags)
	}
	if changed {
		m.s, m.written = s, true
	}
	return d
}

// stored reads a bucket's words from Redis; ok is false if there is none.
func stored(t *testing.T, rdb redis.Cmdable, key string) (s bucket.State, ok bool) {
	t.Helper()
	v, err := rdb.Get(context.Background(), key).Result()
	if err == redis.Nil {
		return s, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return parseStored(t, key, v), true
}

// parseStored reads a bucket's words from v, the value of Redis's key.
func parseStored(t *testing.T, key, v string) (s bucket.State) {
	t.Helper()
	f := strings.Fields(v)
	if len(f) != 3 {
		t.Fatalf("bucket %s holds %q, want three words", key, v)
	}
	for i, w := range f {
		var err error
		if s[i], err = strconv.ParseInt(w, 10, 64); err != nil {
			t.Fatalf("bucket %s holds %q: %v", key, v, err)
		}
	}
	return s
}

// limitGen draws a random limit of one algorithm at one scale.
type limitGen struct {
	name string
	gen  func(r *rand.Rand) bucket.Limit
	// step is the typical time between requests, ns; cost the largest cost.
	step func(l bucket.Limit) int64
	cost func(l bucket.Limit) int64
}

func between(r *rand.Rand, lo, hi int64) int64 { return lo + r.Int64N(hi-lo+1) }

const ms = bucket.Millisecond

var limitGens = []limitGen{
	{"token_bucket", func(r *rand.Rand) bucket.Limit {
		m := between(r, 1, 20)
		return bucket.Limit{Algorithm: bucket.TokenBucket, Max: m, RefillTime: between(r, ms, 2000*ms), RefillAmount: between(r, 1, m)}
	}, func(l bucket.Limit) int64 { return l.RefillTime }, func(l bucket.Limit) int64 { return l.Max + 2 }},
	{"token_bucket/large", func(r *rand.Rand) bucket.Limit {
		m := between(r, 1, MaxCount)
		rt := between(r, ms, 1e12)
		ra := between(r, max(1, m/(MaxDuration/rt)), m)
		return bucket.Limit{Algorithm: bucket.TokenBucket, Max: m, RefillTime: rt, RefillAmount: ra}
	}, func(l bucket.Limit) int64 { return l.RefillTime * 3 }, func(l bucket.Limit) int64 { return l.Max / 2 }},
	{"gcra", func(r *rand.Rand) bucket.Limit {
		return bucket.Limit{Algorithm: bucket.GCRA, Burst: between(r, 0, 10), Count: between(r, 1, 10), Period: between(r, ms, 2000*ms)}
	}, func(l bucket.Limit) int64 { return l.Period / l.Count }, func(l bucket.Limit) int64 { return l.Burst + 3 }},
	{"gcra/large", func(r *rand.Rand) bucket.Limit {
		c := between(r, 1, 1e9)
		p := between(r, c, 1e15)
		b := between(r, 0, MaxDuration/(p/c)-1)
		return bucket.Limit{Algorithm: bucket.GCRA, Burst: b, Count: c, Period: p}
	}, func(l bucket.Limit) int64 { return (l.Burst + 1) * (l.Period / l.Count) / 3 }, func(l bucket.Limit) int64 { return l.Burst/2 + 2 }},
	{"fixed_window", func(r *rand.Rand) bucket.Limit {
		return bucket.Limit{Algorithm: bucket.FixedWindow, Max: between(r, 1, 20), Window: between(r, ms, 2000*ms)}
	}, func(l bucket.Limit) int64 { return l.Window / 5 }, func(l bucket.Limit) int64 { return 4 }},
	{"fixed_window/large", func(r *rand.Rand) bucket.Limit {
		return bucket.Limit{Algorithm: bucket.FixedWindow, Max: between(r, 1, MaxCount), Window: between(r, ms, MaxDuration)}
	}, func(l bucket.Limit) int64 { return l.Window / 5 }, func(l bucket.Limit) int64 { return l.Max / 3 }},
	{"sliding_window", func(r *rand.Rand) bucket.Limit {
		return bucket.Limit{Algorithm: bucket.SlidingWindow, Max: between(r, 1, 20), Window: between(r, ms, 2000*ms)}
	}, func(l bucket.Limit) int64 { return l.Window / 5 }, func(l bucket.Limit) int64 { return 4 }},
	{"sliding_window/large", func(r *rand.Rand) bucket.Limit {
		return bucket.Limit{Algorithm: bucket.SlidingWindow, Max: between(r, 1, MaxCount), Window: between(r, ms, MaxDuration/2)}
	}, func(l bucket.Limit) int64 { return l.Window / 5 }, func(l bucket.Limit) int64 { return l.Max / 3 }},
	{"pacer", func(r *rand.Rand) bucket.Limit {
		return bucket.Limit{Algorithm: bucket.Pacer, Count: between(r, 1, 5), Period: between(r, ms, 2000*ms), MaxDelay: between(r, 0, 2000*ms)}
	}, func(l bucket.Limit) int64 { return l.Period / l.Count }, func(l bucket.Limit) int64 { return 4 }},
	{"pacer/large", func(r *rand.Rand) bucket.Limit {
		c := between(r, 1, 1e9)
		p := between(r, 1, 1e15)
		i := (p-1)/c + 1
		return bucket.Limit{Algorithm: bucket.Pacer, Count: c, Period: p, MaxDelay: between(r, 0, MaxDuration-i)}
	}, func(l bucket.Limit) int64 { return l.MaxDelay/3 + 1 }, func(l bucket.Limit) int64 {
		return max(1, (l.MaxDelay/2)/pacerInterval(l))
	}},
	{"quota", func(r *rand.Rand) bucket.Limit {
		l := bucket.Limit{Algorithm: bucket.Quota, Max: between(r, 1, 20), Loc: quotaZones[r.IntN(len(quotaZones))]}
		switch r.IntN(3) {
		case 0:
			l.Calendar, l.Every = bucket.CalDay, between(r, 1, 3)
		case 1:
			l.Calendar, l.Every, l.WeekStart = bucket.CalWeek, 1, between(r, 0, 6)
		default:
			l.Calendar, l.Every, l.Anchor = bucket.CalMonth, 1, between(r, 0, 31)
		}
		return l
	}, func(l bucket.Limit) int64 {
		return map[bucket.CalendarUnit]int64{bucket.CalDay: 5, bucket.CalWeek: 24, bucket.CalMonth: 72}[l.Calendar] * 3600e9
	}, func(l bucket.Limit) int64 { return max(1, l.Max/3) }},
}

// quotaZones are the time zones of the quotas the tests draw: UTC and
// zones with DST changes on either hemisphere, one whose midnight a change
// skipped.
var quotaZones = []*time.Location{
	nil, mustZone("America/New_York"), mustZone("Europe/Paris"), mustZone("Australia/Sydney"),
	mustZone("America/Sao_Paulo"), mustZone("Asia/Kolkata"),
}

// mustZone loads a zone from Go's database (embedded: the test binary
// imports time/tzdata).
func mustZone(name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		panic(err)
	}
	return loc
}

// forms are the ways an algorithm's script runs: as its function in the
// library (FCALL), as a Store sends a request alone; in the library's
// batch, between two other requests, as a Store sends concurrent ones; and
// as a script (EVAL), as Eval and a Store on a Redis that refuses
// functions send it.
var forms = []string{"function", "batch", "script"}

// loadLibrary loads the function library into rdb.
func loadLibrary(t *testing.T, rdb *redis.Client) {
	t.Helper()
	if err := rdb.FunctionLoadReplace(context.Background(), library).Err(); err != nil {
		t.Fatal(err)
	}
}

// conformanceRedis starts a Redis with the library loaded for a randomized
// conformance test, and returns its client and the test's seed (logged,
// so that a failure can be replayed). Under the race detector, which only
// slows these serial Redis calls down, the test is skipped: make test runs
// it in its pass without the detector.
func conformanceRedis(t *testing.T) (*redis.Client, int64) {
	t.Helper()
	skipUnderRace(t)
	rdb := redistest.Start(t).Client(t)
	loadLibrary(t, rdb)
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	return rdb, seed
}

// runForm runs the script of g with keys and args in form; params are
// args' limit parameters (args[2:2+len(params)]), or nil.
func runForm(ctx context.Context, rdb *redis.Client, form string, g *algorithm, keys []string, args, params []any) *redis.Cmd {
	switch form {
	case "function":
		return rdb.FCall(ctx, g.function, keys, args...)
	case "batch":
		// Around it, acquires of a token bucket on a key of its own: two
		// that share their parameters (sent once), before and after.
		otherArgs := []any{"a", 1, 10, int64(time.Second), 1, 0}
		other := &call{alg: algorithms[bucket.TokenBucket], key: [1]string{keys[0] + ":other"},
			args: otherArgs, params: otherArgs[2:]}
		calls := []*call{other, other, {alg: g, key: [1]string{keys[0]}, args: args, params: params}, other}
		cmds := make([]*redis.Cmd, len(calls))
		splitBatch(ctx, rdb.FCall(ctx, batchFunction, keys, batchArgs(calls)...), cmds)
		return cmds[2]
	}
	return g.script.Run(ctx, rdb, keys, args...)
}

// decideForm decides r as Eval does, in form.
func decideForm(ctx context.Context, rdb *redis.Client, form, prefix string, r Request) (bucket.Decision, error) {
	if form == "script" {
		return Eval(ctx, rdb, prefix, r)
	}
	var d bucket.Decision
	p := prepare(&r.Limit, r.Flags)
	if p.err != nil {
		return d, p.err
	}
	if err := r.check(); err != nil {
		return d, err
	}
	key, args := r.args(prefix, p, 0)
	v, err := runForm(ctx, rdb, form, p.g, []string{key}, args, p.params).Result()
	if err != nil {
		return d, classify(err)
	}
	err = parseReply(v, &r.Limit, &d)
	return d, err
}

// Ensure that the scripts and package bucket agree on every field of every
// decision, and on the stored state, over random sequences of requests at
// explicit times (going backwards now and then), of every algorithm, with
// small parameters and with the largest a global limit accepts, run as
// functions and as scripts.
func TestConformance(t *testing.T) {
	rdb, seed := conformanceRedis(t)
	// The forms in parallel, each on keys of its own: Redis works while
	// package bucket does.
	for _, form := range forms {
		t.Run(form, func(t *testing.T) { t.Parallel(); conformance(t, rdb, form, seed, t0, 1e12, 12) })
	}
	// Times in the first second of 1970 and just after, where a stored
	// time has fewer than 10 digits.
	t.Run("function/1970", func(t *testing.T) { t.Parallel(); conformance(t, rdb, "function", seed, 1e8, 8e8, 4) })
}

// bucketModel is package bucket's side of a conformance test: a bucket as
// the script keeps it.
type bucketModel interface {
	do(l *bucket.Limit, r Request) bucket.Decision
	// stored compares the bucket in Redis at rkey with the model's; it
	// returns a description of both if they differ.
	stored(t *testing.T, rdb *redis.Client, l *bucket.Limit, rkey string) (differ string)
}

func (m *model) stored(t *testing.T, rdb *redis.Client, _ *bucket.Limit, rkey string) string {
	s, ok := stored(t, rdb, rkey)
	if ok != m.written || (ok && s != m.s) {
		return fmt.Sprintf("stored %v (%v), bucket %v (%v)", s, ok, m.s, m.written)
	}
	return ""
}

// conformance runs limits random limits of each generator, each from a
// random time in [start, start+spread), against the model newModel
// returns.
func conformance(t *testing.T, rdb *redis.Client, form string, seed, start, spread int64, limits int) {
	conformanceOf(t, rdb, form, seed, start, spread, limits, limitGens, func() bucketModel { return new(model) })
}

func conformanceOf(t *testing.T, rdb *redis.Client, form string, seed, start, spread int64, limits int,
	gens []limitGen, newModel func() bucketModel) {
	ctx := context.Background()
	prefix := fmt.Sprintf("t:%s:%d:", form, start)
	const ops = 150
	for _, g := range gens {
		t.Run(g.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(seed), uint64(len(g.name))))
			for li := range limits {
				l := g.gen(r)
				if err := Check(l); err != nil {
					t.Fatalf("generated %+v: %v", l, err)
				}
				if err := l.Validate(); err != nil {
					t.Fatal(err)
				}
				key := fmt.Sprintf("%s-%d", g.name, li)
				m := newModel()
				now := start + r.Int64N(spread)
				step, maxCost := max(g.step(l), 1), max(g.cost(l), 1)
				for i := range ops {
					now = advance(r, now, step)
					req := Request{Limit: l, Key: key, At: now, Cost: r.Int64N(maxCost + 1)}
					if r.IntN(10) == 0 {
						req.Cost = 0
					}
					switch r.IntN(8) {
					case 0:
						req.Op = Refund
					case 1:
						if Peeks(l.Algorithm) {
							req.Op = Peek
						}
					}
					if l.Algorithm == bucket.TokenBucket {
						req.Flags = bucket.Flags(r.IntN(4)) // none, strict, smyte, both
					}
					got, err := decideForm(ctx, rdb, form, prefix, req)
					if err != nil {
						t.Fatalf("limit %+v op %d %+v: %v", l, i, req, err)
					}
					before := fmt.Sprint(m)
					want := m.do(&l, req)
					if got != want {
						t.Fatalf("limit %+v op %d: %+v\nscript %+v\nbucket %+v\nstate before %s", l, i, req, got, want, before)
					}
					if differ := m.stored(t, rdb, &l, string(AppendKey(nil, prefix, &l, key))); differ != "" {
						t.Fatalf("limit %+v op %d %+v: %s", l, i, req, differ)
					}
				}
			}
		})
	}
}

// advance returns the time of the next request after now: usually up to
// step later, now and then a long idle time later or up to step earlier.
func advance(r *rand.Rand, now, step int64) int64 {
	switch x := r.IntN(20); {
	case x == 0: // backwards
		return max(now-r.Int64N(step+1), 1)
	case x == 1: // a long idle time
		return now + r.Int64N(20*step+1)
	}
	return now + r.Int64N(step+1)
}
