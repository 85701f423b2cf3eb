package server

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/proto"
)

// A named limit that lists several limits decides them all or nothing on
// one key: a request one of them denies consumes nothing of the others;
// the decision reports the limit that denied (its limit and retry time) or
// the one with the least left, and the least remaining of all; PEEK,
// REFUND and RESET apply to each; a LEASE or a MULTI item of the list is
// refused.
func TestNamed_list(t *testing.T) {
	sc, _, _ := startNamed(t, `limits:
  login: ["token_bucket:max=2,refill_time=1h,refill_amount=1", "quota:limit=3,period=day"]
`)
	c := dial(t, sc)
	login := proto.Named("login")
	tb := proto.TokenBucketLimit(2, time.Hour, 1)
	quota := proto.QuotaLimit(3, proto.QuotaDay, 1, "", 0, 0)
	day := time.Date(2024, 3, 10, 10, 0, 0, 0, time.UTC).UnixNano()
	hour := int64(time.Hour)
	toMidnight := time.Date(2024, 3, 11, 0, 0, 0, 0, time.UTC).UnixNano() - day
	check := func(what string, r proto.Result, allowed bool, remaining, limit, retry int64) {
		t.Helper()
		d := r.Decision
		if r.Status != proto.StatusOK || d.Allowed != allowed || d.Remaining != remaining || d.Limit != limit || d.RetryAfter != retry {
			t.Fatalf("%s: %+v (status %v), want allowed %v remaining %d limit %d retry_after %d", what, d, r.Status, allowed, remaining, limit, retry)
		}
	}
	check("first", c.acquire("alice", login, 1, day), true, 1, 2, -1)
	check("second", c.acquire("alice", login, 1, day), true, 0, 2, -1)
	check("the bucket denies", c.acquire("alice", login, 1, day), false, 0, 2, hour)
	// All or nothing: the denied request took nothing of the quota.
	check("the quota itself", c.acquire("alice", quota, 0, day), true, 1, 3, -1)
	check("an hour later: both at 0, the first reported", c.acquire("alice", login, 1, day+hour), true, 0, 2, -1)
	check("the quota denies", c.acquire("alice", login, 1, day+2*hour), false, 0, 3, toMidnight-2*hour)
	check("the bucket was not charged", c.acquire("alice", tb, 0, day+2*hour), true, 1, 2, -1)
	peek := c.do(func(b []byte) []byte {
		return proto.AppendItem(b, proto.OpPeek, proto.FlagAt, login, 0, day+2*hour, []byte("alice"))
	})
	check("peek", peek, false, 0, 3, toMidnight-2*hour)
	refund := c.do(func(b []byte) []byte {
		return proto.AppendItem(b, proto.OpRefund, proto.FlagAt, login, 1, day+2*hour, []byte("alice"))
	})
	check("refund: one back to each, the bucket full again", refund, true, 1, 3, -1)
	if r := c.do(func(b []byte) []byte { return proto.AppendItem(b, proto.OpReset, 0, login, 0, 0, []byte("alice")) }); r.Status != proto.StatusOK || !r.Existed {
		t.Fatalf("reset: %+v", r)
	}
	check("after the reset", c.acquire("alice", quota, 0, day+2*hour), true, 3, 3, -1)
	if r := c.do(func(b []byte) []byte { return proto.AppendLease(b, 0, login, []byte("alice")) }); r.Status != proto.StatusInvalidLimit {
		t.Errorf("lease of a list: %+v", r)
	}
	multi := c.do(func(b []byte) []byte {
		return proto.AppendMulti(b, 0, 0, []proto.MultiItem{{Limit: login, Cost: 1, Key: []byte("alice")}})
	})
	if multi.Status != proto.StatusInvalidLimit {
		t.Errorf("a MULTI naming a list: %+v", multi)
	}
}

// A named limit's overrides decide their keys: the exact key's, else the
// longest pattern's, else the limit's own; in a MULTI item as well.
func TestNamed_overrides(t *testing.T) {
	sc, _, _ := startNamed(t, `limits:
  api:
    limit: "quota:limit=100,period=day"
    overrides:
      "tenant:acme": "quota:limit=10000,period=day,tz=America/New_York"
      "tenant:beta-*": "token_bucket:max=500,refill_time=1m"
      "tenant:beta-big*": ["token_bucket:max=5000,refill_time=1m", "quota:limit=9,period=week"]
`)
	c := dial(t, sc)
	api := proto.Named("api")
	for _, k := range []struct {
		key   string
		limit int64
	}{
		{"tenant:acme", 10000}, {"tenant:acme-2", 100}, {"tenant:beta-1", 500}, {"tenant:beta-big1", 9}, {"tenant:other", 100},
	} {
		r := c.acquire(k.key, api, 1, 0)
		if r.Status != proto.StatusOK || !r.Decision.Allowed || r.Decision.Limit != k.limit {
			t.Errorf("%s: %+v, want the limit %d", k.key, r, k.limit)
		}
	}
	m := c.do(func(b []byte) []byte {
		return proto.AppendMulti(b, 0, 0, []proto.MultiItem{{Limit: api, Cost: 1, Key: []byte("tenant:acme")}})
	})
	if m.Status != proto.StatusOK || m.NDecisions != 1 || m.Decisions[0].Limit != 10000 {
		t.Errorf("a MULTI item of an overridden key: %+v", m)
	}
	if m := c.do(func(b []byte) []byte {
		return proto.AppendMulti(b, 0, 0, []proto.MultiItem{{Limit: api, Cost: 1, Key: []byte("tenant:beta-big2")}})
	}); m.Status != proto.StatusInvalidLimit {
		t.Errorf("a MULTI item whose override is a list: %+v", m)
	}
}
