package proto

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/vocab"
)

// Algorithm names a limiter algorithm on the wire: the first byte of a
// limit. The zero value is invalid. It is package vocab's enum, which
// package bucket's algorithms share.
type Algorithm = vocab.Algorithm

// The algorithms, with their parameters P[0], P[1], P[2] (durations in
// nanoseconds). Those from SlidingLog on are version 3's: a frame of an
// earlier version may not carry them (Algorithm.ValidIn).
const (
	TokenBucket    = vocab.TokenBucket    // max, refill_time, refill_amount
	GCRA           = vocab.GCRA           // burst, count, period
	FixedWindow    = vocab.FixedWindow    // limit, window, 0
	SlidingWindow  = vocab.SlidingWindow  // limit, window, 0
	Pacer          = vocab.Pacer          // rate, period, max_delay
	SlidingLog     = vocab.SlidingLog     // limit, window, 0 (version 3)
	WindowCounters = vocab.WindowCounters // limit, window, counters | count_denied<<8 (version 3)
	Concurrency    = vocab.Concurrency    // limit, lease, 0 (version 3)
	Quota          = vocab.Quota          // limit, period (unit | every<<8), anchor | week_start<<8; and Limit.TZ (version 5)

	numAlgorithms = vocab.NumAlgorithms // one past the last Algorithm
)

// A window_counters limit's P[2] packs two parameters: the number of
// counters the window is divided into in bits 0-7, and count_denied in bit
// 8. Its other bits must be 0; the server refuses a limit that sets one.
const (
	CountersMask       = 0xff                          // the bits of P[2] holding counters
	CountDeniedBit     = 1 << 8                        // the bit of P[2] holding count_denied
	WindowCountersBits = CountersMask | CountDeniedBit // the bits P[2] may set
	DefaultCounters    = 60                            // counters when a spec leaves them out

	maxSpecParams = 5 // the most parameters of one algorithm's spec
)

// A quota limit's P[1] is its period: the calendar unit in bits 0-7 (one
// of the Quota* units) and how many of them a period spans in bits 8-63.
// Its P[2] packs the anchor, the day of the month months and years start
// on (1-31; 0 means 1), in bits 0-7 and the first day of a week, in days
// after Monday (0-6), in bits 8-15; its other bits must be 0. Its time
// zone is Limit.TZ, which the wire carries after the three parameters.
const (
	QuotaDay   = 1 // a period of local days
	QuotaWeek  = 2 // of weeks
	QuotaMonth = 3 // of months
	QuotaYear  = 4 // of years

	QuotaUnitMask       = 0xff   // the bits of P[1] holding the unit
	QuotaEveryShift     = 8      // P[1] >> QuotaEveryShift: the units a period spans
	QuotaAnchorMask     = 0xff   // the bits of P[2] holding the anchor
	QuotaWeekStartShift = 8      // (P[2] >> QuotaWeekStartShift) & 0xff: the week's first day
	QuotaBits           = 0xffff // the bits P[2] may set

	// MaxZoneLen is the longest time zone name a quota may carry, in bytes.
	MaxZoneLen = 64
)

// quotaUnits are the calendar units' names, by their value in P[1].
var quotaUnits = [...]string{QuotaDay: "day", QuotaWeek: "week", QuotaMonth: "month", QuotaYear: "year"}

// weekdays are the names week_start takes, Monday first (its value 0).
var weekdays = [...]string{"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"}

// paramKind says how a spec parameter is written and where the wire keeps
// it.
type paramKind uint8

const (
	intParam      paramKind = iota // a decimal integer: the whole wire parameter
	durationParam                  // a duration: the whole wire parameter, in nanoseconds
	countersParam                  // a decimal integer 0..255: bits 0-7 of P[2]
	boolParam                      // true or false: bit 8 of P[2] (CountDeniedBit)
	calendarParam                  // a quota's period, "day", "2week", ...: P[1]
	anchorParam                    // a decimal integer 0..255: bits 0-7 of P[2]
	weekdayParam                   // a day's name, "monday": bits 8-15 of P[2]
	zoneParam                      // a time zone's name: Limit.TZ, not a wire parameter
)

// specParam is one parameter of a limit spec: its name, the wire parameter
// (0, 1 or 2) that holds it, how, and whether a spec may leave it out
// (token_bucket's refill_amount then defaults to max, window_counters'
// counters to DefaultCounters and count_denied to false).
type specParam struct {
	name     string
	p        int
	kind     paramKind
	optional bool
}

// specParams are each algorithm's spec parameters, in canonical order
// (wire order).
var specParams = [numAlgorithms][]specParam{
	TokenBucket: {
		{"max", 0, intParam, false}, {"refill_time", 1, durationParam, false}, {"refill_amount", 2, intParam, true}},
	GCRA: {
		{"burst", 0, intParam, false}, {"count", 1, intParam, false}, {"period", 2, durationParam, false}},
	FixedWindow:   windowParams,
	SlidingWindow: windowParams,
	Pacer: {
		{"rate", 0, intParam, false}, {"period", 1, durationParam, false}, {"max_delay", 2, durationParam, false}},
	SlidingLog: windowParams,
	WindowCounters: {
		{"limit", 0, intParam, false}, {"window", 1, durationParam, false},
		{"counters", 2, countersParam, true}, {"count_denied", 2, boolParam, true}},
	Concurrency: {
		{"limit", 0, intParam, false}, {"lease", 1, durationParam, false}},
	Quota: {
		{"limit", 0, intParam, false}, {"period", 1, calendarParam, false}, {"tz", -1, zoneParam, true},
		{"anchor", 2, anchorParam, true}, {"week_start", 2, weekdayParam, true}},
}

// windowParams are the parameters of fixed_window, sliding_window and
// sliding_log.
var windowParams = []specParam{{"limit", 0, intParam, false}, {"window", 1, durationParam, false}}

// ParseAlgorithm returns the algorithm named s, one of the names String
// returns for a valid algorithm, in lower case; otherwise an error wrapping
// ErrInvalidLimit.
func ParseAlgorithm(s string) (Algorithm, error) {
	if a := algorithmNamed(s); a != 0 {
		return a, nil
	}
	return 0, errorf(ErrInvalidLimit, "unknown algorithm %q", s)
}

// algorithmNamed returns the algorithm named s, or 0.
func algorithmNamed(s string) Algorithm { return vocab.Named(s) }

// Limit is an algorithm and its three parameters, in the order of the
// Algorithm constants; durations are nanoseconds and a parameter the
// algorithm does not use is 0; window_counters packs two parameters in
// P[2] (CountersMask, CountDeniedBit). Limit is comparable and is exactly
// what the wire carries. proto checks only that the algorithm is valid;
// the server validates the parameters (window_counters' unused bits of
// P[2] included). The zero Limit is invalid.
//
// A named limit (protocol version 2) has only a Name: the sidecar looks it
// up in its configuration. Its Algorithm and P are zero.
type Limit struct {
	Algorithm Algorithm
	P         [3]int64
	Name      string // a named limit's name (ValidName); "" for a limit given by its parameters
	// TZ is a quota's time zone, an IANA name ("Europe/Paris"); "" is UTC.
	// The other algorithms have none. The wire carries it after P.
	TZ string
	// Shadow is the spec's shadow=true, which any algorithm's spec may
	// carry: an ACQUIRE of the limit is sent with FlagShadow (decided and
	// consumed as usual, a denial answered as allowed and marked
	// shadow-denied). It is not part of the limit field on the wire, and
	// the other operations ignore it.
	Shadow bool
}

// Named returns the limit the sidecar's configuration defines under name.
func Named(name string) Limit { return Limit{Name: name} }

// MaxNameLen is the longest name of a named limit, in bytes.
const MaxNameLen = 64

// ValidName reports what is wrong with name as the name of a limit, nil if
// nothing: 1 to MaxNameLen bytes of ASCII letters, digits, '_', '-' and
// '.', starting with a letter. A name never holds ':', which is how a limit
// argument tells a name from a spec.
func ValidName(name string) error {
	if name == "" || len(name) > MaxNameLen {
		return errorf(ErrInvalidLimit, "limit name of %d bytes, want 1 to %d", len(name), MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !letter && (i == 0 || !(c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.')) {
			return errorf(ErrInvalidLimit, "limit name %q: want letters, digits, '_', '-' and '.', starting with a letter", name)
		}
	}
	return nil
}

// TokenBucketLimit returns a token_bucket limit: a bucket of max tokens that
// gains refillAmount tokens every refillTime.
func TokenBucketLimit(max int64, refillTime time.Duration, refillAmount int64) Limit {
	return Limit{Algorithm: TokenBucket, P: [3]int64{max, int64(refillTime), refillAmount}}
}

// GCRALimit returns a gcra limit: count requests per period, with bursts of
// burst+1.
func GCRALimit(burst, count int64, period time.Duration) Limit {
	return Limit{Algorithm: GCRA, P: [3]int64{burst, count, int64(period)}}
}

// FixedWindowLimit returns a fixed_window limit: limit tokens per window,
// windows aligned to multiples of window since the Unix epoch.
func FixedWindowLimit(limit int64, window time.Duration) Limit {
	return Limit{Algorithm: FixedWindow, P: [3]int64{limit, int64(window), 0}}
}

// SlidingWindowLimit returns a sliding_window limit: limit tokens over any
// window, estimated from two aligned windows.
func SlidingWindowLimit(limit int64, window time.Duration) Limit {
	return Limit{Algorithm: SlidingWindow, P: [3]int64{limit, int64(window), 0}}
}

// PacerLimit returns a pacer limit: rate events per period, spaced evenly,
// refusing a request that would have to wait more than maxDelay.
func PacerLimit(rate int64, period, maxDelay time.Duration) Limit {
	return Limit{Algorithm: Pacer, P: [3]int64{rate, int64(period), int64(maxDelay)}}
}

// SlidingLogLimit returns a sliding_log limit (version 3): limit tokens
// over any window, exactly, from a log of the requests' times.
func SlidingLogLimit(limit int64, window time.Duration) Limit {
	return Limit{Algorithm: SlidingLog, P: [3]int64{limit, int64(window), 0}}
}

// WindowCountersLimit returns a window_counters limit (version 3): limit
// tokens over any window, counted in counters sub-windows (the server
// accepts 1 to 64); with countDenied, denied requests count too.
func WindowCountersLimit(limit int64, window time.Duration, counters uint8, countDenied bool) Limit {
	p2 := int64(counters)
	if countDenied {
		p2 |= CountDeniedBit
	}
	return Limit{Algorithm: WindowCounters, P: [3]int64{limit, int64(window), p2}}
}

// ConcurrencyLimit returns a concurrency limit (version 3): at most limit
// leases held at once, each freed by RELEASE or, failing that, lease after
// it was taken.
func ConcurrencyLimit(limit int64, lease time.Duration) Limit {
	return Limit{Algorithm: Concurrency, P: [3]int64{limit, int64(lease), 0}}
}

// QuotaLimit returns a quota limit (version 5): limit tokens per calendar
// period of every units (QuotaDay, QuotaWeek, QuotaMonth, QuotaYear) in the
// time zone tz ("" for UTC), months and years starting on day anchor of
// the month (0 for the 1st), weeks on weekStart days after Monday.
func QuotaLimit(limit int64, unit int64, every int64, tz string, anchor, weekStart int64) Limit {
	return Limit{Algorithm: Quota, P: [3]int64{limit, unit | every<<QuotaEveryShift, anchor | weekStart<<QuotaWeekStartShift}, TZ: tz}
}

// String returns the limit's canonical spec: the algorithm, then every
// parameter in order, durations as time.Duration.String gives them:
// "gcra:burst=4,count=1,period=1s"; window_counters' count_denied only when
// true ("window_counters:limit=100,window=1h0m0s,counters=60"). For every
// Limit ParseLimit returns, ParseLimit(l.String()) == l. A limit ParseLimit
// cannot return still formats readably (a negative value, "p2=N" for a
// third parameter a window does not use or a window_counters P[2] with
// bits outside WindowCountersBits, "algorithm(N):p0=..." for an invalid
// algorithm) but does not parse back.
func (l Limit) String() string {
	if l.Name != "" {
		return l.Name
	}
	b := make([]byte, 0, 64)
	if l.Algorithm.Valid() {
		b = append(b, l.Algorithm.String()...)
	} else {
		b = append(b, vocab.Unnamed(l.Algorithm)...)
	}
	sep := byte(':')
	param := func(name string) {
		b = append(b, sep)
		b = append(b, name...)
		b = append(b, '=')
		sep = ','
	}
	if !l.Algorithm.Valid() {
		for i, v := range l.P {
			param("p" + strconv.Itoa(i))
			b = strconv.AppendInt(b, v, 10)
		}
		return string(b)
	}
	var shown [3]bool // the wire parameters the named ones showed
	for _, sp := range specParams[l.Algorithm] {
		if sp.kind == zoneParam {
			if l.TZ != "" {
				param(sp.name)
				b = append(b, l.TZ...)
			}
			continue
		}
		v := l.P[sp.p]
		switch sp.kind {
		case calendarParam:
			unit, every := v&QuotaUnitMask, v>>QuotaEveryShift
			if unit < QuotaDay || unit > QuotaYear || every < 1 {
				continue // shown whole, as p1
			}
			param(sp.name)
			if every > 1 {
				b = strconv.AppendInt(b, every, 10)
			}
			b = append(b, quotaUnits[unit]...)
		case anchorParam:
			if v&^QuotaBits != 0 || v&QuotaAnchorMask == 0 {
				continue
			}
			param(sp.name)
			b = strconv.AppendInt(b, v&QuotaAnchorMask, 10)
		case weekdayParam:
			ws := v >> QuotaWeekStartShift & 0xff
			if v&^QuotaBits != 0 || ws == 0 || ws >= int64(len(weekdays)) {
				continue
			}
			param(sp.name)
			b = append(b, weekdays[ws]...)
		case intParam:
			param(sp.name)
			b = strconv.AppendInt(b, v, 10)
		case durationParam:
			param(sp.name)
			b = append(b, time.Duration(v).String()...)
		case countersParam:
			if v&^WindowCountersBits != 0 {
				continue // shown whole, as p2
			}
			param(sp.name)
			b = strconv.AppendInt(b, v&CountersMask, 10)
		case boolParam:
			if v&^WindowCountersBits != 0 || v&CountDeniedBit == 0 {
				continue
			}
			param(sp.name)
			b = append(b, "true"...)
		}
		shown[sp.p] = true
	}
	if l.Algorithm == Quota && l.P[2] != 0 && !validQuotaP2(l.P[2]) {
		shown[2] = false // bits no named parameter holds: shown whole
	}
	for i, v := range l.P {
		if !shown[i] && v != 0 {
			param("p" + strconv.Itoa(i))
			b = strconv.AppendInt(b, v, 10)
		}
	}
	if l.Shadow {
		param("shadow")
		b = append(b, "true"...)
	}
	return string(b)
}

// limitError is a ParseLimit error: it names the spec and the bad part and
// wraps ErrInvalidLimit.
type limitError struct{ spec, msg string }

func (e *limitError) Error() string { return "proto: limit " + strconv.Quote(e.spec) + ": " + e.msg }
func (e *limitError) Unwrap() error { return ErrInvalidLimit }

// ParseLimit parses a limit spec, "ALGORITHM:name=value,...", as package doc
// describes under "Limit spec". Parameters are order-free, each at most
// once, all required except token_bucket's refill_amount, which defaults to
// max, and window_counters' counters and count_denied, which default to
// DefaultCounters and false. Durations are ParseDuration strings (Go's,
// and d for days) or a bare integer of nanoseconds; no value may be negative. Only the syntax
// and what the wire can hold are checked (counters 0..255): the server
// decides whether the values make a usable limit. The error wraps
// ErrInvalidLimit and names the bad part:
//
//	proto: limit "gcra:burst=x,count=1,period=1s": burst: invalid integer "x"
func ParseLimit(s string) (Limit, error) {
	fail := func(format string, args ...any) (Limit, error) {
		return Limit{}, &limitError{s, fmt.Sprintf(format, args...)}
	}
	name, params, hasParams := strings.Cut(s, ":")
	if !hasParams && algorithmNamed(s) == 0 {
		// No parameters: the name of a limit in the sidecar's configuration.
		if err := ValidName(s); err != nil {
			return fail("not a limit spec (ALGORITHM:name=value,...) nor a limit's name")
		}
		return Named(s), nil
	}
	l := Limit{Algorithm: algorithmNamed(name)}
	if l.Algorithm == 0 {
		return fail("unknown algorithm %q", name)
	}
	want := specParams[l.Algorithm]
	var seen [maxSpecParams]bool
	shadowSeen := false
	for hasParams {
		var p string
		p, params, hasParams = strings.Cut(params, ",")
		key, value, ok := strings.Cut(p, "=")
		if !ok {
			if p == "" {
				return fail("empty parameter")
			}
			return fail("%s: missing \"=value\"", p)
		}
		if key == "shadow" { // every algorithm's
			if shadowSeen {
				return fail("duplicate parameter %q", key)
			}
			shadowSeen = true
			switch value {
			case "true", "false":
				l.Shadow = value == "true"
			default:
				return fail("shadow: invalid boolean %q, want true or false", value)
			}
			continue
		}
		i := paramIndex(want, key)
		if i < 0 {
			return fail("unknown parameter %q for %s (want %s)", key, l.Algorithm, paramList(want))
		}
		if seen[i] {
			return fail("duplicate parameter %q", key)
		}
		seen[i] = true
		sp := &want[i]
		if sp.kind == zoneParam {
			if msg := checkZone(value); msg != "" {
				return fail("tz: %s", msg)
			}
			if value != "UTC" {
				l.TZ = value
			}
			continue
		}
		v, err := parseValue(value, sp.kind)
		if err != "" {
			return fail("%s: %s", key, err)
		}
		l.P[sp.p] |= v // only window_counters' P[2] holds two parameters, in distinct bits
	}
	for i, sp := range want {
		switch {
		case seen[i]:
		case !sp.optional:
			return fail("missing parameter %q", sp.name)
		case l.Algorithm == TokenBucket:
			l.P[2] = l.P[0] // refill_amount defaults to max
		case sp.kind == countersParam:
			l.P[2] |= DefaultCounters
		}
	}
	return l, nil
}

// paramIndex returns the index in params of the parameter named key,
// or -1.
func paramIndex(params []specParam, key string) int {
	for i := range params {
		if params[i].name == key {
			return i
		}
	}
	return -1
}

// paramList returns the algorithm's parameter names for a message.
func paramList(params []specParam) string {
	names := make([]string, len(params))
	for i := range params {
		names[i] = params[i].name
	}
	return strings.Join(names, ", ")
}

// parseValue parses a parameter value of the given kind to the bits it
// puts in its wire parameter, and returns what is wrong with it, "" if
// nothing is.
func parseValue(s string, kind paramKind) (int64, string) {
	var v int64
	switch kind {
	case calendarParam:
		return parseCalendar(s)
	case weekdayParam:
		for i, name := range weekdays {
			if s == name {
				return int64(i) << QuotaWeekStartShift, ""
			}
		}
		return 0, "invalid day " + strconv.Quote(s) + ", want monday, tuesday, ... or sunday"
	}
	switch {
	case kind == boolParam:
		switch s {
		case "true":
			return CountDeniedBit, ""
		case "false":
			return 0, ""
		}
		return 0, "invalid boolean " + strconv.Quote(s) + ", want true or false"
	case isInteger(s):
		var err error
		if v, err = strconv.ParseInt(s, 10, 64); err != nil {
			return 0, "integer out of range " + strconv.Quote(s)
		}
	case kind == durationParam:
		d, err := ParseDuration(s)
		if err != nil {
			return 0, "invalid duration " + strconv.Quote(s)
		}
		v = int64(d)
	default:
		return 0, "invalid integer " + strconv.Quote(s)
	}
	if v < 0 {
		return 0, "negative value " + s
	}
	if (kind == countersParam || kind == anchorParam) && v > CountersMask {
		return 0, "value " + s + " out of range, want 0..255"
	}
	return v, ""
}

// parseCalendar parses a quota's period, an optional decimal multiple and
// a unit ("day", "2week", "3month", "year"), to its P[1].
func parseCalendar(s string) (int64, string) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	every := int64(1)
	if i > 0 {
		var err error
		if every, err = strconv.ParseInt(s[:i], 10, 64); err != nil || every > math.MaxInt64>>QuotaEveryShift {
			return 0, "multiple out of range " + strconv.Quote(s)
		}
	}
	for u, name := range quotaUnits {
		if name != "" && s[i:] == name {
			return int64(u) | every<<QuotaEveryShift, ""
		}
	}
	return 0, "invalid period " + strconv.Quote(s) + ", want day, week, month or year, or a multiple such as 2week"
}

// validQuotaP2 reports whether a quota's P[2] sets only the anchor's and
// the week start's bits, with a week start of 0-6.
func validQuotaP2(v int64) bool {
	return v&^QuotaBits == 0 && v>>QuotaWeekStartShift < int64(len(weekdays))
}

// checkZone returns what is wrong with s as a time zone's name, "" if
// nothing: 1 to MaxZoneLen bytes of ASCII letters, digits, '/', '_', '-',
// '+' and '.'. Whether the zone exists is the server's to say.
func checkZone(s string) string {
	if s == "" || len(s) > MaxZoneLen {
		return "time zone name of " + strconv.Itoa(len(s)) + " bytes, want 1 to " + strconv.Itoa(MaxZoneLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("/_-+.", c) >= 0) {
			return "invalid time zone name " + strconv.Quote(s)
		}
	}
	return ""
}

// isInteger reports whether s is an optional sign and one or more digits.
func isInteger(s string) bool {
	if s != "" && (s[0] == '+' || s[0] == '-') {
		s = s[1:]
	}
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Wire form of a limit: algorithm u8, then p0, p1, p2 as i64.
const limitLen = 1 + 3*8

// appendLimit appends l's wire form: a named limit's name (u8 length and
// bytes), any other limit's algorithm and parameters.
func appendLimit(dst []byte, l *Limit) []byte {
	if l.Name != "" {
		if len(l.Name) > math.MaxUint8 {
			panic("proto: a limit name of " + strconv.Itoa(len(l.Name)) + " bytes does not fit a u8 length")
		}
		dst = append(dst, byte(len(l.Name)))
		return append(dst, l.Name...)
	}
	dst = append(dst, byte(l.Algorithm))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(l.P[0]))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(l.P[1]))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(l.P[2]))
	if l.Algorithm == Quota {
		if len(l.TZ) > math.MaxUint8 {
			panic("proto: a time zone name of " + strconv.Itoa(len(l.TZ)) + " bytes does not fit a u8 length")
		}
		dst = append(dst, byte(len(l.TZ)))
		dst = append(dst, l.TZ...)
	}
	return dst
}

// decodeZone decodes a quota's time zone at the start of b: u8 length
// (0..MaxZoneLen, 0 for UTC) and bytes. The name is interned (zones), so a
// decoder allocates only the first time it meets a zone.
func decodeZone(b []byte, code Opcode, l *Limit) ([]byte, error) {
	if len(b) < 1 {
		return nil, truncated(code.String()+" time zone", 1, 0)
	}
	n := int(b[0])
	if n > MaxZoneLen {
		return nil, errorf(ErrInvalidLimit, "%v time zone name of %d bytes, want 0..%d", code, n, MaxZoneLen)
	}
	if len(b) < 1+n {
		return nil, truncated(code.String()+" time zone", n, len(b)-1)
	}
	l.TZ = zones.intern(b[1 : 1+n])
	return b[1+n:], nil
}

// zones interns the time zone names decoders meet: a few hundred exist, so
// the set stays small; past zoneCap names (bytes no zone has) a name is
// allocated each time instead.
var zones = internSet{m: map[string]string{}}

const zoneCap = 1024

type internSet struct {
	mu sync.Mutex
	m  map[string]string
}

func (z *internSet) intern(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	if s, ok := z.m[string(b)]; ok { // no allocation: the compiler's map lookup by a []byte's string
		return s
	}
	s := string(b)
	if len(z.m) < zoneCap {
		z.m[s] = s
	}
	return s
}

// decodeLimit decodes the limit at the start of b, which holds at least
// limitLen bytes, into l. It returns an error wrapping ErrInvalidLimit for
// an algorithm that is not one of version v's.
func decodeLimit(b []byte, v uint8, l *Limit) error {
	_ = b[limitLen-1] // bounds check hint to compiler; see golang.org/issue/14808
	l.Algorithm = Algorithm(b[0])
	l.P[0] = int64(binary.LittleEndian.Uint64(b[1:]))
	l.P[1] = int64(binary.LittleEndian.Uint64(b[9:]))
	l.P[2] = int64(binary.LittleEndian.Uint64(b[17:]))
	if !l.Algorithm.ValidIn(v) {
		return errorf(ErrInvalidLimit, "unknown algorithm %d", b[0])
	}
	return nil
}

// limitFlags returns the flags l's wire form needs.
func limitFlags(l *Limit) Flags {
	if l.Name != "" {
		return FlagNamed
	}
	return 0
}

// opLimitFlags returns the flags an item operation op of limit l carries
// besides its caller's: FlagNamed for a named limit, FlagShadow for an
// ACQUIRE of a limit whose spec says shadow=true.
func opLimitFlags(op Opcode, l *Limit) Flags {
	f := limitFlags(l)
	if l.Shadow && op == OpAcquire {
		f |= FlagShadow
	}
	return f
}

// decodeName decodes a named limit's name at the start of b, the field of
// an operation code: u8 length (1..MaxNameLen) and bytes. The name aliases
// b.
func decodeName(b []byte, code Opcode) (name, rest []byte, err error) {
	if len(b) < 1 {
		return nil, nil, truncated(code.String()+" limit name", 1, 0)
	}
	n := int(b[0])
	if n < 1 || n > MaxNameLen {
		return nil, nil, errorf(ErrInvalidLimit, "%v limit name of %d bytes, want 1..%d", code, n, MaxNameLen)
	}
	if len(b) < 1+n {
		return nil, nil, truncated(code.String()+" limit name", n, len(b)-1)
	}
	return b[1 : 1+n : 1+n], b[1+n:], nil
}
