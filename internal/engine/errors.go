package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/shm"

	"github.com/sluicehq/sluice/vocab"
)

// The errors of the engine's operations: the vocabulary the layers above map
// to statuses. Each wraps nothing of the table's, so a caller needs no other
// package to classify them.
var (
	// ErrInvalidLimit is returned for a Limit not built by NewLimit or
	// FromProto, and wrapped (with the reason) by those for bad parameters.
	ErrInvalidLimit = errors.New("invalid limit")
	// ErrEmptyKey is returned for a key of no bytes.
	ErrEmptyKey = errors.New("empty key")
	// ErrKeyTooLong is returned for a key of more than MaxKeyLen bytes.
	ErrKeyTooLong = fmt.Errorf("key longer than %d bytes", vocab.MaxKeyLen)
	// ErrNegativeCost is returned for a cost or refund amount below zero.
	ErrNegativeCost = errors.New("negative cost")
	// ErrTime is returned for a request time outside [0, bucket.MaxTime]
	// (1970 to 2190), where decisions are not exact.
	ErrTime = errors.New("request time out of range (1970 to 2190)")
	// ErrTooManyItems is returned by Multi for more than MaxMultiItems items.
	ErrTooManyItems = errors.New("too many items in multi")
	// ErrContended is returned by Multi when its slots kept being reclaimed
	// by other buckets between finding and locking them.
	ErrContended = errors.New("multi could not lock its slots")
	// ErrTableFull is returned when a new bucket finds no free or
	// reclaimable slot within the table's probe cap.
	ErrTableFull = errors.New("table full: no free slot for a new bucket")
	// ErrNoInlineKeys is returned by Scan on a table whose slots keep no
	// key bytes (64-byte slots).
	ErrNoInlineKeys = errors.New("scan needs key bytes kept inline: create the state file with --slot-size 128 or 256")
	// ErrGeometryMismatch is returned by Open when an existing state file's
	// geometry differs from the one asked for explicitly.
	ErrGeometryMismatch = errors.New("state file geometry differs from the configuration")
	// ErrNoOwner is returned by an attached engine once the owner it
	// attached to (the sidecar) no longer serves the file, and by Attach
	// when no owner serves it: attach again when the sidecar is back.
	ErrNoOwner = errors.New("the sidecar that owns the state file is not serving it")
	// ErrReadOnly is returned by the owner's operations (Sync) on an
	// engine attached to another process's table.
	ErrReadOnly = errors.New("only the state file's owner may do this")
	// ErrLocked is matched by the *LockedError of a request that gave up
	// waiting for a bucket's lock (Time.Wait): another process keeps it,
	// alive but not going on (stopped, or stuck in a debugger).
	ErrLocked = errors.New("the bucket is locked by another process")
	// ErrRemoteTime is returned for a request that brings its own time
	// (Request.OwnTime) to a Remote: a global limit is decided at Redis's
	// clock. It is an ErrInvalidLimit.
	ErrRemoteTime error = invalidLimit{errors.New("a global limit is decided at Redis's clock: a request time (AT) is refused")}
)

// LockedError is the error of a request that waited longer than its
// Time.Wait for a lock another holder keeps. The request changed nothing.
// It matches ErrLocked.
type LockedError struct {
	Pid  int           // the holder's process; 0 if unknown
	Held time.Duration // how long the request saw it hold the lock: at least this long
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("the bucket is locked by process %d, which has held it for at least %v: the process is alive but not letting go (stopped?)",
		e.Pid, e.Held.Round(time.Millisecond))
}

// Is reports whether target is ErrLocked.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// MaxKeyLen is the longest key, in bytes.
const MaxKeyLen = vocab.MaxKeyLen

// tableErr translates an error of the table into the engine's vocabulary;
// errors of opening and creating files pass through unchanged.
func tableErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, shm.ErrTableFull):
		return ErrTableFull
	case errors.Is(err, shm.ErrNotOwner):
		return ErrReadOnly
	}
	var le *shm.LockedError
	if errors.As(err, &le) {
		return &LockedError{Pid: le.Pid, Held: le.Held}
	}
	return err
}
