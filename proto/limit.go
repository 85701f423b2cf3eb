package proto

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Algorithm names a limiter algorithm on the wire: the first byte of a
// limit. The zero value is invalid. The values are those of package
// bucket, which proto does not import.
type Algorithm uint8

// The algorithms, with their parameters P[0], P[1], P[2] (durations in
// nanoseconds).
const (
	TokenBucket   Algorithm = 1 // max, refill_time, refill_amount
	GCRA          Algorithm = 2 // burst, count, period
	FixedWindow   Algorithm = 3 // limit, window, 0
	SlidingWindow Algorithm = 4 // limit, window, 0
	Pacer         Algorithm = 5 // rate, period, max_delay

	numAlgorithms = 6 // one past the last Algorithm
)

// algorithmInfo is an algorithm's name and its parameters' names, "" for
// an unused one, and which of them are durations.
type algorithmInfo struct {
	name     string
	params   [3]string
	duration [3]bool
}

var algorithms = [numAlgorithms]algorithmInfo{
	TokenBucket:   {"token_bucket", [3]string{"max", "refill_time", "refill_amount"}, [3]bool{false, true, false}},
	GCRA:          {"gcra", [3]string{"burst", "count", "period"}, [3]bool{false, false, true}},
	FixedWindow:   {"fixed_window", [3]string{"limit", "window", ""}, [3]bool{false, true, false}},
	SlidingWindow: {"sliding_window", [3]string{"limit", "window", ""}, [3]bool{false, true, false}},
	Pacer:         {"pacer", [3]string{"rate", "period", "max_delay"}, [3]bool{false, true, true}},
}

// Valid reports whether a is one of the algorithms of this version.
func (a Algorithm) Valid() bool { return a >= TokenBucket && a < numAlgorithms }

// String returns the algorithm's name in limit specs ("token_bucket", ...),
// or "algorithm(N)" for a value outside the enum.
func (a Algorithm) String() string {
	if a.Valid() {
		return algorithms[a].name
	}
	return "algorithm(" + strconv.Itoa(int(a)) + ")"
}

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
func algorithmNamed(s string) Algorithm {
	for a := TokenBucket; a < numAlgorithms; a++ {
		if algorithms[a].name == s {
			return a
		}
	}
	return 0
}

// Limit is an algorithm and its three parameters, in the order of the
// Algorithm constants; durations are nanoseconds and a parameter the
// algorithm does not use is 0. Limit is comparable and is exactly what the
// wire carries. proto checks only that the algorithm is valid; the server
// validates the parameters. The zero Limit is invalid.
type Limit struct {
	Algorithm Algorithm
	P         [3]int64
}

// TokenBucketLimit returns a token_bucket limit: a bucket of max tokens that
// gains refillAmount tokens every refillTime.
func TokenBucketLimit(max int64, refillTime time.Duration, refillAmount int64) Limit {
	return Limit{TokenBucket, [3]int64{max, int64(refillTime), refillAmount}}
}

// GCRALimit returns a gcra limit: count requests per period, with bursts of
// burst+1.
func GCRALimit(burst, count int64, period time.Duration) Limit {
	return Limit{GCRA, [3]int64{burst, count, int64(period)}}
}

// FixedWindowLimit returns a fixed_window limit: limit tokens per window,
// windows aligned to multiples of window since the Unix epoch.
func FixedWindowLimit(limit int64, window time.Duration) Limit {
	return Limit{FixedWindow, [3]int64{limit, int64(window), 0}}
}

// SlidingWindowLimit returns a sliding_window limit: limit tokens over any
// window, estimated from two aligned windows.
func SlidingWindowLimit(limit int64, window time.Duration) Limit {
	return Limit{SlidingWindow, [3]int64{limit, int64(window), 0}}
}

// PacerLimit returns a pacer limit: rate events per period, spaced evenly,
// refusing a request that would have to wait more than maxDelay.
func PacerLimit(rate int64, period, maxDelay time.Duration) Limit {
	return Limit{Pacer, [3]int64{rate, int64(period), int64(maxDelay)}}
}

// String returns the limit's canonical spec: the algorithm, then every
// parameter in order, durations as time.Duration.String gives them:
// "gcra:burst=4,count=1,period=1s". For every Limit ParseLimit returns,
// ParseLimit(l.String()) == l. A limit ParseLimit cannot return still
// formats readably (a negative value, "p2=N" for a third parameter a window
// does not use, "algorithm(N):p0=..." for an invalid algorithm) but does not
// parse back.
func (l Limit) String() string {
	b := make([]byte, 0, 64)
	var info algorithmInfo
	if l.Algorithm.Valid() {
		info = algorithms[l.Algorithm]
	}
	b = append(b, l.Algorithm.String()...)
	sep := byte(':')
	for i, v := range l.P {
		name := info.params[i]
		if name == "" {
			if v == 0 && l.Algorithm.Valid() {
				continue
			}
			name = "p" + strconv.Itoa(i)
		}
		b = append(b, sep)
		b = append(b, name...)
		b = append(b, '=')
		if info.duration[i] {
			b = append(b, time.Duration(v).String()...)
		} else {
			b = strconv.AppendInt(b, v, 10)
		}
		sep = ','
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
// max. Durations are time.ParseDuration strings or a bare integer of
// nanoseconds; no value may be negative. Only the syntax is checked: the
// server decides whether the values make a usable limit. The error wraps
// ErrInvalidLimit and names the bad part:
//
//	proto: limit "gcra:burst=x,count=1,period=1s": burst: invalid integer "x"
func ParseLimit(s string) (Limit, error) {
	fail := func(format string, args ...any) (Limit, error) {
		return Limit{}, &limitError{s, fmt.Sprintf(format, args...)}
	}
	name, params, hasParams := strings.Cut(s, ":")
	l := Limit{Algorithm: algorithmNamed(name)}
	if l.Algorithm == 0 {
		return fail("unknown algorithm %q", name)
	}
	info := &algorithms[l.Algorithm]
	var seen [3]bool
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
		i := paramIndex(info, key)
		if i < 0 {
			return fail("unknown parameter %q for %s (want %s)", key, info.name, paramList(info))
		}
		if seen[i] {
			return fail("duplicate parameter %q", key)
		}
		seen[i] = true
		v, err := parseValue(value, info.duration[i])
		if err != "" {
			return fail("%s: %s", key, err)
		}
		l.P[i] = v
	}
	for i, name := range info.params {
		if name != "" && !seen[i] {
			if l.Algorithm == TokenBucket && i == 2 {
				l.P[2] = l.P[0] // refill_amount defaults to max
				continue
			}
			return fail("missing parameter %q", name)
		}
	}
	return l, nil
}

// paramIndex returns the index of the parameter named key, or -1.
func paramIndex(info *algorithmInfo, key string) int {
	for i, name := range info.params {
		if name != "" && name == key {
			return i
		}
	}
	return -1
}

// paramList returns the algorithm's parameter names for a message.
func paramList(info *algorithmInfo) string {
	var names []string
	for _, name := range info.params {
		if name != "" {
			names = append(names, name)
		}
	}
	return strings.Join(names, ", ")
}

// parseValue parses a parameter value, a duration or an integer, and
// returns what is wrong with it, "" if nothing is.
func parseValue(s string, duration bool) (int64, string) {
	var v int64
	switch {
	case isInteger(s):
		var err error
		if v, err = strconv.ParseInt(s, 10, 64); err != nil {
			return 0, "integer out of range " + strconv.Quote(s)
		}
	case duration:
		d, err := time.ParseDuration(s)
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
	return v, ""
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

// appendLimit appends l's wire form.
func appendLimit(dst []byte, l *Limit) []byte {
	dst = append(dst, byte(l.Algorithm))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(l.P[0]))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(l.P[1]))
	return binary.LittleEndian.AppendUint64(dst, uint64(l.P[2]))
}

// decodeLimit decodes the limit at the start of b, which holds at least
// limitLen bytes, into l. It returns an error wrapping ErrInvalidLimit for
// an algorithm outside 1..5.
func decodeLimit(b []byte, l *Limit) error {
	_ = b[limitLen-1] // bounds check hint to compiler; see golang.org/issue/14808
	l.Algorithm = Algorithm(b[0])
	l.P[0] = int64(binary.LittleEndian.Uint64(b[1:]))
	l.P[1] = int64(binary.LittleEndian.Uint64(b[9:]))
	l.P[2] = int64(binary.LittleEndian.Uint64(b[17:]))
	if !l.Algorithm.Valid() {
		return errorf(ErrInvalidLimit, "unknown algorithm %d", b[0])
	}
	return nil
}
