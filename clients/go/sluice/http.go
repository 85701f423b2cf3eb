package sluice

import (
	"fmt"
	"log/slog"
	"math"
	"math/bits"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/proto"
)

// The HTTP header fields the middleware sets. RateLimit-Policy and RateLimit
// follow draft-ietf-httpapi-ratelimit-headers-11 (May 2026; the field syntax
// is unchanged since -08): each is a Structured Fields list (RFC 9651) of
// items, each a policy's name as a String with Integer parameters (one
// item, or, for a request decided under several policies, WithPolicy,
// RateLimit-Policy lists each and RateLimit names the closest to its
// limit):
//
//	RateLimit-Policy: "default";q=10;w=3600   q: the quota; w: its window, seconds
//	RateLimit: "default";r=9;t=360            r: the quota left; t: seconds, see below
const (
	HeaderRetryAfter      = "Retry-After"
	HeaderRateLimitPolicy = "RateLimit-Policy"
	HeaderRateLimit       = "RateLimit"
)

// DefaultPolicyName names the policy in the RateLimit fields unless
// WithPolicyName says otherwise.
const DefaultPolicyName = "default"

// A MiddlewareOption configures Middleware.
type MiddlewareOption func(*middleware)

// WithPolicyName names the policy in the RateLimit fields (default
// DefaultPolicyName). Name each limit of a service differently.
func WithPolicyName(name string) MiddlewareOption {
	return func(m *middleware) { m.name = name }
}

// WithCost sets the cost of a request (default 1 for every request).
func WithCost(cost func(*http.Request) int64) MiddlewareOption {
	return func(m *middleware) { m.cost = cost }
}

// WithDeniedHandler sets the handler of denied requests, called after the
// Retry-After and RateLimit fields are set; it should answer 429. The
// default answers 429 Too Many Requests with a short text body.
func WithDeniedHandler(h http.Handler) MiddlewareOption {
	return func(m *middleware) { m.denied = h }
}

// WithErrorHandler sets what answers a request whose decision failed and
// that the failure policy did not decide: the sidecar is unavailable under
// FailError, or has never answered; its table is full or it failed under
// FailError; or a mistake (an unknown name, an invalid limit, a limit this
// sidecar cannot serve, a sidecar that refuses this process). The default
// answers 503 Service Unavailable for the first kinds and 500 Internal
// Server Error for a mistake. Every such request is logged at ERROR on the
// client's logger (WithLogger), at most one line every 10 seconds for each
// kind of error, with the count since the last one.
func WithErrorHandler(h func(http.ResponseWriter, *http.Request, error)) MiddlewareOption {
	return func(m *middleware) { m.onError = h }
}

type middleware struct {
	c       *Client
	l       Limit
	key     func(*http.Request) (string, bool)
	name    string
	cost    func(*http.Request) int64
	denied  http.Handler
	onError func(http.ResponseWriter, *http.Request, error)
	shadow  bool         // WithShadow: every acquire is a shadow request
	ban     http.Handler // WithShadowBan: answers shadow-denied requests
	lease   bool         // a concurrency limit, or WithLease: requests lease a slot
	log     failureLog   // the requests whose decision failed
	also    []Policy     // WithPolicy: the other limits, decided with l (their Decision unused)
}

// WithPolicy decides every request under l too, all or nothing with the
// middleware's limit and the other WithPolicy limits (Client.Multi: one
// item each, on the request's key, at its cost): a request passes only if
// each allows it, and then each consumes. Its RateLimit fields describe
// every policy (SetRateLimitHeadersOf): RateLimit-Policy lists them, the
// middleware's own first (named by WithPolicyName), and RateLimit names
// the one closest to its limit. name names l's policy; give each a
// different name. A request under several policies cannot lease a slot
// nor be shadowed (a MULTI has neither): Middleware panics if WithPolicy
// meets a concurrency limit, WithLease or WithShadow, or makes more than
// proto.MaxMulti policies.
func WithPolicy(name string, l Limit) MiddlewareOption {
	return func(m *middleware) { m.also = append(m.also, Policy{Name: name, Limit: l}) }
}

// WithLease makes every request hold a slot of the limit, a concurrency
// limit, while the next handler runs, instead of acquiring from it.
// Middleware does so by itself for a limit built by Concurrency or parsed
// from a concurrency spec; a named limit (the sidecar's config defines it,
// so the client cannot tell its algorithm) needs this option.
func WithLease() MiddlewareOption { return func(m *middleware) { m.lease = true } }

// WithShadow makes every request a shadow request (the Shadow option): a
// request the limit would deny is let through, and logged (WARN, with its
// key and the policy's name) on the default slog logger. A limit marked
// shadow in the sidecar's config is shadowed whatever this option says.
func WithShadow() MiddlewareOption { return func(m *middleware) { m.shadow = true } }

// WithShadowBan answers a shadow-denied request with h instead of calling
// the handler: the caller sees success (h should answer 2xx) while the work
// is not done, Figma's shadow ban. Without it a shadow-denied request is
// served as usual, and logged.
func WithShadowBan(h http.Handler) MiddlewareOption { return func(m *middleware) { m.ban = h } }

// Middleware returns net/http middleware that limits requests with c under
// l, any limit the client accepts: a limit of any algorithm, or a named
// one. key names the bucket of a request (a client address, an account,
// an API token); if it returns false the request is not limited.
//
// Every decided request gets the RateLimit-Policy and RateLimit fields (see
// SetRateLimitHeaders). A denied request is answered 429 Too Many Requests
// with Retry-After, and does not reach the next handler. An allowed
// request under a pacer limit waits its Delay first (or until the request's
// context ends, which drops it).
//
// When the sidecar cannot decide a request the client's failure policy
// decides, with no RateLimit fields: FailOpen passes the request on,
// FailClosed answers 429, FailError calls the error handler (503 by
// default). That covers an outage of a sidecar that has answered the
// client before, a full table and the sidecar's internal errors (these two
// logged at ERROR). Everything else calls the error handler, logged too:
// a sidecar that has never answered (503), and mistakes, which are never
// let through unlimited (500): an unknown name, an invalid limit, a limit
// this sidecar cannot serve, a refused process (see WithErrorHandler; the
// README's "Failure policy" has the table).
//
// Under a concurrency limit (Concurrency, or WithLease) a request instead
// leases a slot (Client.Lease) and holds it while the next handler runs:
// the slot is released when the handler returns, or panics. The cost is
// then always one slot (WithCost does not apply). A denied request, every
// slot being held, is answered as above: 429, but without Retry-After (a
// slot frees when a request in progress ends, which nothing foresees; a
// denied handler may set one), RateLimit's r the slots free (see
// RateLimitFields). Under WithShadow a denied request is served without a
// slot, and logged. The failure policy decides as above; FailOpen serves
// the request without a slot.
func Middleware(c *Client, l Limit, key func(*http.Request) (string, bool), opts ...MiddlewareOption) func(http.Handler) http.Handler {
	m := &middleware{c: c, l: l, key: key, name: DefaultPolicyName, lease: l.Algorithm == proto.Concurrency && l.Name == ""}
	for _, o := range opts {
		o(m)
	}
	if m.denied == nil {
		m.denied = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, http.StatusText(http.StatusTooManyRequests), http.StatusTooManyRequests)
		})
	}
	if m.onError == nil {
		m.onError = defaultOnError
	}
	if len(m.also) > 0 && (m.lease || m.shadow || l.Algorithm == proto.Concurrency || len(m.also) >= proto.MaxMulti) {
		panic(fmt.Sprintf("sluice.WithPolicy: several policies are decided as one MULTI of at most %d, which cannot lease a slot (a concurrency limit, WithLease) or be shadowed (WithShadow)", proto.MaxMulti))
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			k, ok := m.key(r)
			if !ok {
				next.ServeHTTP(w, r)
				return
			}
			if m.lease {
				m.serveLeased(w, r, k, next)
				return
			}
			cost := int64(1)
			if m.cost != nil {
				cost = m.cost(r)
			}
			var d Decision
			var ps []Policy
			var err error
			switch {
			case len(m.also) > 0:
				d, ps, err = m.acquireAll(r, k, cost)
			case m.shadow:
				d, err = m.c.Acquire(r.Context(), m.l, k, cost, Shadow())
			default:
				d, err = m.c.Acquire(r.Context(), m.l, k, cost)
			}
			if err != nil {
				if d, ok = m.failed(w, r, err); !ok {
					return
				}
				ps = nil
			}
			if ps != nil {
				SetRateLimitHeadersOf(w.Header(), ps)
			} else {
				SetRateLimitHeaders(w.Header(), m.name, m.l, d)
			}
			if !d.Allowed {
				m.denied.ServeHTTP(w, r)
				return
			}
			if d.ShadowDenied {
				slog.Warn("rate limit shadow-denied a request", "policy", m.name, "limit", m.l.String(), "key", k, "banned", m.ban != nil)
				if m.ban != nil {
					m.ban.ServeHTTP(w, r)
					return
				}
			}
			if d.Delay > 0 {
				t := time.NewTimer(d.Delay)
				select {
				case <-t.C:
				case <-r.Context().Done():
					t.Stop()
					return
				}
			}
			next.ServeHTTP(w, r)
		})
	}
}

// acquireAll decides a request of key k and cost under the middleware's
// limit and its WithPolicy limits, all or nothing: each policy's decision,
// and the request's (allowed iff each allows; otherwise the closest
// policy's, with the longest pacer delay of them).
func (m *middleware) acquireAll(r *http.Request, k string, cost int64) (Decision, []Policy, error) {
	items := make([]Item, 0, 1+len(m.also))
	items = append(items, Item{Limit: m.l, Key: k, Cost: cost})
	for _, p := range m.also {
		items = append(items, Item{Limit: p.Limit, Key: k, Cost: cost})
	}
	allowed, ds, err := m.c.Multi(r.Context(), items)
	if err != nil {
		return Decision{}, nil, err
	}
	ps := make([]Policy, len(ds))
	for i := range ds {
		ps[i] = Policy{Name: m.name, Limit: m.l, Decision: ds[i]}
		if i > 0 {
			ps[i].Name, ps[i].Limit = m.also[i-1].Name, m.also[i-1].Limit
		}
	}
	d := ds[closest(ps)]
	d.Allowed = allowed
	for i := range ds {
		d.Delay = max(d.Delay, ds[i].Delay)
	}
	if !allowed {
		d.Delay = 0
	}
	return d, ps, nil
}

// serveLeased serves a request under a concurrency limit: it leases a slot
// of key k and holds it while next runs.
func (m *middleware) serveLeased(w http.ResponseWriter, r *http.Request, k string, next http.Handler) {
	var ok bool
	ls, err := m.c.Lease(r.Context(), m.l, k)
	if err != nil {
		if ls.Decision, ok = m.failed(w, r, err); !ok {
			return
		}
	}
	defer ls.Release() // a panicking handler releases too
	d := ls.Decision
	shadowDenied := !d.Allowed && m.shadow && !d.Degraded
	if shadowDenied { // as the sidecar answers a shadow acquire
		d.Allowed, d.RetryAfter, d.ShadowDenied = true, -1, true
	}
	setRateLimitHeaders(w.Header(), m.name, m.l, d, true)
	if !d.Allowed {
		m.denied.ServeHTTP(w, r)
		return
	}
	if shadowDenied {
		slog.Warn("rate limit shadow-denied a request", "policy", m.name, "limit", m.l.String(), "key", k, "banned", m.ban != nil)
		if m.ban != nil {
			m.ban.ServeHTTP(w, r)
			return
		}
	}
	next.ServeHTTP(w, r)
}

// SetRateLimitHeaders sets the header fields that describe decision d under
// limit l, for a policy named name: RateLimit-Policy and RateLimit (see
// RateLimitFields), and Retry-After if d denies the request and says when
// it would pass. A Degraded decision sets only Retry-After: the sidecar did
// not answer, so there is no quota to report. A concurrency limit's denial
// sets no Retry-After: a slot frees when a request in progress ends, which
// nothing foresees (the lease's RetryAfter only bounds it by the lease
// time, which would keep a client that honours it away far too long).
// Frameworks other than net/http can use RateLimitFields and
// RetryAfterSeconds directly.
//
// The Python client's sluice.headers.response_headers gives the same
// fields for the same limit and decision: both are checked against one set
// of vectors, clients/testdata/ratelimit-headers.json.
//
// A decision of a named list of limits (Decision.Limits) sets the fields
// of each limit, as SetRateLimitHeadersOf does for several policies, each
// named after name and its place in the list (ListPolicies).
func SetRateLimitHeaders(h http.Header, name string, l Limit, d Decision) {
	if len(d.Limits) > 0 && !d.Degraded {
		SetRateLimitHeadersOf(h, []Policy{{Name: name, Limit: l, Decision: d}})
		return
	}
	setRateLimitHeaders(h, name, l, d, isConcurrency(l))
}

// setRateLimitHeaders is SetRateLimitHeaders for a leased request (leased:
// the limit is a concurrency limit, even a named one) or an acquired one.
func setRateLimitHeaders(h http.Header, name string, l Limit, d Decision, leased bool) {
	if !d.Allowed && d.RetryAfter > 0 && (d.Degraded || !leased) {
		h.Set(HeaderRetryAfter, strconv.FormatInt(RetryAfterSeconds(d), 10))
	}
	if d.Degraded {
		return
	}
	policy, rl := rateLimitFields(name, l, d, leased)
	h.Set(HeaderRateLimitPolicy, policy)
	h.Set(HeaderRateLimit, rl)
}

// isConcurrency reports whether l is a concurrency limit given by its
// parameters (a named limit's algorithm is the sidecar's to know).
func isConcurrency(l Limit) bool { return l.Algorithm == proto.Concurrency && l.Name == "" }

// RetryAfterSeconds returns the Retry-After of a denial: d.RetryAfter in
// whole seconds, rounded up, so that a client that waits that long is
// allowed; 0 if d has no RetryAfter (allowed, or never).
func RetryAfterSeconds(d Decision) int64 {
	if d.RetryAfter <= 0 {
		return 0
	}
	return ceilSeconds(d.RetryAfter)
}

// RateLimitFields returns the values of the RateLimit-Policy and RateLimit
// fields (draft-ietf-httpapi-ratelimit-headers-11, sections 3 and 4) for
// decision d under limit l, for a policy named name:
//
//	RateLimit-Policy: "NAME";q=Q;w=W
//	RateLimit: "NAME";r=R;t=T
//
// q is d.Limit, the most requests of cost 1 the bucket holds, and w the
// seconds a bucket takes to go from empty back to full at l's rate:
// token_bucket ceil(max/refill_amount)*refill_time, gcra
// (burst+1)*period/count, the windows (fixed_window, sliding_window,
// sliding_log, window_counters) their window, pacer q*period/rate, a
// quota of days or weeks their nominal length (86400 s a day, though a
// day of a DST change lasts 23 or 25 hours); w is left out if l's
// parameters make no window (a named limit: the client does not know
// them) or no fixed one (a quota of months or years: t tells when its
// period ends).
//
// r is d.Remaining. t is the draft's "effective window" (section 4.1.2),
// "the number of seconds within which the client can use no more than the
// available quota": for an allowed request d.ResetAfter, after which the
// bucket is full again; for a denied one d.RetryAfter, when the quota is
// available again, since until then r (0) is all the client can use, and
// so that Retry-After, which the draft says should not be earlier than the
// end of the effective window (section 6), is the same moment as t (its
// example B.1.4); d.ResetAfter if the request can never pass. Durations
// are whole seconds, rounded up. The name is written as a Structured
// Fields String: '"' and '\' are escaped and bytes outside printable ASCII
// become '?'.
//
// A concurrency limit counts requests in progress, not over time: its
// fields are
//
//	RateLimit-Policy: "NAME";q=LIMIT;qu="concurrent-requests"
//	RateLimit: "NAME";r=FREE
//
// with the draft's quota unit for it (section 3.1.2), and no window.
//
// The fields of a decision of a named list of limits (Decision.Limits)
// describe each limit, as RateLimitFieldsOf describes several policies.
func RateLimitFields(name string, l Limit, d Decision) (policy, ratelimit string) {
	if len(d.Limits) > 0 {
		return RateLimitFieldsOf([]Policy{{Name: name, Limit: l, Decision: d}})
	}
	return rateLimitFields(name, l, d, isConcurrency(l))
}

func rateLimitFields(name string, l Limit, d Decision, leased bool) (policy, ratelimit string) {
	n := sfString(name)
	q := max(d.Limit, 0)
	policy = n + ";q=" + strconv.FormatInt(q, 10)
	ratelimit = n + ";r=" + strconv.FormatInt(max(d.Remaining, 0), 10)
	if leased {
		return policy + `;qu="concurrent-requests"`, ratelimit
	}
	if w := policyWindow(l, q); w > 0 {
		policy += ";w=" + strconv.FormatInt(w, 10)
	}
	t := d.ResetAfter
	if !d.Allowed && d.RetryAfter > 0 {
		t = d.RetryAfter
	}
	return policy, ratelimit + ";t=" + strconv.FormatInt(ceilSeconds(max(t, 0)), 10)
}

// policyWindow returns the seconds, rounded up, that a bucket of l holding
// q tokens takes to refill from empty; 0 if l's parameters make none.
func policyWindow(l Limit, q int64) int64 {
	p := l.P
	var ns uint64
	var ok bool
	switch l.Algorithm {
	case proto.TokenBucket: // max, refill_time, refill_amount
		var refills uint64
		if refills, ok = mulDivCeil(p[0], 1, p[2]); ok {
			ns, ok = mulDivCeil(int64(min(refills, math.MaxInt64)), p[1], 1)
		}
	case proto.GCRA: // burst, count, period
		if p[0] < math.MaxInt64 {
			ns, ok = mulDivCeil(p[0]+1, p[2], p[1])
		}
	case proto.FixedWindow, proto.SlidingWindow, proto.SlidingLog, proto.WindowCounters: // limit, window
		ns, ok = uint64(max(p[1], 0)), true
	case proto.Pacer: // rate, period, max_delay
		ns, ok = mulDivCeil(q, p[1], p[0])
	case proto.Quota: // a day's or a week's nominal length; months and years vary, and t says when the period ends
		every := p[1] >> proto.QuotaEveryShift
		switch p[1] & proto.QuotaUnitMask {
		case proto.QuotaDay:
			ns, ok = mulDivCeil(every, 86400e9, 1)
		case proto.QuotaWeek:
			ns, ok = mulDivCeil(every, 7*86400e9, 1)
		}
	}
	if !ok || ns == 0 {
		return 0
	}
	return int64(min(ns/1e9+min(ns%1e9, 1), math.MaxInt64))
}

// mulDivCeil returns ceil(a*b/c) computed exactly; false if an argument is
// negative, c is 0 or the result overflows int64.
func mulDivCeil(a, b, c int64) (uint64, bool) {
	if a < 0 || b < 0 || c <= 0 {
		return 0, false
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return 0, false
	}
	quo, rem := bits.Div64(hi, lo, uint64(c))
	if rem != 0 {
		quo++
	}
	return quo, quo <= math.MaxInt64
}

// ceilSeconds returns d in whole seconds, rounded up.
func ceilSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++
	}
	return s
}

// sfString returns s as a Structured Fields String (RFC 9651 section
// 3.3.3), replacing each byte outside printable ASCII with '?'.
func sfString(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('?')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// A Policy is one of several limits a request is decided under together,
// all or nothing (WithPolicy, Client.Multi): the policy's name in the
// RateLimit fields, its limit, and its decision of the request.
type Policy struct {
	Name     string
	Limit    Limit
	Decision Decision
}

// RateLimitFieldsOf returns the values of the RateLimit-Policy and
// RateLimit fields for a request decided under several policies at once
// (draft-ietf-httpapi-ratelimit-headers-11: each field is a list, and a
// server may describe several policies). RateLimit-Policy lists every
// policy, in the order of ps, each as RateLimitFields writes it;
// RateLimit names one, the policy closest to its limit, whose numbers bind
// the client: if any denied the request, the denied one that allows last
// (the largest RetryAfter, one that never allows counting as the largest),
// else the one with the least Remaining; the first of equals. That is the
// limit a sidecar reports for a named limit that lists several. A policy
// whose decision is a list's (Decision.Limits) counts as one policy per
// limit of the list (ListPolicies). ps must not be empty.
func RateLimitFieldsOf(ps []Policy) (policy, ratelimit string) {
	ps = ListPolicies(ps)
	var b strings.Builder
	for i := range ps {
		p, _ := RateLimitFields(ps[i].Name, ps[i].Limit, ps[i].Decision)
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(p)
	}
	c := &ps[closest(ps)]
	_, ratelimit = RateLimitFields(c.Name, c.Limit, c.Decision)
	return b.String(), ratelimit
}

// SetRateLimitHeadersOf sets the header fields of a request decided under
// several policies: RateLimit-Policy and RateLimit (RateLimitFieldsOf),
// and Retry-After, the closest policy's, as SetRateLimitHeaders sets it
// for that policy alone (the request passes when it does: every other
// denied policy allows sooner). If a decision is Degraded only Retry-After
// is set, from the first degraded decision. The Python client's
// sluice.headers.response_headers_of gives the same fields (the vectors'
// "several").
func SetRateLimitHeadersOf(h http.Header, ps []Policy) {
	ps = ListPolicies(ps)
	for i := range ps {
		if ps[i].Decision.Degraded {
			SetRateLimitHeaders(h, ps[i].Name, ps[i].Limit, ps[i].Decision)
			return
		}
	}
	c := &ps[closest(ps)]
	d := c.Decision
	if !d.Allowed && d.RetryAfter > 0 && !isConcurrency(c.Limit) {
		h.Set(HeaderRetryAfter, strconv.FormatInt(RetryAfterSeconds(d), 10))
	}
	policy, rl := RateLimitFieldsOf(ps)
	h.Set(HeaderRateLimitPolicy, policy)
	h.Set(HeaderRateLimit, rl)
}

// ListPolicies returns ps with each policy whose decision is a named
// list's (Decision.Limits) replaced by one policy per limit of the list,
// in the list's order: named NAME.1, NAME.2, ... after the policy's name,
// each with its limit's decision. A shadowed request's limits that denied
// are shown allowed, as the sidecar answered the request. ps itself if no
// decision is a list's.
func ListPolicies(ps []Policy) []Policy {
	n, lists := 0, false
	for i := range ps {
		n += max(len(ps[i].Decision.Limits), 1)
		lists = lists || len(ps[i].Decision.Limits) > 0
	}
	if !lists {
		return ps
	}
	out := make([]Policy, 0, n)
	for _, p := range ps {
		ds := p.Decision.Limits
		if len(ds) == 0 || p.Decision.Degraded {
			out = append(out, p)
			continue
		}
		for i, d := range ds {
			if p.Decision.ShadowDenied && !d.Allowed {
				d.Allowed, d.RetryAfter = true, -1 // as the sidecar answers a shadow denial
			}
			out = append(out, Policy{Name: p.Name + "." + strconv.Itoa(i+1), Limit: p.Limit, Decision: d})
		}
	}
	return out
}

// closest returns the index of the policy closest to its limit (see
// RateLimitFieldsOf).
func closest(ps []Policy) int {
	which := 0
	for i := 1; i < len(ps); i++ {
		a, b := &ps[i].Decision, &ps[which].Decision
		switch {
		case a.Allowed != b.Allowed:
			if !a.Allowed {
				which = i
			}
		case !a.Allowed:
			if retryRank(a.RetryAfter) > retryRank(b.RetryAfter) {
				which = i
			}
		case a.Remaining < b.Remaining:
			which = i
		}
	}
	return which
}

// retryRank orders denials by when they allow: a denial that never allows
// (RetryAfter negative) last.
func retryRank(d time.Duration) time.Duration {
	if d < 0 {
		return math.MaxInt64
	}
	return d
}
