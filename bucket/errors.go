package bucket

import (
	"errors"
	"fmt"
)

// Sentinel errors. Validate and ParseAlgorithm wrap them with %w and add the
// algorithm, the parameter (by its name in limit specs: max, refill_time,
// ...) and the offending value, so callers match with errors.Is and show
// err.Error() to people.
var (
	// ErrUnknownAlgorithm: the algorithm is Invalid, out of range, or a name
	// ParseAlgorithm does not know.
	ErrUnknownAlgorithm = errors.New("unknown algorithm")

	// ErrOutOfRange: a parameter is negative, below its minimum or above its
	// cap (for example Max < 1, RefillTime < 1 ms, or a sliding_log Max above
	// MaxLogLimit).
	ErrOutOfRange = errors.New("parameter out of range")

	// ErrZeroRate: the limit would never refill (RefillAmount, Count or
	// Period is 0), or the gcra emission interval Period/Count truncates to
	// 0 ns (Count > Period), as redis-cell's "Zero rates are not supported".
	ErrZeroRate = errors.New("zero rates are not supported")

	// ErrUnusedParameter: a parameter the algorithm does not use is not 0.
	ErrUnusedParameter = errors.New("a parameter the algorithm does not use must be 0")

	// ErrOverflow: a quantity derived from the parameters is longer than
	// MaxDuration (gcra: (Burst+1) * Period/Count; pacer: MaxDelay plus one
	// interval; window_counters: Window plus one sub-window), so a decision
	// could overflow at an accepted time.
	ErrOverflow = errors.New("parameters out of the supported range")
)

// Validate's checks. They build an error (and allocate) only when a Limit is
// invalid.

// atLeast checks v >= lo: ErrOutOfRange naming the field otherwise.
func (l *Limit) atLeast(name string, v, lo int64, unit string) error {
	if v < lo {
		return fmt.Errorf("%w: %v %s = %d, want >= %d%s", ErrOutOfRange, l.Algorithm, name, v, lo, unit)
	}
	return nil
}

// atMost checks v <= hi: ErrOutOfRange naming the field otherwise.
func (l *Limit) atMost(name string, v, hi int64) error {
	if v > hi {
		return fmt.Errorf("%w: %v %s = %d ns, want <= %d ns (%d s)", ErrOutOfRange, l.Algorithm, name, v, hi, hi/1e9)
	}
	return nil
}

// atMostCap checks a count against one of the package's caps: ErrOutOfRange
// naming the field and saying what the cap is, in words, otherwise.
func (l *Limit) atMostCap(name string, v, hi int64, what string) error {
	if v > hi {
		return fmt.Errorf("%w: %v %s = %d, want <= %d (%s)", ErrOutOfRange, l.Algorithm, name, v, hi, what)
	}
	return nil
}

// duration checks a duration parameter: at least lo, at most MaxDuration.
func (l *Limit) duration(name string, v, lo int64, unit string) error {
	return firstErr(l.atLeast(name, v, lo, unit), l.atMost(name, v, MaxDuration))
}

// rate checks a parameter that sets a rate: 0 is ErrZeroRate, negative is
// ErrOutOfRange.
func (l *Limit) rate(name string, v int64) error {
	if v == 0 {
		return fmt.Errorf("%w: %v %s = 0", ErrZeroRate, l.Algorithm, name)
	}
	return l.atLeast(name, v, 1, "")
}

// firstErr returns the first non-nil error, in argument order.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
