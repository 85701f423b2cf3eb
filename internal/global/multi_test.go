package global

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/redistest"
)

func (m *model) clone() bucketModel    { c := *m; return &c }
func (m *extModel) clone() bucketModel { c := *m; return &c }

// cloneable is a bucketModel that can be copied, for a multi decided on
// copies.
type cloneable interface {
	bucketModel
	clone() bucketModel
}

// multiModel decides reqs (at one explicit time) on models, as package
// engine's Multi (AllOrNothing) or Each (EachInOrder) would: in order on
// copies of the buckets, kept if all are allowed (or for Each, always).
func multiModel(models map[string]cloneable, prefix string, reqs []Request, mode MultiMode) ([]bucket.Decision, bool) {
	copies := make(map[string]bucketModel)
	var ds []bucket.Decision
	allowed := true
	for _, r := range reqs {
		rk := string(AppendKey(nil, prefix, &r.Limit, r.Key))
		m := copies[rk]
		if m == nil {
			m = models[rk].clone()
			copies[rk] = m
		}
		if mode == AllOrNothing {
			r.Flags &^= bucket.Smyte
		}
		d := m.do(&r.Limit, r)
		allowed = allowed && d.Allowed
		ds = append(ds, d)
	}
	if allowed || mode == EachInOrder {
		for rk, m := range copies {
			models[rk] = m.(cloneable)
		}
	}
	return ds, allowed
}

// multiForm runs the multi script on reqs in form, as Store.Multi sends it
// (function, batch: between two other requests, script).
func multiForm(ctx context.Context, rdb *redis.Client, form, prefix string, reqs []Request, mode MultiMode) ([]bucket.Decision, bool, error) {
	first, args, err := multiArgs(prefix, func(l bucket.Limit, f bucket.Flags) *prepared { return prepare(&l, f) }, reqs, mode)
	if err != nil {
		return nil, false, err
	}
	v, err := runForm(ctx, rdb, form, multiAlgorithm, []string{first}, args, nil).Result()
	if err != nil {
		return nil, false, err
	}
	return parseMulti(v, reqs, nil)
}

// Ensure that the multi script decides as package engine's Multi and Each
// do on package bucket's model: every field of every decision, whether the
// whole was allowed, and the stored state of every bucket, over random
// multis of one to four items (of every algorithm but concurrency, some
// on one bucket twice) on keys of one hash tag, at explicit times, in each
// form the Store sends it.
func TestMultiConformance(t *testing.T) {
	rdb, seed := conformanceRedis(t)
	gens := append(slices.Clone(limitGens), extGens...)
	for _, form := range forms {
		for _, mode := range []MultiMode{AllOrNothing, EachInOrder} {
			t.Run(form+"/"+strconv.Itoa(int(mode)), func(t *testing.T) {
				t.Parallel()
				multiConformance(t, rdb, form, mode, seed, gens)
			})
		}
	}
}

func multiConformance(t *testing.T, rdb *redis.Client, form string, mode MultiMode, seed int64, gens []limitGen) {
	ctx := context.Background()
	prefix := fmt.Sprintf("m:%s:%d:", form, mode)
	r := rand.New(rand.NewPCG(uint64(seed), uint64(mode)))
	const groups, ops = 40, 60
	denied, allowedN := 0, 0
	for gi := range groups {
		// A pool of three buckets under one tag: limits of random
		// algorithms, on two keys.
		type slot struct {
			g limitGen
			l bucket.Limit
			k string
		}
		var pool []slot
		for i := range 3 {
			g := gens[r.IntN(len(gens))]
			l := g.gen(r)
			pool = append(pool, slot{g, l, fmt.Sprintf("{g%d}:k%d", gi, i%2)})
		}
		models := make(map[string]cloneable)
		for _, p := range pool {
			rk := string(AppendKey(nil, prefix, &p.l, p.k))
			if models[rk] == nil {
				if p.l.Algorithm.Extended() {
					models[rk] = new(extModel)
				} else {
					models[rk] = new(model)
				}
			}
		}
		now := t0 + r.Int64N(1e12)
		step := int64(1)
		for _, p := range pool {
			step = max(step, p.g.step(p.l))
		}
		for i := range ops {
			now = advance(r, now, step)
			var reqs []Request
			for range 1 + r.IntN(4) {
				p := pool[r.IntN(len(pool))]
				req := Request{Limit: p.l, Key: p.k, At: now, Cost: r.Int64N(max(p.g.cost(p.l), 1) + 1)}
				if r.IntN(10) == 0 {
					req.Cost = 0
				}
				if p.l.Algorithm == bucket.TokenBucket {
					req.Flags = bucket.Flags(r.IntN(4))
				}
				reqs = append(reqs, req)
			}
			got, gotAll, err := multiForm(ctx, rdb, form, prefix, reqs, mode)
			if err != nil {
				t.Fatalf("group %d op %d %+v: %v", gi, i, reqs, err)
			}
			want, wantAll := multiModel(models, prefix, reqs, mode)
			if gotAll != wantAll || !slices.Equal(got, want) {
				t.Fatalf("group %d op %d %+v:\nscript %v %+v\nengine %v %+v", gi, i, reqs, gotAll, got, wantAll, want)
			}
			if wantAll {
				allowedN++
			} else {
				denied++
			}
			for _, p := range pool {
				rk := string(AppendKey(nil, prefix, &p.l, p.k))
				if differ := models[rk].stored(t, rdb, &p.l, rk); differ != "" {
					t.Fatalf("group %d op %d %+v: %s: %s", gi, i, reqs, rk, differ)
				}
			}
		}
	}
	if denied == 0 || allowedN == 0 {
		t.Errorf("%d multis allowed, %d denied: the test must see both", allowedN, denied)
	}
}

// checkSlots checks that Slot is Redis's CLUSTER KEYSLOT (rdb: a Cluster
// node), hash tags included.
func checkSlots(t *testing.T, rdb *redis.Client) {
	ctx := context.Background()
	for _, k := range []string{"", "a", "foo", "{user1000}.following", "{}a", "a{}b", "a{b", "a}b{c}", "{a}{b}", "sluice:{{t}:x}:token_bucket:5",
		"sluice:{tenant42}:login}:gcra", "123456789", "\xff\x00{\x01}"} {
		want, err := rdb.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := Slot(k); int64(got) != want {
			t.Errorf("Slot(%q) = %d, Redis says %d", k, got, want)
		}
	}
	l := tokenBucket(5, hour)
	w := bucket.Limit{Algorithm: bucket.FixedWindow, Max: 3, Window: hour}
	if KeySlot("p:", &l, "{tenant42}:login") != KeySlot("p:", &w, "{tenant42}:signup") {
		t.Error("two keys of one tag are in different slots")
	}
	if KeySlot("p:", &l, "login") == KeySlot("p:", &w, "signup") {
		t.Error("login and signup share a slot: pick other keys")
	}
}

// Ensure that a Store's Multi on a Cluster decides the items of one tag
// together, all or nothing, and refuses items of different slots before
// deciding any; and on one Redis alike.
func TestStoreMulti(t *testing.T) {
	for _, name := range []string{"redis", "cluster"} {
		t.Run(name, func(t *testing.T) {
			var addrs []string
			if name == "redis" {
				addrs = []string{redistest.Start(t).Addr}
			} else {
				c := redistest.StartCluster(t)
				addrs = c.Addrs()
				checkSlots(t, c.Nodes[0].Client(t))
			}
			s := newStore(t, Options{Addrs: addrs, Cluster: name == "cluster"})
			ctx := context.Background()
			tight, loose := tokenBucket(2, hour), tokenBucket(10, hour)
			reqs := []Request{{Limit: tight, Key: "{t1}:a", Cost: 1}, {Limit: loose, Key: "{t1}:b", Cost: 1}}
			for i := range 4 {
				ds, ok, err := s.Multi(ctx, reqs, AllOrNothing, nil)
				if err != nil {
					t.Fatal(err)
				}
				if ok != (i < 2) || ds[0].Allowed != (i < 2) || ds[1].Allowed != true {
					t.Fatalf("multi %d: allowed %v, %+v", i, ok, ds)
				}
			}
			// The loose bucket gave only what the allowed multis took.
			d, err := s.Decide(ctx, Request{Limit: loose, Key: "{t1}:b", Cost: 0})
			if err != nil {
				t.Fatal(err)
			}
			if d.Remaining != 8 {
				t.Errorf("the looser item's bucket has %d left, want 8: a denied multi consumed it", d.Remaining)
			}
			_, _, err = s.Multi(ctx, []Request{{Limit: loose, Key: "login", Cost: 1}, {Limit: loose, Key: "signup", Cost: 1}}, AllOrNothing, nil)
			if !errors.Is(err, ErrCrossSlot) {
				t.Fatalf("multi across slots: %v, want ErrCrossSlot", err)
			}
			conc := bucket.Limit{Algorithm: bucket.Concurrency, Max: 2, Lease: hour}
			if _, _, err = s.Multi(ctx, []Request{{Limit: conc, Key: "c", Cost: 1}}, AllOrNothing, nil); !errors.Is(err, ErrUnsupported) {
				t.Fatalf("multi of a concurrency limit: %v, want ErrUnsupported", err)
			}
		})
	}
}

// Ensure that concurrent multis of two items on one tag from several
// Stores admit exactly the tighter item's limit, and never consume the
// looser when denied.
func TestStoreMultiConcurrent(t *testing.T) {
	srv := redistest.Start(t)
	const stores, workers, tight, loose = 2, 16, 10, 1000
	ss := make([]*Store, stores)
	for i := range ss {
		ss[i] = newStore(t, Options{Addrs: []string{srv.Addr}})
	}
	reqs := []Request{{Limit: tokenBucket(tight, hour), Key: "{c}:tight", Cost: 1}, {Limit: tokenBucket(loose, hour), Key: "{c}:loose", Cost: 1}}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for i := range stores * workers {
		wg.Go(func() {
			for range 2 {
				_, ok, err := ss[i%stores].Multi(context.Background(), reqs, AllOrNothing, nil)
				if err != nil {
					t.Error(err)
					return
				}
				if ok {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := admitted.Load(); n != tight {
		t.Errorf("admitted %d multis, want exactly %d", n, tight)
	}
	d, err := ss[0].Decide(context.Background(), Request{Limit: reqs[1].Limit, Key: reqs[1].Key})
	if err != nil {
		t.Fatal(err)
	}
	if d.Remaining != loose-tight {
		t.Errorf("the looser bucket has %d left, want %d", d.Remaining, loose-tight)
	}
}
