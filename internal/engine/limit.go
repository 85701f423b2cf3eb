package engine

import (
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"time"
	_ "time/tzdata" // every zone, whatever the host has

	"github.com/cespare/xxhash/v2"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/proto"
)

// identLen is the length of the encoding of a bucket's identity besides its
// key: the algorithm byte and the three identity words, little-endian. Its
// xxhash64 is the ident of shm.Table.Fingerprint.
const identLen = 1 + 3*8

// Limit is a validated limit ready for the engine: a bucket.Limit and the
// digest of its identity. Build one with NewLimit or FromProto; the zero
// Limit is refused by every operation. A Limit is a value and may be shared
// by goroutines.
type Limit struct {
	b     bucket.Limit
	ident uint64 // the bucket identity digest
	ext   int    // words of the bucket's block: 0 for a fixed-size algorithm
	valid bool
}

// NewLimit validates b and returns it as a Limit. An invalid b is an error
// that is ErrInvalidLimit and says the bucket package's reason.
func NewLimit(b bucket.Limit) (Limit, error) {
	if err := b.Validate(); err != nil {
		return Limit{}, invalidLimit{err}
	}
	var enc [identLen]byte
	enc[0] = byte(b.Algorithm)
	id := b.Identity()
	binary.LittleEndian.PutUint64(enc[1:], uint64(id[0]))
	binary.LittleEndian.PutUint64(enc[9:], uint64(id[1]))
	binary.LittleEndian.PutUint64(enc[17:], uint64(id[2]))
	return Limit{b: b, ident: xxhash.Sum64(enc[:]), ext: b.ExtWords(), valid: true}, nil
}

// MustLimit is NewLimit for limits known to be valid, as in tests and
// examples; it panics on an invalid one.
func MustLimit(b bucket.Limit) Limit {
	l, err := NewLimit(b)
	if err != nil {
		panic(err)
	}
	return l
}

// FromProto validates a limit as the wire carries it and returns it as a
// Limit. This is the one place where the order of proto.Limit's three
// parameters meets the algorithms' named fields (proto's Algorithm
// constants document the order).
func FromProto(w proto.Limit) (Limit, error) {
	b, err := bucketLimit(w)
	if err != nil {
		return Limit{}, err
	}
	return NewLimit(b)
}

// bucketLimit maps a wire limit's parameters onto bucket.Limit's fields.
func bucketLimit(w proto.Limit) (bucket.Limit, error) {
	p := w.P
	switch w.Algorithm {
	case proto.TokenBucket:
		return bucket.Limit{Algorithm: bucket.TokenBucket, Max: p[0], RefillTime: p[1], RefillAmount: p[2]}, nil
	case proto.GCRA:
		return bucket.Limit{Algorithm: bucket.GCRA, Burst: p[0], Count: p[1], Period: p[2]}, nil
	case proto.FixedWindow, proto.SlidingWindow:
		if p[2] != 0 {
			return bucket.Limit{}, invalidLimit{fmt.Errorf("%v takes two parameters, got a third: %d", w.Algorithm, p[2])}
		}
		alg := bucket.FixedWindow
		if w.Algorithm == proto.SlidingWindow {
			alg = bucket.SlidingWindow
		}
		return bucket.Limit{Algorithm: alg, Max: p[0], Window: p[1]}, nil
	case proto.Pacer:
		return bucket.Limit{Algorithm: bucket.Pacer, Count: p[0], Period: p[1], MaxDelay: p[2]}, nil
	case proto.SlidingLog:
		if p[2] != 0 {
			return bucket.Limit{}, invalidLimit{fmt.Errorf("%v takes two parameters, got a third: %d", w.Algorithm, p[2])}
		}
		return bucket.Limit{Algorithm: bucket.SlidingLog, Max: p[0], Window: p[1]}, nil
	case proto.WindowCounters:
		if p[2]&^proto.WindowCountersBits != 0 {
			return bucket.Limit{}, invalidLimit{fmt.Errorf("%v: third parameter %#x sets bits other than counters (0-7) and count_denied (8)", w.Algorithm, p[2])}
		}
		return bucket.Limit{Algorithm: bucket.WindowCounters, Max: p[0], Window: p[1],
			Counters: p[2] & proto.CountersMask, CountDenied: p[2]&proto.CountDeniedBit != 0}, nil
	case proto.Concurrency:
		if p[2] != 0 {
			return bucket.Limit{}, invalidLimit{fmt.Errorf("%v takes two parameters, got a third: %d", w.Algorithm, p[2])}
		}
		return bucket.Limit{Algorithm: bucket.Concurrency, Max: p[0], Lease: p[1]}, nil
	case proto.Quota:
		return quotaLimit(w)
	}
	return bucket.Limit{}, invalidLimit{fmt.Errorf("unknown algorithm %d", w.Algorithm)}
}

// quotaLimit maps a quota's wire parameters and time zone onto
// bucket.Limit's fields.
func quotaLimit(w proto.Limit) (bucket.Limit, error) {
	p := w.P
	unit := p[1] & proto.QuotaUnitMask
	if unit < proto.QuotaDay || unit > proto.QuotaYear {
		return bucket.Limit{}, invalidLimit{fmt.Errorf("quota period unit %d, want day (1), week (2), month (3) or year (4)", unit)}
	}
	if p[2]&^proto.QuotaBits != 0 {
		return bucket.Limit{}, invalidLimit{fmt.Errorf("quota: third parameter %#x sets bits other than anchor (0-7) and week_start (8-15)", p[2])}
	}
	loc, err := LoadZone(w.TZ)
	if err != nil {
		return bucket.Limit{}, invalidLimit{err}
	}
	return bucket.Limit{Algorithm: bucket.Quota, Max: p[0], Calendar: bucket.CalendarUnit(unit), Every: p[1] >> proto.QuotaEveryShift,
		Anchor: p[2] & proto.QuotaAnchorMask, WeekStart: p[2] >> proto.QuotaWeekStartShift, Loc: loc}, nil
}

// zoneCache holds the time zones loaded so far, by name: loading one
// parses its rules, and a limit is built per request.
var zoneCache sync.Map // string -> *time.Location

// LoadZone returns the time zone named name from Go's database (embedded
// in the binary, so a host without zoneinfo knows every zone too): nil for
// "" and "UTC". An unknown name is an error that says so.
func LoadZone(name string) (*time.Location, error) {
	if name == "" || name == "UTC" {
		return nil, nil
	}
	if loc, ok := zoneCache.Load(name); ok {
		return loc.(*time.Location), nil
	}
	if name == "Local" || strings.HasPrefix(name, "/") || strings.Contains(name, "..") {
		return nil, fmt.Errorf("unknown time zone %q", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("unknown time zone %q", name)
	}
	got, _ := zoneCache.LoadOrStore(name, loc)
	return got.(*time.Location), nil
}

// Bucket returns the limit's algorithm and parameters.
func (l *Limit) Bucket() *bucket.Limit { return &l.b }

// invalidLimit is the bucket package's reason for refusing a limit, as the
// engine reports it: its text, and errors.Is ErrInvalidLimit.
type invalidLimit struct{ err error }

func (e invalidLimit) Error() string        { return e.err.Error() }
func (e invalidLimit) Unwrap() error        { return e.err }
func (e invalidLimit) Is(target error) bool { return target == ErrInvalidLimit }

// FlagsFromProto converts a request's wire flags to the algorithms' flags:
// STRICT and SMYTE; the others are not the algorithms' business.
func FlagsFromProto(f proto.Flags) bucket.Flags {
	var b bucket.Flags
	if f&proto.FlagStrict != 0 {
		b |= bucket.Strict
	}
	if f&proto.FlagSmyte != 0 {
		b |= bucket.Smyte
	}
	return b
}
