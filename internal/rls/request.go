package rls

import (
	"errors"
	"fmt"
	"math"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/engine"
)

// The bounds of a request. A request past them is refused whole, as an
// invalid argument.
const (
	// MaxDescriptors is the most descriptors one request may carry: the
	// engine decides at most this many buckets all or nothing.
	MaxDescriptors = engine.MaxMultiItems
	// MaxEntries is the most entries one descriptor may carry.
	MaxEntries = 64
	// MaxKeyLen is the longest a descriptor may be as a bucket key: its
	// domain, keys and values with two bytes of length each.
	MaxKeyLen = engine.MaxKeyLen
)

// ErrInvalid is wrapped by every error about a malformed request.
var ErrInvalid = errors.New("invalid rate limit request")

// Kind is what decides one descriptor.
type Kind uint8

const (
	None      Kind = iota // no rule applies (or it was replaced): OK, no current limit
	Unlimited             // unlimited: true: OK, limit_remaining the largest uint32
	Blocked               // requests_per_unit 0: every hit is over the limit
	Window                // a fixed window: the rule's, or the request's own limit
	Named                 // a named limit of the config file
)

// Item is one request descriptor, matched and ready to decide.
type Item struct {
	Kind   Kind
	Rule   *Rule        // the matched rule; nil for None and for a request's own limit
	Window engine.Limit // Window: the fixed window
	Unit   Unit         // Window, Blocked: the unit
	Mult   int64        // Window, Blocked: units per window (a request's own limit may say more than 1)
	Per    uint32       // Window, Blocked: requests per window
	Key    []byte       // the bucket's key
	Hits   int64        // the cost: 0 checks only
	Refund bool         // is_negative_hits: Hits go back to the bucket
	Shadow bool         // decided and counted, answered OK
}

// Decides reports whether the engine decides the item: a fixed window or a
// named limit.
func (it *Item) Decides() bool { return it.Kind == Window || it.Kind == Named }

// Match checks req and matches each of its descriptors, appending one Item
// per descriptor, in the request's order, to dst. A descriptor's own limit
// replaces the configuration's, but only in a domain the configuration
// has (envoyproxy/ratelimit's rule); a domain it does not have limits
// nothing. c may be nil: no domain. The error, for a malformed request,
// wraps ErrInvalid.
func (c *Config) Match(dst []Item, req *rlspb.RateLimitRequest) ([]Item, error) {
	domain, ds := req.GetDomain(), req.GetDescriptors()
	switch {
	case domain == "":
		return dst, fmt.Errorf("%w: the domain is empty", ErrInvalid)
	case len(ds) == 0:
		return dst, fmt.Errorf("%w: no descriptors", ErrInvalid)
	case len(ds) > MaxDescriptors:
		return dst, fmt.Errorf("%w: %d descriptors, more than %d", ErrInvalid, len(ds), MaxDescriptors)
	case len(domain) > MaxKeyLen:
		return dst, fmt.Errorf("%w: a domain of %d bytes", ErrInvalid, len(domain))
	}
	known := c != nil && c.domains[domain] != nil
	start := len(dst)
	var entries [MaxEntries][2]string
	for i, d := range ds {
		es := d.GetEntries()
		switch {
		case len(es) == 0:
			return dst[:start], fmt.Errorf("%w: descriptor %d has no entries", ErrInvalid, i)
		case len(es) > MaxEntries:
			return dst[:start], fmt.Errorf("%w: descriptor %d has %d entries, more than %d", ErrInvalid, i, len(es), MaxEntries)
		}
		size := 3 + len(domain)
		for j, e := range es {
			if e.GetKey() == "" {
				return dst[:start], fmt.Errorf("%w: descriptor %d, entry %d has an empty key", ErrInvalid, i, j)
			}
			entries[j] = [2]string{e.GetKey(), e.GetValue()}
			size += 4 + len(e.GetKey()) + len(e.GetValue())
		}
		if size > MaxKeyLen {
			return dst[:start], fmt.Errorf("%w: descriptor %d is %d bytes long, more than %d", ErrInvalid, i, size, MaxKeyLen)
		}
		hits, err := hitsOf(req, d)
		if err != nil {
			return dst[:start], fmt.Errorf("%w: descriptor %d: %v", ErrInvalid, i, err)
		}
		it := Item{Hits: hits, Refund: d.GetIsNegativeHits() && hits > 0}
		it.Key = appendField(append(make([]byte, 0, size), 'r'), domain)
		switch {
		case !known:
		case d.GetLimit() != nil:
			if err := it.override(d.GetLimit()); err != nil {
				return dst[:start], fmt.Errorf("%w: descriptor %d: %v", ErrInvalid, i, err)
			}
			for _, e := range entries[:len(es)] {
				it.Key = appendField(appendField(it.Key, e[0]), e[1])
			}
		default:
			it.Rule, it.Key = c.match(it.Key, domain, entries[:len(es)])
			it.fromRule()
			if len(it.Key) > MaxKeyLen { // a shared wildcard's pattern, longer than the value it matched
				return dst[:start], fmt.Errorf("%w: descriptor %d is %d bytes long, more than %d", ErrInvalid, i, len(it.Key), MaxKeyLen)
			}
		}
		dst = append(dst, it)
	}
	replace(dst[start:])
	return dst, nil
}

// hitsOf returns a descriptor's cost: its own hits_addend if it has one (0
// included: a check), else the request's, which is 1 when 0 or unset.
func hitsOf(req *rlspb.RateLimitRequest, d *ratelimitpb.RateLimitDescriptor) (int64, error) {
	if h := d.GetHitsAddend(); h != nil {
		if h.GetValue() > math.MaxInt64 {
			return 0, fmt.Errorf("hits_addend %d is out of range", h.GetValue())
		}
		return int64(h.GetValue()), nil
	}
	return max(1, int64(req.GetHitsAddend())), nil
}

// fromRule sets the item's kind from its rule.
func (it *Item) fromRule() {
	r := it.Rule
	switch {
	case r == nil:
		it.Kind = None
	case r.Unlimited:
		it.Kind = Unlimited
	case r.Limit != "":
		it.Kind, it.Shadow = Named, r.Shadow
	case r.RequestsPerUnit == 0:
		it.Kind, it.Unit, it.Mult, it.Shadow = Blocked, r.Unit, 1, r.Shadow
	default:
		it.Kind, it.Window, it.Unit, it.Mult, it.Per, it.Shadow = Window, r.window, r.Unit, 1, r.RequestsPerUnit, r.Shadow
	}
}

// override sets the item to a descriptor's own limit.
func (it *Item) override(o *ratelimitpb.RateLimitDescriptor_RateLimitOverride) error {
	u, ok := ParseUnit(o.GetUnit().String())
	if !ok {
		return fmt.Errorf("the limit's unit %s is not a unit of time", o.GetUnit())
	}
	mult := int64(1)
	if m := o.GetUnitMultiplier(); m != nil {
		mult = int64(m.GetValue())
	}
	it.Unit, it.Mult, it.Per = u, mult, o.GetRequestsPerUnit()
	if it.Per == 0 {
		if _, err := FixedWindow(1, u, mult); err != nil {
			return err
		}
		it.Kind = Blocked
		return nil
	}
	w, err := FixedWindow(int64(it.Per), u, mult)
	if err != nil {
		return err
	}
	it.Kind, it.Window = Window, w
	return nil
}

// replace drops the rules that another matched rule replaces (replaces:
// [{name: N}] drops every other matched rule named N).
func replace(items []Item) {
	var gone map[string]bool
	for i := range items {
		if r := items[i].Rule; r != nil && items[i].Kind != None {
			for _, n := range r.Replaces {
				if gone == nil {
					gone = map[string]bool{}
				}
				gone[n] = true
			}
		}
	}
	for i := range items {
		if r := items[i].Rule; r != nil && r.Name != "" && gone[r.Name] {
			items[i].Kind, items[i].Shadow = None, false
		}
	}
}
