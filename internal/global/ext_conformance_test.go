package global

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/redistest"
)

// extModel is package bucket's side of the conformance tests of the
// algorithms that keep an extension (sliding_log, window_counters): a
// bucket as the script keeps it, read as a new one when fresh, stored only
// when changed.
type extModel struct {
	s       bucket.State
	ext     []int64
	written bool
}

// open returns the bucket as a request at now finds it.
func (m *extModel) open(l *bucket.Limit, now int64) (bucket.State, []int64) {
	if m.ext == nil {
		m.ext = make([]int64, l.ExtWords())
	}
	s, ext := m.s, slices.Clone(m.ext)
	if !m.written || l.FreshAt(&s, ext) <= now {
		l.Init(now, &s, ext)
	}
	return s, ext
}

func (m *extModel) store(s bucket.State, ext []int64, changed bool) {
	if changed {
		m.s, m.ext, m.written = s, ext, true
	}
}

func (m *extModel) do(l *bucket.Limit, r Request) bucket.Decision {
	s, ext := m.open(l, r.At)
	var d bucket.Decision
	var changed bool
	if r.Op == Peek {
		l.Peek(r.At, &s, ext, &d)
	} else if r.Op == Refund {
		changed = l.DecideRefund(r.At, &s, ext, r.Cost, 0, &d)
	} else {
		changed = l.Decide(r.At, &s, ext, r.Cost, 0, &d)
	}
	m.store(s, ext, changed)
	return d
}

// storedExt reads a bucket of an extended algorithm from Redis as package
// bucket's State word 0 and extension; ok is false if there is none.
func storedExt(t *testing.T, rdb redis.Cmdable, l *bucket.Limit, key string) (w0 int64, ext []int64, ok bool) {
	t.Helper()
	v, err := rdb.Get(context.Background(), key).Result()
	if err == redis.Nil {
		return 0, nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	ext = make([]int64, l.ExtWords())
	switch l.Algorithm {
	case bucket.SlidingLog:
		b := []byte(v)
		if len(b) < 8 || (len(b)-8)%8 != 0 || (len(b)-8)/8 > len(ext) {
			t.Fatalf("bucket %s holds %d bytes", key, len(b))
		}
		head, fill := binary.BigEndian.Uint32(b), binary.BigEndian.Uint32(b[4:])
		w0 = int64(fill)<<32 | int64(head)
		for i := range (len(b) - 8) / 8 {
			hi, lo := binary.BigEndian.Uint32(b[8+8*i:]), binary.BigEndian.Uint32(b[12+8*i:])
			sec := int64(lo) | int64(hi>>30)<<32
			ext[i] = sec*1e9 + int64(hi&(1<<30-1))
		}
	case bucket.Concurrency:
		b := []byte(v)
		if len(b)%16 != 0 || len(b)/8 > len(ext) {
			t.Fatalf("bucket %s holds %d bytes", key, len(b))
		}
		for i := 0; i < len(b); i += 8 {
			if i%16 == 8 { // an id
				ext[i/8] = int64(binary.BigEndian.Uint64(b[i:]))
				continue
			}
			hi, lo := binary.BigEndian.Uint32(b[i:]), binary.BigEndian.Uint32(b[i+4:])
			ext[i/8] = (int64(lo)|int64(hi>>30)<<32)*1e9 + int64(hi&(1<<30-1))
		}
	case bucket.WindowCounters:
		b := []byte(v)
		if len(b) != 8*(1+len(ext)) {
			t.Fatalf("bucket %s holds %d bytes, want %d", key, len(b), 8*(1+len(ext)))
		}
		word := func(p []byte) int64 {
			f := math.Float64frombits(binary.BigEndian.Uint64(p))
			if f != math.Trunc(f) || f < 0 || f >= 1<<53 {
				t.Fatalf("bucket %s holds %v, not a count", key, f)
			}
			return int64(f)
		}
		w0 = word(b)
		for i := range ext {
			ext[i] = word(b[8+8*i:])
		}
	}
	return w0, ext, true
}

// extGens are the limits of the extended algorithms the conformance tests
// draw, as limitGens.
var extGens = []limitGen{
	{"sliding_log", func(r *rand.Rand) bucket.Limit {
		return bucket.Limit{Algorithm: bucket.SlidingLog, Max: between(r, 1, 12), Window: between(r, ms, 2000*ms)}
	}, func(l bucket.Limit) int64 { return l.Window / 5 }, func(l bucket.Limit) int64 { return 4 }},
	{"sliding_log/large", func(r *rand.Rand) bucket.Limit {
		return bucket.Limit{Algorithm: bucket.SlidingLog, Max: between(r, 1, bucket.MaxLogLimit), Window: between(r, ms, MaxDuration)}
	}, func(l bucket.Limit) int64 { return l.Window / 5 / l.Max * 8 }, func(l bucket.Limit) int64 { return l.Max / 3 }},
	{"window_counters", func(r *rand.Rand) bucket.Limit {
		return bucket.Limit{Algorithm: bucket.WindowCounters, Max: between(r, 1, 20), Window: between(r, ms, 2000*ms),
			Counters: between(r, 1, 8), CountDenied: r.IntN(2) == 0}
	}, func(l bucket.Limit) int64 { return l.Window / 5 }, func(l bucket.Limit) int64 { return 4 }},
	{"window_counters/large", func(r *rand.Rand) bucket.Limit {
		return bucket.Limit{Algorithm: bucket.WindowCounters, Max: between(r, 1, MaxCount), Window: between(r, ms, MaxDuration/2),
			Counters: between(r, 1, bucket.MaxCounters), CountDenied: r.IntN(2) == 0}
	}, func(l bucket.Limit) int64 { return l.Window / 5 }, func(l bucket.Limit) int64 { return l.Max / 3 }},
}

// Ensure that the scripts of the extended algorithms and package bucket
// agree on every field of every decision and on the stored state (State
// word 0 and every word of the extension), as conformance does for the
// others.
func TestExtConformance(t *testing.T) {
	rdb, seed := conformanceRedis(t)
	for _, form := range forms { // in parallel, as TestConformance
		t.Run(form, func(t *testing.T) { t.Parallel(); extConformance(t, rdb, form, seed, t0, 1e12, 12) })
	}
	t.Run("function/1970", func(t *testing.T) { t.Parallel(); extConformance(t, rdb, "function", seed, 1e8, 8e8, 4) })
}

func extConformance(t *testing.T, rdb *redis.Client, form string, seed, start, spread int64, limits int) {
	conformanceOf(t, rdb, form, seed, start, spread, limits, extGens, func() bucketModel { return new(extModel) })
}

func (m *extModel) stored(t *testing.T, rdb *redis.Client, l *bucket.Limit, rkey string) string {
	w0, ext, ok := storedExt(t, rdb, l, rkey)
	if l.Algorithm == bucket.Concurrency {
		w0 = m.s[0] // not kept in Redis: package bucket does not read it
	}
	if ok != m.written || (ok && (w0 != m.s[0] || !slices.Equal(ext, m.ext))) {
		return fmt.Sprintf("stored %d %v (%v), bucket %d %v (%v)", w0, ext, ok, m.s[0], m.ext, m.written)
	}
	return ""
}

// lease is the script's lease op on an extended algorithm in terms of
// package bucket, as model.lease is for the others: return ret tokens
// (sliding_log: as many of the newest entries as are at until and in the
// window; window_counters: only up to until), then take up to want tokens
// if at least need are available.
func (m *extModel) lease(l *bucket.Limit, now, want, need, ret, until, life int64) [6]int64 {
	s, ext := m.open(l, now)
	var d bucket.Decision
	changed := false
	if ret > 0 && until != 0 {
		switch l.Algorithm {
		case bucket.SlidingLog:
			head, fill := int(uint32(s[0])), int(s[0]>>32)
			c := int64(0)
			for k := 1; c < ret && k <= fill; k++ {
				i := (head - k + len(ext)) % len(ext)
				if ext[i] != until || until-now <= -l.Window {
					break
				}
				c++
			}
			if c > 0 {
				changed = l.DecideRefund(now, &s, ext, c, 0, &d)
			}
		case bucket.WindowCounters:
			if now <= until {
				changed = l.DecideRefund(now, &s, ext, ret, 0, &d)
			}
		}
	}
	ps, pext := s, slices.Clone(ext)
	l.Decide(now, &ps, pext, 0, 0, &d)
	granted, until := int64(0), now
	if d.Remaining >= need {
		granted = min(want, d.Remaining)
		if l.Decide(now, &s, ext, granted, 0, &d) {
			changed = true
		}
		if l.Algorithm == bucket.SlidingLog {
			head := int(uint32(s[0]))
			until = ext[(head-1+len(ext))%len(ext)]
		}
	} else {
		cs, cext := s, slices.Clone(ext)
		l.Decide(now, &cs, cext, need, 0, &d)
	}
	m.store(s, ext, changed)
	valid := min(life, l.Window/10)
	if l.Algorithm == bucket.WindowCounters {
		w := (l.Window + l.Counters - 1) / l.Counters
		valid = min(life, w-now%w)
		until = now + max(valid, 0)
	}
	return [6]int64{granted, d.Remaining, d.RetryAfter, d.ResetAfter, max(valid, 0), until}
}

// Ensure that the scripts' leases of the extended algorithms are package
// bucket's decisions and refunds, as TestLeaseConformance does for the
// others, with the stored state compared after each.
func TestExtLeaseConformance(t *testing.T) {
	rdb, seed := conformanceRedis(t)
	var gens []limitGen
	for _, g := range extGens {
		if lookup(g.gen(rand.New(rand.NewPCG(1, 1))).Algorithm).leased {
			gens = append(gens, g)
		}
	}
	for _, form := range forms {
		t.Run(form, func(t *testing.T) {
			t.Parallel()
			leaseConformanceOf(t, rdb, form, seed, gens, func() leaseModel { return new(extModel) }, true)
		})
	}
}

// Ensure that the concurrency script is package bucket's concurrency
// leases: random sequences of holds (with ids drawn to collide now and
// then), releases (of held, expired, released and unknown leases), and
// acquires and refunds (which only report), at explicit times, as
// functions and as scripts; every field of every reply, the lease ids and
// the stored entries compared.
func TestConcurrencyConformance(t *testing.T) {
	rdb, seed := conformanceRedis(t)
	ctx := context.Background()
	gens := []struct {
		name string
		gen  func(r *rand.Rand) bucket.Limit
	}{
		{"small", func(r *rand.Rand) bucket.Limit {
			return bucket.Limit{Algorithm: bucket.Concurrency, Max: between(r, 1, 6), Lease: between(r, ms, 2000*ms)}
		}},
		{"large", func(r *rand.Rand) bucket.Limit {
			return bucket.Limit{Algorithm: bucket.Concurrency, Max: between(r, 1, bucket.MaxConcurrency), Lease: between(r, ms, MaxDuration)}
		}},
	}
	for _, form := range forms {
		for _, g := range gens {
			for _, start := range []int64{t0, 1e8} {
				t.Run(fmt.Sprintf("%s/%s/%d", form, g.name, start), func(t *testing.T) {
					r := rand.New(rand.NewPCG(uint64(seed), uint64(start)))
					for li := range 8 {
						l := g.gen(r)
						if err := Check(l); err != nil {
							t.Fatal(err)
						}
						l.Validate()
						key := fmt.Sprintf("conc-%s-%d", g.name, li)
						prefix := fmt.Sprintf("t:%s:%d:", form, start)
						var m extModel
						now := start + r.Int64N(1e9)
						step := max(l.Lease/max(l.Max/2, 1), 1)
						var ids []int64
						for i := range 200 {
							now += r.Int64N(step + 1)
							if r.IntN(15) == 0 {
								now = max(now-r.Int64N(step+1), 1)
							}
							req := Request{Limit: l, Key: key, At: now}
							switch x := r.IntN(10); {
							case x < 5:
								req.Op = hold
								req.Lease = int64(r.Uint64())
								if r.IntN(4) == 0 && len(ids) > 0 {
									req.Lease = ids[r.IntN(len(ids))] // taken already
								} else if r.IntN(8) == 0 {
									req.Lease = []int64{0, 1, -1, 1<<63 - 1}[r.IntN(4)]
								}
							case x < 8:
								req.Op = release
								if len(ids) > 0 {
									req.Lease = ids[r.IntN(len(ids))]
								}
							default:
								req.Op = Op(r.IntN(3)) // acquire, refund or peek: a report
								req.Cost = r.Int64N(3)
							}
							s, ext := m.open(&l, now)
							var want bucket.Decision
							var wantN int64
							var changed, released bool
							switch req.Op {
							case hold:
								wantN, changed = l.AcquireLease(now, &s, ext, req.Lease, &want)
							case release:
								released, changed = l.ReleaseLease(now, &s, ext, req.Lease, &want)
								if released {
									wantN = 1
								}
							case Refund:
								changed = l.DecideRefund(now, &s, ext, req.Cost, 0, &want)
							case Peek:
								l.Peek(now, &s, ext, &want)
							default:
								changed = l.Decide(now, &s, ext, req.Cost, 0, &want)
							}
							m.store(s, ext, changed)

							var got bucket.Decision
							var gotN int64
							var err error
							if req.Op == hold || req.Op == release {
								p := prepare(&req.Limit, 0)
								op := opHold
								if req.Op == release {
									op = opRelease
								}
								k, args := req.leaseArgs(prefix, p, op)
								var v any
								if v, err = runForm(ctx, rdb, form, p.g, []string{k}, args, p.params).Result(); err == nil {
									got, gotN, err = parseLeaseReply(v, &req.Limit, &got)
								}
							} else {
								got, err = decideForm(ctx, rdb, form, prefix, req)
							}
							if err != nil {
								t.Fatalf("limit %+v op %d %+v: %v", l, i, req, err)
							}
							if got != want || gotN != wantN {
								t.Fatalf("limit %+v op %d: %+v\nscript %+v %d\nbucket %+v %d", l, i, req, got, gotN, want, wantN)
							}
							if req.Op == hold && gotN != 0 {
								ids = append(ids, gotN)
							}
							if differ := m.stored(t, rdb, &l, string(AppendKey(nil, prefix, &l, key))); differ != "" {
								t.Fatalf("limit %+v op %d %+v: %s", l, i, req, differ)
							}
						}
					}
				})
			}
		}
	}
}

// Ensure the bound of a leased sliding log: a lease's tokens are entries
// at the time it was granted, admitted by their host during the lease's
// life, at most a tenth of the window; so in any span of the window less
// that life the fleet admits at most the limit (over a whole window, more).
// Four simulated hosts take leases of 10 of a log of 20 per second, at
// explicit times, and admit from them as their requests come (every 15 ms
// on average, from any host).
func TestLeasedLogBound(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	loadLibrary(t, rdb)
	ctx := context.Background()
	const limit, window, hosts = 20, int64(time.Second), 4
	life := window / 10
	l := bucket.Limit{Algorithm: bucket.SlidingLog, Max: limit, Window: window}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	type host struct{ tokens, expires, until int64 }
	hs := make([]host, hosts)
	r := rand.New(rand.NewPCG(1, 2))
	var admitted []int64
	now := t0
	for range 4000 {
		now += r.Int64N(30 * int64(time.Millisecond))
		h := &hs[r.IntN(hosts)]
		if h.tokens == 0 || now >= h.expires {
			ret := int64(0)
			if h.tokens > 0 {
				ret = h.tokens // its lease expired unused
			}
			got, err := evalLease(ctx, rdb, "function", l, "bound", now, 10, 1, ret, h.until, int64(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if got[4] > life {
				t.Fatalf("a lease of a log of a %d ns window is valid for %d ns, more than a tenth", window, got[4])
			}
			*h = host{tokens: got[0], expires: now + got[4], until: got[5]}
		}
		if h.tokens > 0 {
			h.tokens--
			admitted = append(admitted, now)
		}
	}
	most, mostFull := 0, 0
	for i, at := range admitted {
		n, full := 0, 0
		for j := i; j >= 0 && admitted[j] > at-window; j-- {
			full++
			if admitted[j] > at-(window-life) {
				n++
			}
		}
		most, mostFull = max(most, n), max(mostFull, full)
	}
	if most > limit {
		t.Errorf("the fleet admitted %d within %d ns, above the limit %d", most, window-life, limit)
	}
	if len(admitted) < 20*limit {
		t.Errorf("only %d admitted over %d windows", len(admitted), (now-t0)/window)
	}
	t.Logf("%d admitted; at most %d in any %v, %d in any %v", len(admitted), most, time.Duration(window-life), mostFull, time.Duration(window))
}
