package rls

import (
	"errors"
	"strings"
	"testing"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/bucket"
)

func TestWildcardMatch(t *testing.T) {
	cases := []struct {
		pattern, value string
		want           bool
	}{
		{"value*", "value", true},
		{"value*", "value1", true},
		{"value*", "valu", false},
		{"*", "", true},
		{"*suffix", "a-suffix", true},
		{"*suffix", "suffix-a", false},
		{"a*b*c", "aXbYc", true},
		{"a*b*c", "acb", false},
		{"ab*ba", "aba", false},
		{"ab*ba", "abba", true},
		{"/api/*/users", "/api/v1/users", true},
		{"/api/*/users", "/api/v1/orders", false},
	}
	for _, tc := range cases {
		if got := wildcardMatch(tc.pattern, tc.value); got != tc.want {
			t.Errorf("wildcardMatch(%q, %q) = %v, want %v", tc.pattern, tc.value, got, tc.want)
		}
	}
}

func rule(per uint32) *Rule {
	return &Rule{Unit: rlspb.RateLimitResponse_RateLimit_MINUTE, RequestsPerUnit: per}
}

// Ensure the order of matching: value, then wildcard (the file's first),
// then key; a rule at the request's depth only; distinct keys per value,
// one per wildcard with share_threshold.
func TestMatch(t *testing.T) {
	exact, wild1, wild2, bare, deep := rule(1), rule(2), rule(3), rule(4), rule(5)
	c, err := NewConfig([]*Domain{{Name: "d", Descriptors: []*Descriptor{
		{Key: "k", Rule: bare},
		{Key: "k", Value: "a*", Rule: wild1, ShareThreshold: true},
		{Key: "k", Value: "ab*", Rule: wild2},
		{Key: "k", Value: "abc", Rule: exact},
		{Key: "p", Descriptors: []*Descriptor{{Key: "q", Rule: deep}}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		entries [][2]string
		want    *Rule
	}{
		{[][2]string{{"k", "abc"}}, exact},
		{[][2]string{{"k", "abd"}}, wild1}, // the first wildcard in the file's order
		{[][2]string{{"k", "zz"}}, bare},
		{[][2]string{{"x", "zz"}}, nil},
		{[][2]string{{"p", "1"}, {"q", "2"}}, deep},
		{[][2]string{{"p", "1"}}, nil},
		{[][2]string{{"p", "1"}, {"q", "2"}, {"r", "3"}}, nil},
		{[][2]string{{"k", "abc"}, {"q", "2"}}, nil},
	}
	for _, tc := range cases {
		if got, _ := c.match(nil, "d", tc.entries); got != tc.want {
			t.Errorf("match(%v) = %v, want %v", tc.entries, got, tc.want)
		}
	}
	_, k1 := c.match(nil, "d", [][2]string{{"k", "a1"}})
	_, k2 := c.match(nil, "d", [][2]string{{"k", "a2"}})
	_, k3 := c.match(nil, "d", [][2]string{{"k", "z1"}})
	_, k4 := c.match(nil, "d", [][2]string{{"k", "z2"}})
	if string(k1) != string(k2) || string(k3) == string(k4) {
		t.Errorf("keys: shared wildcard %q %q (want equal), key alone %q %q (want different)", k1, k2, k3, k4)
	}
}

func entries(kv ...string) *ratelimitpb.RateLimitDescriptor {
	d := &ratelimitpb.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitpb.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// Ensure the response: statuses in order, the overall code, and the
// headers of the descriptor over its limit, else of the one with the
// fewest remaining.
func TestRespond(t *testing.T) {
	c, err := NewConfig([]*Domain{{Name: "d", Descriptors: []*Descriptor{
		{Key: "a", Rule: rule(10)}, {Key: "b", Rule: rule(5)}, {Key: "u", Rule: &Rule{Unlimited: true}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	items, err := c.Match(nil, &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitpb.RateLimitDescriptor{
		entries("a", "1"), entries("u", "1"), entries("b", "1"), entries("n", "1"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	res := make([]Result, len(items))
	res[0] = Result{Decision: bucket.Decision{Allowed: true, Remaining: 7}, Limit: items[0].Window.Bucket()}
	res[2] = Result{Decision: bucket.Decision{Allowed: true, Remaining: 2}, Limit: items[2].Window.Bucket()}
	now := int64(90e9) // 30 s before a minute's end
	resp := Respond(items, res, now, true)
	if resp.OverallCode != rlspb.RateLimitResponse_OK || len(resp.Statuses) != 4 {
		t.Fatalf("response %v", resp)
	}
	if st := resp.Statuses[1]; st.LimitRemaining != 1<<32-1 || st.CurrentLimit != nil {
		t.Errorf("unlimited: %v", st)
	}
	if st := resp.Statuses[3]; st.CurrentLimit != nil || st.Code != rlspb.RateLimitResponse_OK {
		t.Errorf("no match: %v", st)
	}
	if d := resp.Statuses[0].DurationUntilReset.AsDuration().Seconds(); d != 30 {
		t.Errorf("duration until reset %v s, want 30", d)
	}
	h := resp.ResponseHeadersToAdd
	if len(h) != 3 || h[0].Value != "5" || h[1].Value != "2" || h[2].Value != "30" {
		t.Errorf("headers %v, want limit 5, remaining 2, reset 30", h)
	}
	res[0].Decision.Allowed = false
	resp = Respond(items, res, now, true)
	if resp.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Errorf("over: %v", resp)
	}
	if h := resp.ResponseHeadersToAdd; h[0].Value != "10" {
		t.Errorf("headers of an over-limit request %v, want the over-limit descriptor's", h)
	}
}

// Ensure a named limit's rate is expressed per unit: a multiple of the
// largest unit that divides its period, else per second.
func TestUnitOf(t *testing.T) {
	cases := []struct {
		n, period int64
		unit      Unit
		mult, per uint32
	}{
		{10, 3600e9, rlspb.RateLimitResponse_RateLimit_HOUR, 1, 10},
		{10, 5 * 60e9, rlspb.RateLimitResponse_RateLimit_MINUTE, 5, 10},
		{7, 14 * 86400e9, rlspb.RateLimitResponse_RateLimit_WEEK, 2, 7},
		{10, 500e6, rlspb.RateLimitResponse_RateLimit_SECOND, 1, 20},
		{1, 1500e6, rlspb.RateLimitResponse_RateLimit_SECOND, 1, 1},
	}
	for _, tc := range cases {
		u, mult, per := unitOf(tc.n, tc.period)
		if u != tc.unit || mult != tc.mult || per != tc.per {
			t.Errorf("unitOf(%d, %d) = %v %d %d, want %v %d %d", tc.n, tc.period, u, mult, per, tc.unit, tc.mult, tc.per)
		}
	}
}

// Ensure a quota's rate is its limit per its calendar period, a month
// being MONTH whatever its length (its window is none: it was "per 0
// weeks").
func TestRateOf_quota(t *testing.T) {
	for _, tc := range []struct {
		cal  bucket.CalendarUnit
		n    int64
		unit Unit
	}{
		{bucket.CalDay, 1, rlspb.RateLimitResponse_RateLimit_DAY},
		{bucket.CalWeek, 2, rlspb.RateLimitResponse_RateLimit_WEEK},
		{bucket.CalMonth, 1, rlspb.RateLimitResponse_RateLimit_MONTH},
		{bucket.CalMonth, 3, rlspb.RateLimitResponse_RateLimit_MONTH},
		{bucket.CalYear, 1, rlspb.RateLimitResponse_RateLimit_YEAR},
	} {
		l := bucket.Limit{Algorithm: bucket.Quota, Max: 100, Calendar: tc.cal, Every: tc.n}
		if err := l.Validate(); err != nil {
			t.Fatal(err)
		}
		if u, mult, per := rateOf(&l); u != tc.unit || int64(mult) != tc.n || per != 100 {
			t.Errorf("%d %v: %v x%d, %d; want %v x%d, 100", tc.n, tc.cal, u, mult, per, tc.unit, tc.n)
		}
	}
	tb := bucket.Limit{Algorithm: bucket.TokenBucket, Max: 10, RefillTime: 3600e9, RefillAmount: 10}
	if u, mult, per := rateOf(&tb); u != rlspb.RateLimitResponse_RateLimit_HOUR || mult != 1 || per != 10 {
		t.Errorf("a token bucket: %v x%d, %d", u, mult, per)
	}
}

// Ensure a shared wildcard's pattern, one byte longer than the value it
// matched, cannot make a key longer than the engine takes: the request
// is invalid, not an internal error.
func TestMatch_sharedPatternKeyLength(t *testing.T) {
	n := MaxKeyLen - (3 + 1 + 4 + 1) // the domain "d", the key "k": the value fills the key
	pattern := strings.Repeat("a", n) + "*"
	c, err := NewConfig([]*Domain{{Name: "d", Descriptors: []*Descriptor{{Key: "k", Value: pattern, ShareThreshold: true, Rule: rule(1)}}}})
	if err != nil {
		t.Fatal(err)
	}
	req := &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitpb.RateLimitDescriptor{entries("k", strings.Repeat("a", n))}}
	if items, err := c.Match(nil, req); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Match: %v (key of %d bytes), want ErrInvalid", err, len(items[0].Key))
	}
	req.Descriptors[0] = entries("k", strings.Repeat("a", n-1)+"b")
	if _, err := c.Match(nil, req); err != nil {
		t.Fatalf("a value that fills the key, unmatched: %v", err)
	}
}

// FuzzMatch checks that no request, however formed, makes Match or
// Respond panic, and that every key Match returns fits the engine.
func FuzzMatch(f *testing.F) {
	c, err := NewConfig([]*Domain{{Name: "d", Descriptors: []*Descriptor{
		{Key: "k", Rule: rule(3)},
		{Key: "k", Value: "a*b", ShareThreshold: true, Rule: &Rule{Unit: rlspb.RateLimitResponse_RateLimit_SECOND}},
		{Key: "k", Value: "u", Rule: &Rule{Unlimited: true}},
		{Key: "p", Descriptors: []*Descriptor{{Key: "q", Rule: rule(1)}}},
	}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add("d", "k\x00v\x01p\x00x\x02q\x00y", uint32(0), uint64(1), true)
	f.Add("d", "k\x00axxb", uint32(5), uint64(0), false)
	f.Add("", "", uint32(0), uint64(0), false)
	f.Fuzz(func(t *testing.T, domain, spec string, hits uint32, dhits uint64, negative bool) {
		req := &rlspb.RateLimitRequest{Domain: domain, HitsAddend: hits}
		for _, d := range strings.Split(spec, "\x01") {
			desc := &ratelimitpb.RateLimitDescriptor{IsNegativeHits: negative}
			if dhits%3 == 0 {
				desc.HitsAddend = wrapperspb.UInt64(dhits)
			}
			for _, e := range strings.Split(d, "\x02") {
				k, v, _ := strings.Cut(e, "\x00")
				if k != "" || v != "" {
					desc.Entries = append(desc.Entries, &ratelimitpb.RateLimitDescriptor_Entry{Key: k, Value: v})
				}
			}
			req.Descriptors = append(req.Descriptors, desc)
		}
		items, err := c.Match(nil, req)
		if err != nil {
			return
		}
		res := make([]Result, len(items))
		for i := range items {
			if len(items[i].Key) > MaxKeyLen {
				t.Fatalf("a key of %d bytes", len(items[i].Key))
			}
			if items[i].Decides() {
				res[i].Limit = items[i].Window.Bucket()
			}
		}
		Respond(items, res, 1_700_000_000e9, true)
	})
}
