package global

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/bucket"
)

// leaseModel is the script's lease op in terms of package bucket: return
// ret tokens (a window's only up to until), then take up to want tokens if
// at least need are available. It returns what the script replies.
func (m *model) lease(l *bucket.Limit, now, want, need, ret, until, life int64) [6]int64 {
	s := m.s
	if !m.written || l.FreshAt(&s, nil) <= now {
		l.Init(now, &s, nil)
	}
	init := s
	window := l.Algorithm == bucket.FixedWindow || l.Algorithm == bucket.SlidingWindow || l.Algorithm == bucket.Quota
	if ret > 0 && (until == 0 || now <= until || !window) {
		l.Refund(now, &s, ret, 0)
	}
	peek := s
	p, _ := l.Apply(now, &peek, 0, 0)
	var granted int64
	var d bucket.Decision
	if p.Remaining >= need {
		granted = min(want, p.Remaining)
		d, _ = l.Apply(now, &s, granted, 0)
	} else {
		c := s
		d, _ = l.Apply(now, &c, need, 0)
	}
	if s != init {
		m.s, m.written = s, true
	}
	valid := life
	if l.Algorithm == bucket.Quota { // the lease ends with the period that applies
		end := s[2]
		if ps, pe := l.CalendarPeriod(now); now >= s[2] && s[0] < ps {
			end = pe
		}
		valid = min(life, end-now)
	} else if window {
		start := now - now%l.Window // now >= 0
		start = max(start, s[0])
		valid = min(life, start+l.Window-now)
	}
	valid = max(valid, 0)
	return [6]int64{granted, d.Remaining, d.RetryAfter, d.ResetAfter, valid, now + valid}
}

// evalLease runs the script's lease op at an explicit time, in form.
func evalLease(ctx context.Context, rdb *redis.Client, form string, l bucket.Limit, key string, now, want, need, ret, until, life int64) ([6]int64, error) {
	var out [6]int64
	r := Request{Limit: l, Key: key, Cost: want, Op: lease_, At: now}
	p := prepare(&r.Limit, r.Flags)
	key, args := r.args("t:"+form+":", p, 4)
	u := ""
	if until != 0 {
		u = strconv.FormatInt(until, 10)
	}
	args = append(args, need, ret, u, life)
	v, err := runForm(ctx, rdb, form, p.g, []string{key}, args, p.params).Slice()
	if err != nil {
		return out, err
	}
	if len(v) != 6 {
		return out, fmt.Errorf("reply %v", v)
	}
	for i := range 5 {
		out[i] = v[i].(int64)
	}
	out[5], err = strconv.ParseInt(v[5].(string), 10, 64)
	return out, err
}

// Ensure that the scripts' leases are package bucket's acquire and refund:
// random sequences of lease takes and returns, at explicit times, for the
// algorithms that can be leased, run as functions and as scripts.
func TestLeaseConformance(t *testing.T) {
	rdb, seed := conformanceRedis(t)
	for _, form := range forms {
		t.Run(form, func(t *testing.T) { leaseConformance(t, rdb, form, seed) })
	}
}

func leaseConformance(t *testing.T, rdb *redis.Client, form string, seed int64) {
	var gens []limitGen
	for _, g := range limitGens {
		if g.name != "pacer" && g.name != "pacer/large" {
			gens = append(gens, g)
		}
	}
	leaseConformanceOf(t, rdb, form, seed, gens, func() leaseModel { return new(model) }, false)
}

// leaseModel is package bucket's side of a lease conformance test.
type leaseModel interface {
	bucketModel
	lease(l *bucket.Limit, now, want, need, ret, until, life int64) [6]int64
}

// leaseConformanceOf runs random sequences of lease takes and returns on 8
// limits of each generator, comparing each reply and the stored state
// with newModel's; with others, another host's acquire comes first now and
// then.
func leaseConformanceOf(t *testing.T, rdb *redis.Client, form string, seed int64, gens []limitGen, newModel func() leaseModel, others bool) {
	ctx := context.Background()
	prefix := "t:" + form + ":"
	for _, g := range gens {
		t.Run(g.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(seed), 7))
			for li := range 8 {
				l := g.gen(r)
				l.Validate()
				key := fmt.Sprintf("lease-%s-%d", g.name, li)
				m := newModel()
				now := t0 + r.Int64N(1e12)
				step, maxCost := max(g.step(l), 1), max(g.cost(l), 1)
				var held, until int64 // the current lease's tokens and end
				for i := range 120 {
					now += r.Int64N(step + 1)
					if r.IntN(15) == 0 {
						now = max(now-r.Int64N(step+1), 1)
					}
					need := 1 + r.Int64N(maxCost)
					want := need + r.Int64N(maxCost+1)
					ret := held
					if ret > 0 {
						ret = r.Int64N(held + 1) // some were used
					}
					life := 1 + r.Int64N(3*step)
					if others && r.IntN(3) == 0 { // another host's request first
						req := Request{Limit: l, Key: key, At: now, Cost: r.Int64N(maxCost + 1)}
						got, err := decideForm(ctx, rdb, form, prefix, req)
						if want := m.do(&l, req); err != nil || got != want {
							t.Fatalf("limit %+v op %d: acquire %+v: %v\nscript %+v\nbucket %+v", l, i, req, err, got, want)
						}
					}
					got, err := evalLease(ctx, rdb, form, l, key, now, want, need, ret, until, life)
					if err != nil {
						t.Fatal(err)
					}
					want6 := m.lease(&l, now, want, need, ret, until, life)
					if got != want6 {
						t.Fatalf("limit %+v op %d: now %d want %d need %d return %d until %d life %d\nscript %v\nbucket %v",
							l, i, now, want, need, ret, until, life, got, want6)
					}
					if differ := m.stored(t, rdb, &l, string(AppendKey(nil, prefix, &l, key))); differ != "" {
						t.Fatalf("limit %+v op %d: %s", l, i, differ)
					}
					held, until = got[0], got[5]
				}
			}
		})
	}
}
