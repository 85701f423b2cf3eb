package global

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/vocab"
)

// Several requests decided together (Store.Multi): a MULTI of global
// limits, all or nothing, or a Redis transaction of global rate-limit
// commands, each in order. Redis runs one script for one master, so the
// requests' keys must lie in one Cluster slot: the same rule on one Redis
// as on a Cluster, so that a configuration that works on one keeps working
// on the other.

// MultiMode is how Store.Multi decides its requests.
type MultiMode uint8

const (
	// AllOrNothing decides every request and, if each is allowed, applies
	// each; if any is denied, no bucket changes (package engine's Multi,
	// Smyte's drain dropped as it drops it).
	AllOrNothing MultiMode = iota
	// EachInOrder decides each request as it would be decided alone, one
	// after the other, each keeping what it changed (package engine's
	// Each: a Redis transaction).
	EachInOrder
)

// MaxMulti is the most requests one Store.Multi decides.
const MaxMulti = vocab.MaxMulti

// ErrCrossSlot: the requests of a Multi have keys in different Cluster
// slots, which one script call cannot decide together.
var ErrCrossSlot = errors.New("the keys lie in different Redis Cluster hash slots")

// multiAlgorithm is lua/multi.lua as the Store sends it: its function in
// the library, its place among the library's runs (a batch may carry it),
// and its EVAL form, which holds every algorithm's block (init).
var multiAlgorithm = &algorithm{}

// initMulti returns lua/multi.lua's text and sets multiAlgorithm's EVAL
// form: the blocks of algs (texts) and the multi, which calls them.
func initMulti(algs []bucket.Algorithm, texts []string) string {
	text, err := loadScript("multi.lua")
	if err != nil {
		panic(err)
	}
	var b strings.Builder
	b.WriteString("local runs, batch_time = {}, nil\n")
	for i := range algs {
		fmt.Fprintf(&b, "do\n%sruns[%d] = run\nend\n", texts[i], i+1)
	}
	b.WriteString(text + "return multi(KEYS, ARGV)\n")
	multiAlgorithm.script = redis.NewScript(b.String())
	return text
}

// Slot returns the Redis Cluster hash slot of a Redis key, as Redis
// computes it: CRC16 (XMODEM) of its hash tag, the text between its first
// "{" and the first "}" after it if that is not empty, else of the whole
// key, modulo 16384.
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc & 16383)
}

// KeySlot returns the Cluster slot of the Redis key of limit l's bucket
// for key k under prefix (AppendKey): the slot of k's text up to its first
// "}", the Redis key's hash tag.
func KeySlot(prefix string, l *bucket.Limit, k string) int {
	return Slot(string(AppendKey(nil, prefix, l, k)))
}

// Multi decides reqs (1 to MaxMulti acquires, whose keys lie in one
// Cluster slot) together in one script call, at one time, as mode says,
// and appends one decision per request to dst. It reports whether every
// request was allowed. Requests may name one bucket more than once: later
// ones see what earlier ones did. It fails with ErrCrossSlot if the keys
// lie in several slots, ErrUnsupported for a request no Multi can hold
// (a concurrency limit, which is leased), and ErrUnavailable as Decide
// does; then nothing was decided (or, for ErrUnavailable, the call may
// have run as one whole).
func (s *Store) Multi(ctx context.Context, reqs []Request, mode MultiMode, dst []bucket.Decision) ([]bucket.Decision, bool, error) {
	first, args, err := multiArgs(s.prefix, s.prepare, reqs, mode)
	if err != nil {
		return dst, false, err
	}
	v, err := s.do(ctx, &call{alg: multiAlgorithm, key: [1]string{first}, args: args, base: 2})
	if err != nil {
		return dst, false, err
	}
	return parseMulti(v, reqs, dst)
}

// multiArgs checks reqs as Store.Multi does and returns the multi
// script's first key and ARGV (lua/multi.lua), each request's limit
// prepared by prep.
func multiArgs(prefix string, prep func(bucket.Limit, bucket.Flags) *prepared, reqs []Request, mode MultiMode) (string, []any, error) {
	if len(reqs) == 0 || len(reqs) > MaxMulti {
		return "", nil, fmt.Errorf("%w: a MULTI holds 1 to %d items, got %d", ErrUnsupported, MaxMulti, len(reqs))
	}
	args := make([]any, 2, 2+len(reqs)*12)
	args[0], args[1] = "m", len(reqs)
	if mode == EachInOrder {
		args[0] = "e"
	}
	first, slot := "", 0
	for i := range reqs {
		r := reqs[i]
		r.Op = Acquire
		if mode == AllOrNothing {
			r.Flags &^= bucket.Smyte
		}
		if r.Limit.Algorithm == bucket.Concurrency {
			return "", nil, fmt.Errorf("%w: item %d: a concurrency limit is held with LEASE, not acquired in a MULTI", ErrUnsupported, i)
		}
		p := prep(r.Limit, r.Flags)
		if p.err != nil {
			return "", nil, fmt.Errorf("item %d: %w", i, p.err)
		}
		if err := r.check(); err != nil {
			return "", nil, fmt.Errorf("item %d: %w", i, err)
		}
		key, a := r.args(prefix, p, 0)
		if i == 0 {
			first, slot = key, Slot(key)
		} else if sl := Slot(key); sl != slot {
			return "", nil, fmt.Errorf("%w: item %d's key %q is in slot %d, item 0's %q in slot %d", ErrCrossSlot, i, reqs[i].Key, sl, reqs[0].Key, slot)
		}
		args = append(append(args, p.g.index, key, len(a)), a...)
	}
	return first, args, nil
}

// parseMulti turns the multi script's reply to reqs into their decisions,
// appended to dst, and whether all were allowed.
func parseMulti(v any, reqs []Request, dst []bucket.Decision) ([]bucket.Decision, bool, error) {
	a, ok := v.([]any)
	if !ok || len(a) != len(reqs)+1 {
		return dst, false, fmt.Errorf("%w: unexpected reply to a multi of %d: %v", ErrScript, len(reqs), v)
	}
	start := len(dst)
	for i := range reqs {
		var d bucket.Decision
		if err := parseReply(a[i+1], &reqs[i].Limit, &d); err != nil {
			return dst[:start], false, err
		}
		dst = append(dst, d)
	}
	return dst, a[0] == int64(1), nil
}

// Multi decides reqs together in Redis (Store.Multi), or, if Redis does
// not answer in time, by the strictest of their policies, ps (one per
// request), for all of them: closed denies every request; else local
// decides them together on this host's buckets of the local policy, each
// with its share, as mode says; else (every one open) each is allowed.
// It returns an error only for requests Redis or the checks refused.
func (f *Fallback) Multi(ctx context.Context, reqs []Request, ps []Policy, mode MultiMode, dst []bucket.Decision) ([]bucket.Decision, bool, Source, error) {
	start := len(dst)
	dst, allowed, err := f.store.Multi(ctx, reqs, mode, dst)
	if err == nil || !errors.Is(err, ErrUnavailable) {
		return dst, allowed, FromRedis, err
	}
	if !errors.Is(err, errShed) {
		f.unanswered.Add(1)
	}
	dst, allowed, err = f.multiByPolicy(ctx, reqs, ps, mode, dst[:start])
	return dst, allowed, FromPolicy, err
}

// Strictest returns the strictest of ps's outage policies (closed, then
// local, then open): the one that decides a MULTI of their limits while
// Redis is unavailable (Fallback.Multi); Open if ps is empty.
func Strictest(ps []Policy) OnUnavailable {
	policy := Open
	for _, p := range ps {
		switch {
		case p.OnUnavailable == Closed:
			policy = Closed
		case p.OnUnavailable == Local && policy == Open:
			policy = Local
		}
	}
	return policy
}

// multiByPolicy decides reqs by the strictest of ps at once, without
// Redis (Fallback.Multi).
func (f *Fallback) multiByPolicy(ctx context.Context, reqs []Request, ps []Policy, mode MultiMode, dst []bucket.Decision) ([]bucket.Decision, bool, error) {
	policy := Strictest(ps)
	for i := range reqs {
		if err := reqs[i].Limit.Validate(); err != nil {
			return dst, false, fmt.Errorf("item %d: %w", i, err)
		}
	}
	switch policy {
	case Open:
		f.opened.Add(uint64(len(reqs)))
		for i := range reqs {
			l := decisionLimit(&reqs[i].Limit)
			dst = append(dst, bucket.Decision{Allowed: true, Remaining: l, Limit: l, RetryAfter: -1})
		}
		return dst, true, nil
	case Closed:
		f.closed.Add(uint64(len(reqs)))
		retry := int64(f.store.retryAfter(ctx, &reqs[0]))
		for i := range reqs {
			dst = append(dst, bucket.Decision{Limit: decisionLimit(&reqs[i].Limit), RetryAfter: retry})
		}
		return dst, false, nil
	}
	f.locally.Add(uint64(len(reqs)))
	return f.multiLocal(ctx, reqs, ps, mode, dst)
}

// multiLocal decides reqs together on the local policy's buckets, each
// with its share of its limit: on copies of the buckets' states, written
// back if every request is allowed (AllOrNothing) or whatever they decide
// (EachInOrder). A request whose limit has no share is denied.
func (f *Fallback) multiLocal(ctx context.Context, reqs []Request, ps []Policy, mode MultiMode, dst []bucket.Decision) ([]bucket.Decision, bool, error) {
	type copied struct {
		b     *localBucket
		state bucket.State
		ext   []int64
	}
	var (
		buckets [MaxMulti]copied
		which   [MaxMulti]int
		n       int
	)
	now := time.Now().UnixNano()
	f.mu.Lock()
	defer f.mu.Unlock()
	allowed := true
	for i := range reqs {
		r := &reqs[i]
		share := Share(r.Limit, f.share(ps[i]))
		if err := share.Validate(); err != nil {
			allowed = false
			dst = append(dst, bucket.Decision{Limit: decisionLimit(&r.Limit), RetryAfter: int64(f.store.retryAfter(ctx, r))})
			which[i] = -1
			continue
		}
		b := f.bucketLocked(&r.Limit, share, r.Key, now)
		j := 0
		for j < n && buckets[j].b != b {
			j++
		}
		if j == n {
			buckets[n] = copied{b: b, state: b.state, ext: append([]int64(nil), b.ext...)}
			n++
		}
		which[i] = j
		c := &buckets[j]
		fl := r.Flags & (bucket.Strict | bucket.Smyte)
		if mode == AllOrNothing {
			fl &^= bucket.Smyte
		}
		var d bucket.Decision
		b.share.Decide(now, &c.state, c.ext, clampCost(r.Cost), fl, &d)
		d.Limit = decisionLimit(&b.share)
		allowed = allowed && d.Allowed
		dst = append(dst, d)
	}
	if allowed || mode == EachInOrder {
		for j := range n {
			c := &buckets[j]
			c.b.state = c.state
			copy(c.b.ext, c.ext)
		}
		start := len(dst) - len(reqs)
		for i := range reqs {
			if j := which[i]; j >= 0 {
				b := buckets[j].b
				b.freshAt = max(b.freshAt, now+max(dst[start+i].ResetAfter, 0))
			}
		}
	}
	return dst, allowed, nil
}
