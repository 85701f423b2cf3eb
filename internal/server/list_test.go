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

// With flag ALL (version 7) a list's ACQUIRE, PEEK and REFUND are
// answered with each limit's decision, in the list's order, and the index
// of the one that binds, whose decision the answer's is; without it, or on
// a name that is one limit, the answer is one decision, as in version 6.
func TestNamed_listAll(t *testing.T) {
	sc, _, _ := startNamed(t, `limits:
  login: ["token_bucket:max=2,refill_time=1h,refill_amount=1", "quota:limit=3,period=day"]
  one: "token_bucket:max=2,refill_time=1h,refill_amount=1"
`)
	c := dial(t, sc)
	login := proto.Named("login")
	day := time.Date(2024, 3, 10, 10, 0, 0, 0, time.UTC).UnixNano()
	hour := int64(time.Hour)
	toMidnight := time.Date(2024, 3, 11, 0, 0, 0, 0, time.UTC).UnixNano() - day
	all := func(code proto.Opcode, l proto.Limit, n, at int64) proto.Result {
		t.Helper()
		return c.do(func(b []byte) []byte {
			return proto.AppendItem(b, code, proto.FlagAll|proto.FlagAt, l, n, at, []byte("alice"))
		})
	}
	check := func(what string, r proto.Result, bound int, want ...proto.Decision) {
		t.Helper()
		if r.Status != proto.StatusOK || r.NLimits != len(want) || r.Bound != bound {
			t.Fatalf("%s: status %v, %d limits bound by %d, want %d bound by %d", what, r.Status, r.NLimits, r.Bound, len(want), bound)
		}
		for i := range want {
			if r.Limits[i] != want[i] {
				t.Errorf("%s: limit %d decided %+v, want %+v", what, i, r.Limits[i], want[i])
			}
		}
	}
	tbLeft := func(n int64) proto.Decision {
		return proto.Decision{Allowed: true, Remaining: n, Limit: 2, RetryAfter: -1, ResetAfter: (2 - n) * hour}
	}
	quotaLeft := func(n, at int64) proto.Decision {
		return proto.Decision{Allowed: true, Remaining: n, Limit: 3, RetryAfter: -1, ResetAfter: toMidnight - at}
	}
	r := all(proto.OpAcquire, login, 1, day)
	check("first", r, 0, tbLeft(1), quotaLeft(2, 0))
	if d := r.Decision; d.Limit != 2 || d.Remaining != 1 || d.ResetAfter != toMidnight {
		t.Errorf("the answer's decision %+v is not the list's: the bucket's limit, the least remaining, the latest reset", d)
	}
	all(proto.OpAcquire, login, 1, day)
	r = all(proto.OpAcquire, login, 1, day+hour)
	check("an hour later", r, 0, tbLeft(0), quotaLeft(0, hour))
	// The quota denies; the bucket, refilled by one, allows on its own.
	r = all(proto.OpAcquire, login, 1, day+2*hour)
	denied := proto.Decision{Allowed: false, Remaining: 0, Limit: 3, RetryAfter: toMidnight - 2*hour, ResetAfter: toMidnight - 2*hour}
	check("the quota denies", r, 1, proto.Decision{Allowed: true, Remaining: 0, Limit: 2, RetryAfter: -1, ResetAfter: 2 * hour}, denied)
	if r.Decision.Allowed || r.Decision.Limit != 3 {
		t.Errorf("the answer's decision %+v is not the quota's denial", r.Decision)
	}
	check("peek", all(proto.OpPeek, login, 0, day+2*hour), 1,
		proto.Decision{Allowed: true, Remaining: 1, Limit: 2, RetryAfter: -1, ResetAfter: hour}, denied)
	r = all(proto.OpRefund, login, 1, day+2*hour)
	check("refund", r, 1, proto.Decision{Allowed: true, Remaining: 2, Limit: 2, RetryAfter: -1, ResetAfter: 0},
		proto.Decision{Allowed: true, Remaining: 1, Limit: 3, RetryAfter: -1, ResetAfter: toMidnight - 2*hour})
	if r := c.do(func(b []byte) []byte {
		return proto.AppendItem(b, proto.OpReset, proto.FlagAll, login, 0, 0, []byte("alice"))
	}); r.Status != proto.StatusOK || !r.Existed {
		t.Errorf("reset with ALL: %+v", r)
	}
	// Without ALL, or on a name that is one limit: one decision.
	if r := c.acquire("alice", login, 0, day); r.Status != proto.StatusOK || r.NLimits != 0 {
		t.Errorf("without ALL: %+v", r)
	}
	if r := all(proto.OpAcquire, proto.Named("one"), 1, day); r.Status != proto.StatusOK || r.NLimits != 0 || r.Decision.Remaining != 1 {
		t.Errorf("one limit with ALL: %+v", r)
	}
	// ALL is version 7's: reserved before, so a version-6 frame is malformed.
	c6 := dial(t, sc)
	if _, rs := c6.sendVersion(6, 1, func(b []byte) []byte {
		return proto.AppendItem(b, proto.OpAcquire, proto.FlagAll, login, 1, 0, []byte("alice"))
	}); len(rs) != 1 || rs[0].Status != proto.StatusMalformed {
		t.Errorf("ALL in a version-6 frame: %+v", rs)
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
