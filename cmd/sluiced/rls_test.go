package main

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Envoy's rate limit service through a real sluiced and the generated
// gRPC client, as Envoy calls it.

// rlsServer starts sluiced serving the rate limit service with config
// and returns a client of it.
func rlsServer(t *testing.T, config string, args ...string) rlspb.RateLimitServiceClient {
	t.Helper()
	dir := shortDir(t)
	sock := filepath.Join(dir, "rls")
	p := startBinary(t, append([]string{"--state", filepath.Join(dir, "state"), "--socket", filepath.Join(dir, "s"),
		"--resp-socket", "-", "--slots", "4096", "--config", config, "--rls-socket", sock}, args...)...)
	waitFor(t, "the rate limit service's socket", func() bool {
		select {
		case <-p.exited:
			t.Fatalf("sluiced exited: %v", p.err)
		default:
		}
		_, err := os.Stat(sock)
		return err == nil
	})
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlspb.NewRateLimitServiceClient(conn)
}

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *ratelimitpb.RateLimitDescriptor {
	d := &ratelimitpb.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitpb.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// want is one descriptor's expected status: its code, its current limit
// (per 0 for none), and its remaining count.
type want struct {
	over      bool
	per       uint32
	unit      rlspb.RateLimitResponse_RateLimit_Unit
	name      string
	remaining uint32
}

const (
	second = rlspb.RateLimitResponse_RateLimit_SECOND
	minute = rlspb.RateLimitResponse_RateLimit_MINUTE
	hour   = rlspb.RateLimitResponse_RateLimit_HOUR
	day    = rlspb.RateLimitResponse_RateLimit_DAY
)

// unlimitedRemaining is the remaining count of an unlimited descriptor.
const unlimitedRemaining = math.MaxUint32

func call(t *testing.T, c rlspb.RateLimitServiceClient, req *rlspb.RateLimitRequest) *rlspb.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%v): %v", req, err)
	}
	return resp
}

// check compares a response with the wanted statuses, in order.
func check(t *testing.T, what string, resp *rlspb.RateLimitResponse, ws ...want) {
	t.Helper()
	overall := rlspb.RateLimitResponse_OK
	for _, w := range ws {
		if w.over {
			overall = rlspb.RateLimitResponse_OVER_LIMIT
		}
	}
	if resp.OverallCode != overall {
		t.Errorf("%s: overall_code %v, want %v", what, resp.OverallCode, overall)
	}
	if len(resp.Statuses) != len(ws) {
		t.Fatalf("%s: %d statuses, want %d", what, len(resp.Statuses), len(ws))
	}
	for i, w := range ws {
		st := resp.Statuses[i]
		code := rlspb.RateLimitResponse_OK
		if w.over {
			code = rlspb.RateLimitResponse_OVER_LIMIT
		}
		if st.Code != code || st.LimitRemaining != w.remaining {
			t.Errorf("%s: status %d: code %v remaining %d, want %v %d", what, i, st.Code, st.LimitRemaining, code, w.remaining)
		}
		cl := st.CurrentLimit
		switch {
		case w.per == 0 && w.unit == 0 && cl != nil:
			t.Errorf("%s: status %d: current_limit %v, want none", what, i, cl)
		case (w.per != 0 || w.unit != 0) && (cl == nil || cl.RequestsPerUnit != w.per || cl.Unit != w.unit || cl.Name != w.name):
			t.Errorf("%s: status %d: current_limit %v, want %d per %v named %q", what, i, cl, w.per, w.unit, w.name)
		}
		if cl != nil && st.DurationUntilReset == nil {
			t.Errorf("%s: status %d: no duration_until_reset", what, i)
		}
	}
}

func req(domain string, ds ...*ratelimitpb.RateLimitDescriptor) *rlspb.RateLimitRequest {
	return &rlspb.RateLimitRequest{Domain: domain, Descriptors: ds}
}

// withinHour runs f again, up to 3 times, if an hour's end passed while it
// ran: the cases that count an hour's window to its end assume one window.
func withinHour(t *testing.T, f func(try int) bool) {
	t.Helper()
	for try := range 3 {
		start := time.Now().Unix() / 3600
		ok := f(try)
		if time.Now().Unix()/3600 == start {
			if !ok {
				t.FailNow()
			}
			return
		}
	}
	t.Fatal("an hour's end passed three times")
}

// Ensure the examples of envoyproxy/ratelimit's README decide as it
// documents: each request's statuses, in order, with their current limit
// and remaining count (a first request on each key).
func TestRLS_readmeExamples(t *testing.T) {
	c := rlsServer(t, "testdata/rls.yaml")
	cases := []struct {
		name string
		req  *rlspb.RateLimitRequest
		want []want
	}{
		// Example 1: two values of one key, 500 per second each.
		{"1 users", req("mongo_cps", desc("database", "users")), []want{{per: 500, unit: second, remaining: 499}}},
		{"1 default", req("mongo_cps", desc("database", "default")), []want{{per: 500, unit: second, remaining: 499}}},
		{"1 other value", req("mongo_cps", desc("database", "other")), []want{{}}},
		{"1 unknown domain", req("no_such_domain", desc("database", "users")), []want{{}}},
		// Example 2: nested descriptors; several descriptors in one request.
		{"2 both", req("messaging", desc("message_type", "marketing", "to_number", "2061111111"), desc("to_number", "2061111111")),
			[]want{{per: 5, unit: day, remaining: 4}, {per: 100, unit: day, remaining: 99}}},
		{"2 both again", req("messaging", desc("message_type", "marketing", "to_number", "2061111111"), desc("to_number", "2061111111")),
			[]want{{per: 5, unit: day, remaining: 3}, {per: 100, unit: day, remaining: 98}}},
		{"2 another number", req("messaging", desc("message_type", "marketing", "to_number", "2062222222")),
			[]want{{per: 5, unit: day, remaining: 4}}},
		{"2 placeholder only", req("messaging", desc("message_type", "marketing")), []want{{}}},
		{"2 other type", req("messaging", desc("message_type", "transactional", "to_number", "2061111111")), []want{{}}},
		// Example 3: the most specific match first; 0 per unit blocks.
		{"3 any ip", req("edge_proxy_per_ip", desc("remote_address", "50.0.0.1")), []want{{per: 10, unit: second, remaining: 9}}},
		{"3 black listed", req("edge_proxy_per_ip", desc("remote_address", "50.0.0.5")), []want{{over: true, per: 0, unit: second}}},
		{"3 white listed", req("edge_proxy_per_ip", desc("remote_address", "127.0.0.1")), []want{{}}},
		// Example 4: a limit only at the request's own depth.
		{"4 deeper request", req("example4", desc("key", "value", "subkey", "subvalue")), []want{{}}},
		{"4 same depth", req("example4_nested", desc("key", "value", "subkey", "subvalue")), []want{{per: 300, unit: second, remaining: 299}}},
		{"4 shallower request", req("example4_nested", desc("key", "value")), []want{{}}},
		// Example 5: unlimited.
		{"5 unlimited", req("internal", desc("ldap", "cn=x")), []want{{remaining: unlimitedRemaining}}},
		{"5 limited", req("internal", desc("azure", "x")), []want{{per: 100, unit: minute, remaining: 99}}},
		// Example 7: replaces.
		{"7 specific", req("example7", desc("key_1", "value_1", "user", "bkthomps")), []want{{per: 5, unit: second, name: "specific_limit", remaining: 4}}},
		{"7 replaced", req("example7", desc("key_1", "value_1", "user", "bkthomps"), desc("key_2", "value_2", "user", "bkthomps")),
			[]want{{}, {per: 10, unit: second, remaining: 9}}},
		// Example 8: a value's own rule first, the key's for the others.
		{"8 unspecified", req("example8", desc("key1", "unspecified_value")), []want{{per: 10, unit: minute, remaining: 9}}},
		{"8 unspecified 2", req("example8", desc("key1", "unspecified_value2")), []want{{per: 10, unit: minute, remaining: 9}}},
		{"8 value", req("example8", desc("key1", "value1")), []want{{per: 20, unit: minute, remaining: 19}}},
		// Example 9: wildcards, each value its own counter.
		{"9 value_1", req("example9", desc("key1", "value1")), []want{{per: 20, unit: minute, remaining: 19}}},
		{"9 value_2", req("example9", desc("key1", "value2")), []want{{per: 20, unit: minute, remaining: 19}}},
		{"9 no match", req("example9", desc("key1", "other")), []want{{}}},
	}
	for _, tc := range cases {
		check(t, tc.name, call(t, c, tc.req), tc.want...)
	}
}

// Ensure counting to the end of a window: shadow mode answers OK past the
// limit, the other user is denied past it (README example 6), a denial
// consumes nothing, and share_threshold makes a wildcard's values share
// one counter.
func TestRLS_counting(t *testing.T) {
	c := rlsServer(t, "testdata/rls.yaml")
	withinHour(t, func(try int) bool {
		sfx := string(rune('a' + try))
		for i := range 12 {
			resp := call(t, c, req("example6", desc("service", "auth"+sfx, "user", "user-a")))
			w := want{per: 10, unit: hour, remaining: uint32(max(9-i, 0))}
			check(t, "6 shadow", resp, w)
		}
		for i := range 21 {
			resp := call(t, c, req("example6", desc("service", "auth"+sfx, "user", "user-b")))
			w := want{per: 20, unit: hour, remaining: uint32(max(19-i, 0)), over: i == 20}
			check(t, "6 user-b", resp, w)
		}
		for i := range 5 {
			v := "tenant-" + string(rune('0'+i)) + sfx
			resp := call(t, c, req("sluice", desc("shared", v)))
			check(t, "shared "+v, resp, want{per: 2, unit: hour, remaining: uint32(max(1-i, 0)), over: i >= 2})
		}
		return !t.Failed()
	})
}

// Ensure the descriptors of one request are decided all or nothing: a
// request over one limit consumes nothing of the others.
func TestRLS_allOrNothing(t *testing.T) {
	c := rlsServer(t, "testdata/rls.yaml")
	withinHour(t, func(try int) bool {
		sfx := string(rune('a' + try))
		a, b := desc("counted", "a"+sfx), desc("counted", "b"+sfx)
		for i := range 3 {
			check(t, "fill b", call(t, c, req("sluice", desc("counted", "b"+sfx))), want{per: 3, unit: hour, remaining: uint32(2 - i)})
		}
		// b is full: the request is over, and a keeps its 3.
		check(t, "a and full b", call(t, c, req("sluice", a, b)),
			want{per: 3, unit: hour, remaining: 3}, want{over: true, per: 3, unit: hour, remaining: 0})
		check(t, "a alone", call(t, c, req("sluice", a)), want{per: 3, unit: hour, remaining: 2})
		// The black-listed address takes the others down with it.
		check(t, "with a blocked one", call(t, c, req("edge_proxy_per_ip", desc("remote_address", "50.0.0.9"+sfx), desc("remote_address", "50.0.0.5"))),
			want{per: 10, unit: second, remaining: 10}, want{over: true, unit: second})
		return !t.Failed()
	})
}

// Ensure hits_addend at the request's level and the descriptor's (0 is a
// check that consumes nothing), is_negative_hits as a refund, and a
// descriptor's own limit.
func TestRLS_hits(t *testing.T) {
	c := rlsServer(t, "testdata/rls.yaml")
	withinHour(t, func(try int) bool {
		k := "h" + string(rune('a'+try))
		r := req("sluice", desc("counted", k))
		r.HitsAddend = 2
		check(t, "request hits 2", call(t, c, r), want{per: 3, unit: hour, remaining: 1})
		d := desc("counted", k)
		d.HitsAddend = wrapperspb.UInt64(0)
		check(t, "descriptor hits 0", call(t, c, req("sluice", d)), want{per: 3, unit: hour, remaining: 1})
		r = req("sluice", desc("counted", k))
		r.HitsAddend = 2
		check(t, "request hits 2, over", call(t, c, r), want{over: true, per: 3, unit: hour, remaining: 1})
		d = desc("counted", k)
		d.HitsAddend, d.IsNegativeHits = wrapperspb.UInt64(2), true
		check(t, "refund 2", call(t, c, req("sluice", d)), want{per: 3, unit: hour, remaining: 3})
		d = desc("counted", k)
		d.HitsAddend = wrapperspb.UInt64(3)
		check(t, "descriptor hits 3 over the request's", call(t, c, req("sluice", d)), want{per: 3, unit: hour, remaining: 0})
		// A descriptor's own limit: 2 per 5 hours, unit_multiplier.
		d = desc("any", k)
		d.Limit = &ratelimitpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typepb.RateLimitUnit_HOUR, UnitMultiplier: wrapperspb.UInt32(5)}
		resp := call(t, c, req("sluice", d))
		check(t, "override", resp, want{per: 2, unit: hour, remaining: 1})
		if m := resp.Statuses[0].CurrentLimit.GetUnitMultiplier(); m.GetValue() != 5 {
			t.Errorf("override: unit_multiplier %v, want 5", m)
		}
		return !t.Failed()
	})
}

// Ensure a descriptor that names a limit of the file is decided by that
// limit's algorithm, its current limit expressed per unit.
func TestRLS_namedLimits(t *testing.T) {
	c := rlsServer(t, "testdata/rls.yaml")
	for i := range 6 {
		check(t, "token bucket", call(t, c, req("sluice", desc("bucket", "x"))),
			want{per: 5, unit: hour, name: "api_bucket", remaining: uint32(max(4-i, 0)), over: i == 5})
	}
	for i := range 4 {
		check(t, "sliding window", call(t, c, req("sluice", desc("sliding", "x"))),
			want{per: 3, unit: hour, name: "sliding_rule", remaining: uint32(max(2-i, 0)), over: i == 3})
	}
	// A shadow limit (shadow: true in limits) is answered OK past its limit.
	for i := range 2 {
		check(t, "shadow limit", call(t, c, req("sluice", desc("shadowed", "x"))),
			want{per: 1, unit: hour, name: "api_shadow", remaining: uint32(max(0, 0-i))})
	}
}

// Ensure the RateLimit-* headers, with --rls-headers, come from the
// descriptor with the fewest requests remaining.
func TestRLS_headers(t *testing.T) {
	c := rlsServer(t, "testdata/rls.yaml", "--rls-headers")
	resp := call(t, c, req("messaging", desc("message_type", "marketing", "to_number", "1"), desc("to_number", "1"), desc("ldap", "x")))
	got := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		got[h.Key] = h.Value
	}
	if got["RateLimit-Limit"] != "5" || got["RateLimit-Remaining"] != "4" || got["RateLimit-Reset"] == "" || len(got) != 3 {
		t.Errorf("headers %v, want RateLimit-Limit 5, RateLimit-Remaining 4 and RateLimit-Reset", got)
	}
	resp = call(t, rlsServer(t, "testdata/rls.yaml"), req("messaging", desc("to_number", "1")))
	if len(resp.ResponseHeadersToAdd) != 0 {
		t.Errorf("without --rls-headers: headers %v", resp.ResponseHeadersToAdd)
	}
}

// Ensure 64 callers at once on one descriptor are admitted exactly the
// limit's count.
func TestRLS_concurrent(t *testing.T) {
	c := rlsServer(t, "testdata/rls.yaml")
	withinHour(t, func(try int) bool {
		k := "c" + string(rune('a'+try))
		var ok atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 4 {
					resp, err := c.ShouldRateLimit(context.Background(), req("sluice", desc("crowd", k)))
					if err != nil {
						errs <- err
						return
					}
					if resp.OverallCode == rlspb.RateLimitResponse_OK {
						ok.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if ok.Load() != 100 {
			t.Errorf("64 callers, 256 requests on a limit of 100: %d admitted", ok.Load())
		}
		return !t.Failed()
	})
}

// Ensure a malformed request is INVALID_ARGUMENT, and sluiced still
// serves after it.
func TestRLS_malformed(t *testing.T) {
	c := rlsServer(t, "testdata/rls.yaml")
	huge := strings.Repeat("x", 1<<20)
	many := desc()
	for range 10000 {
		many.Entries = append(many.Entries, &ratelimitpb.RateLimitDescriptor_Entry{Key: "k", Value: "v"})
	}
	var tooMany []*ratelimitpb.RateLimitDescriptor
	for range 17 {
		tooMany = append(tooMany, desc("database", "users"))
	}
	badUnit := desc("any", "x")
	badUnit.Limit = &ratelimitpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}
	cases := []struct {
		name string
		req  *rlspb.RateLimitRequest
	}{
		{"empty domain", req("", desc("database", "users"))},
		{"no descriptors", req("mongo_cps")},
		{"a descriptor without entries", req("mongo_cps", desc())},
		{"an empty key", req("mongo_cps", desc("", "users"))},
		{"a huge value", req("mongo_cps", desc("database", huge))},
		{"a huge key", req("mongo_cps", desc(huge, "users"))},
		{"a huge domain", req(huge, desc("database", "users"))},
		{"10000 entries", req("mongo_cps", many)},
		{"17 descriptors", req("mongo_cps", tooMany...)},
		{"a limit without a unit", req("mongo_cps", badUnit)},
	}
	for _, tc := range cases {
		_, err := c.ShouldRateLimit(context.Background(), tc.req)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", tc.name, err)
		}
	}
	check(t, "after", call(t, c, req("mongo_cps", desc("database", "users"))), want{per: 500, unit: second, remaining: 499})
}

// Ensure an envoyproxy/ratelimit config file is read as it is.
func TestRLS_envoyFile(t *testing.T) {
	dir := shortDir(t)
	path := filepath.Join(dir, "config.yaml")
	text := `domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
`
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	c := rlsServer(t, path)
	check(t, "envoy file", call(t, c, req("messaging", desc("message_type", "marketing", "to_number", "1"), desc("to_number", "1"))),
		want{per: 5, unit: day, remaining: 4}, want{per: 100, unit: day, remaining: 99})
}

// yamlAfter returns the first YAML block of file after the line heading.
func yamlAfter(t *testing.T, file, heading string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s has no %q", file, heading)
	}
	_, rest, ok = strings.Cut(rest, "```yaml\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatalf("%s: no YAML block after %q", file, heading)
	}
	return block
}

// Ensure the README's example and docs/envoy.md's decide as they say:
// each address its window, the blocked one over, a user by the named
// gcra limit (a burst of 3).
func TestRLS_readmeExample(t *testing.T) {
	for _, doc := range []struct{ file, heading string }{
		{"../../README.md", "## Envoy and Istio: the rate limit service"},
		{"../../docs/envoy.md", "## Configuration"},
	} {
		path := filepath.Join(shortDir(t), "sluice.yaml")
		if err := os.WriteFile(path, []byte(yamlAfter(t, doc.file, doc.heading)), 0o644); err != nil {
			t.Fatal(err)
		}
		c := rlsServer(t, path)
		check(t, doc.file+": an address", call(t, c, req("edge", desc("remote_address", "192.0.2.1"))), want{per: 100, unit: second, remaining: 99})
		check(t, doc.file+": the blocked one", call(t, c, req("edge", desc("remote_address", "50.0.0.5"))), want{over: true, unit: second})
		for i := range 4 {
			check(t, doc.file+": a user", call(t, c, req("edge", desc("path", "/login", "user", "alice"))),
				want{per: 5, unit: minute, name: "login", remaining: uint32(max(2-i, 0)), over: i == 3})
		}
	}
}
