package shm

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/vocab"
)

// Errors returned when opening a state file, in the order Open checks for
// them. None of them is ever returned after Open has written to the file.
var (
	// ErrNotRegular is returned for a path that is not a regular file
	// (a directory, a device, a socket, or a symbolic link).
	ErrNotRegular = errors.New("shm: not a regular file")
	// ErrLocked is returned when another process holds the file's owner lock.
	ErrLocked = errors.New("shm: state file is in use by another process")
	// ErrTruncated is returned for a file shorter than its header or than the
	// slots its header declares.
	ErrTruncated = errors.New("shm: state file is truncated")
	// ErrNotStateFile is returned for a file that does not start with the magic.
	ErrNotStateFile = errors.New("shm: not a Sluice state file")
	// ErrVersion is returned for a state file of a format version this build
	// does not read.
	ErrVersion = errors.New("shm: unsupported state file version")
	// ErrByteOrder is returned for a file written on a machine of the other
	// byte order, or when this machine is big-endian.
	ErrByteOrder = errors.New("shm: state file byte order does not match this machine")
	// ErrChecksum is returned when the header checksum does not match.
	ErrChecksum = errors.New("shm: state file header checksum mismatch")
	// ErrGeometry is returned for a header whose sizes are out of range or
	// disagree with the file's length.
	ErrGeometry = errors.New("shm: state file geometry is invalid")
)

// Errors returned while serving.
var (
	// ErrTableFull is returned when no free or reclaimable slot lies within
	// the probe cap of a new bucket's home slot.
	ErrTableFull = errors.New("shm: table full")
	// ErrKeyTooLong is returned for a key longer than MaxKeyLen bytes.
	ErrKeyTooLong = fmt.Errorf("shm: key longer than %d bytes", vocab.MaxKeyLen)
	// ErrEmptyKey is returned for a key of zero bytes.
	ErrEmptyKey = errors.New("shm: empty key")
	// ErrClosed is returned by operations on a closed table.
	ErrClosed = errors.New("shm: table is closed")
	// ErrArenaFull is returned when the arena has no run of free cells for
	// a block, even after freeing the blocks of fresh buckets.
	ErrArenaFull = errors.New("shm: arena full")

	// ErrNoArena is returned for a block the arena cannot hold: the table
	// has no arena, or the block is longer than MaxBlockWords.
	ErrNoArena = errors.New("shm: no arena for the block")

	// ErrOptions is returned by Create and NewHeap for invalid Options.
	ErrOptions = errors.New("shm: invalid options")
	// ErrCorrupt is returned by Verify when an invariant does not hold.
	ErrCorrupt = errors.New("shm: table is corrupt")
	// ErrHolders is returned by Open and Attach when every entry of the
	// file's holders registry is taken by a live process.
	ErrHolders = errors.New("shm: too many processes have the state file open")
	// ErrNoOwner is returned by Attach when the file's owner is not serving
	// it (not running, or still opening and recovering it).
	ErrNoOwner = errors.New("shm: the state file's owner is not running")
	// ErrNotOwner is returned by Sync on an attached table: only the owner
	// syncs the file.
	ErrNotOwner = errors.New("shm: only the owner of the state file may do this")
	// ErrUnsupported is returned on platforms without the needed syscalls.
	ErrUnsupported = errors.New("shm: not supported on this platform")
	// ErrLockWait is matched by the *LockedError of an operation whose
	// waits for locks that live holders keep outlasted its Wait's budget.
	ErrLockWait = errors.New("shm: gave up waiting for a lock that a live process keeps")
)

// LockedError is the error of a wait for a lock that outlasted its Wait's
// budget: the holder was alive all along (a stopped or stuck process). It
// matches ErrLockWait.
type LockedError struct {
	Pid  int           // the holder's process (this one's, for a lock it keeps itself); 0 if it was registering
	Held time.Duration // how long the waiter saw the holder keep the lock: at least this long
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("shm: the lock is held by process %d, which has held it for at least %v", e.Pid, e.Held.Round(time.Millisecond))
}

// Is reports whether target is ErrLockWait.
func (e *LockedError) Is(target error) bool { return target == ErrLockWait }
