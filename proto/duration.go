package proto

import (
	"errors"
	"time"
)

// Day is the unit d of ParseDuration: 24 hours, whatever the calendar says
// (a duration, not a date: no time zone or daylight saving time changes it).
const Day = 24 * time.Hour

// durationUnits are the units of ParseDuration: time.ParseDuration's, and d.
var durationUnits = map[string]int64{
	"ns": int64(time.Nanosecond),
	"us": int64(time.Microsecond),
	"µs": int64(time.Microsecond), // U+00B5 micro sign
	"μs": int64(time.Microsecond), // U+03BC Greek small letter mu
	"ms": int64(time.Millisecond),
	"s":  int64(time.Second),
	"m":  int64(time.Minute),
	"h":  int64(time.Hour),
	"d":  int64(Day),
}

// errDuration is ParseDuration's error; the callers name the value.
var errDuration = errors.New("invalid duration")

// ParseDuration parses a duration as people write them in limit specs,
// flags and config files: time.ParseDuration's syntax (a signed sequence of
// decimal numbers, each with an optional fraction and a unit, "1h30m",
// "1.5s", "250ms") with one more unit, d for 24 hours ("1d", "7d",
// "1d12h", "0.5d"). A fraction is computed as time.ParseDuration computes
// it, so the result is the same to the nanosecond wherever both accept a
// string. The Python client's parse_duration is the same function.
func ParseDuration(s string) (time.Duration, error) {
	neg := false
	if s != "" && (s[0] == '-' || s[0] == '+') {
		neg = s[0] == '-'
		s = s[1:]
	}
	if s == "0" {
		return 0, nil
	}
	if s == "" {
		return 0, errDuration
	}
	fail := func() (time.Duration, error) { return 0, errDuration }
	var d uint64
	for s != "" {
		if s[0] != '.' && !isDigit(s[0]) {
			return fail()
		}
		// The whole part: [0-9]*
		i, v := 0, uint64(0)
		for ; i < len(s) && isDigit(s[i]); i++ {
			if v > 1<<63/10 {
				return fail()
			}
			v = v*10 + uint64(s[i]-'0')
			if v > 1<<63 {
				return fail()
			}
		}
		pre := i > 0
		s = s[i:]
		// The fraction: (\.[0-9]*)?, its digits past int64 dropped.
		post, f, scale := false, uint64(0), 1.0
		if s != "" && s[0] == '.' {
			s = s[1:]
			i, overflow := 0, false
			for ; i < len(s) && isDigit(s[i]); i++ {
				if overflow || f > (1<<63-1)/10 {
					overflow = true
					continue
				}
				y := f*10 + uint64(s[i]-'0')
				if y > 1<<63 {
					overflow = true
					continue
				}
				f, scale = y, scale*10
			}
			post = i > 0
			s = s[i:]
		}
		if !pre && !post {
			return fail()
		}
		// The unit: everything up to the next number.
		i = 0
		for i < len(s) && s[i] != '.' && !isDigit(s[i]) {
			i++
		}
		unit, ok := durationUnits[s[:i]]
		if !ok {
			return fail()
		}
		s = s[i:]
		if v > 1<<63/uint64(unit) {
			return fail()
		}
		v *= uint64(unit)
		if f > 0 {
			v += uint64(float64(f) * (float64(unit) / scale))
			if v > 1<<63 {
				return fail()
			}
		}
		d += v
		if d > 1<<63 {
			return fail()
		}
	}
	if neg {
		return -time.Duration(d), nil
	}
	if d > 1<<63-1 {
		return fail()
	}
	return time.Duration(d), nil
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// Duration is a time.Duration that reads text with ParseDuration and writes
// it as time.Duration.String does: the value of a command-line flag that
// accepts days (flag.TextVar((*proto.Duration)(&d), ...)).
type Duration time.Duration

// UnmarshalText parses b with ParseDuration.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := ParseDuration(string(b))
	if err != nil {
		return errors.New("want a duration such as 500ms, 30s, 5m, 2h or 1d")
	}
	*d = Duration(v)
	return nil
}

// MarshalText returns time.Duration.String's form.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }
