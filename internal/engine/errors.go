package engine

import "errors"

var (
	// ErrNegativeCost is returned for a cost or refund amount below zero.
	ErrNegativeCost = errors.New("engine: negative cost")
	// ErrTooManyItems is returned by Multi for more than MaxMultiItems items.
	ErrTooManyItems = errors.New("engine: too many items in multi")
	// ErrTime is returned for a request time outside [0, bucket.MaxTime]
	// (1970 to 2190), where decisions are not exact.
	ErrTime = errors.New("engine: request time out of range (1970 to 2190)")
	// ErrContended is returned by Multi when its slots kept being reclaimed
	// by other buckets between finding and locking them.
	ErrContended = errors.New("engine: multi could not lock its slots")
)

// ErrInvalidLimit is returned for a Limit not built by NewLimit.
var ErrInvalidLimit = errors.New("engine: invalid limit (build it with NewLimit)")
