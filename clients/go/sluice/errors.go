package sluice

import (
	"errors"

	"github.com/sluicehq/sluice/proto"
)

// Errors of the sidecar's statuses: an operation the sidecar answers with a
// status other than OK returns a *StatusError that errors.Is matches with
// the status's sentinel below (the same values as package proto's, so code
// that already matches proto's errors keeps working).
var (
	ErrMalformed     = proto.ErrStatusMalformed     // bytes the peer could not decode
	ErrBadVersion    = proto.ErrStatusBadVersion    // the sidecar speaks another protocol version
	ErrFrameTooLarge = proto.ErrStatusFrameTooLarge // a frame above proto.MaxFrameLen
	ErrBatchTooLarge = proto.ErrStatusBatchTooLarge // a frame of more than proto.MaxBatch operations
	ErrUnknownOpcode = proto.ErrStatusUnknownOpcode // an operation the sidecar does not know
	ErrInvalidLimit  = proto.ErrStatusInvalidLimit  // an unknown algorithm or parameters it rejects
	ErrInvalidKey    = proto.ErrStatusInvalidKey    // a key of 0 or more than proto.MaxKeyLen bytes
	ErrInvalidCost   = proto.ErrStatusInvalidCost   // a negative cost or refund amount
	ErrTableFull     = proto.ErrStatusTableFull     // no free slot for a new bucket
	ErrTooManyItems  = proto.ErrStatusTooManyItems  // a Multi of more than proto.MaxMulti items
	ErrContended     = proto.ErrStatusContended     // a Multi could not lock its slots: retry
	ErrUnsupported   = proto.ErrStatusUnsupported   // not possible on this sidecar (Scan without inline keys)
	ErrShuttingDown  = proto.ErrStatusShuttingDown  // the sidecar is stopping
	ErrInternal      = proto.ErrStatusInternal      // a sidecar bug or I/O failure
	ErrBusy          = proto.ErrStatusBusy          // the sidecar's connection limit is reached
	ErrDenied        = proto.ErrStatusDenied        // the sidecar does not allow this process's uid or gid
)

// Errors of the client itself.
var (
	// ErrUnavailable: the sidecar could not be reached, the connection
	// broke with the call in flight, no answer came within the client's
	// default timeout, or the sidecar sent bytes the client cannot trust.
	// The error wraps the cause too (errors.Is finds both). Acquire, Peek
	// and Multi return the failure policy's decision instead, unless the
	// policy is FailError.
	ErrUnavailable = errors.New("sluice: sidecar unavailable")

	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("sluice: client closed")
)

// StatusError is the error of an operation the sidecar answered with a
// status other than OK. It unwraps to the status's sentinel (ErrTableFull
// for proto.StatusTableFull, ...), so match it with errors.Is; errors.As
// gives the status and the server's message.
type StatusError struct {
	Op      proto.Opcode // the operation: proto.OpAcquire, ...; 0 for an error about the whole frame
	Status  proto.Status // never proto.StatusOK
	Message string       // the sidecar's explanation, for people
}

// Error returns "sluice: OP: SENTINEL: MESSAGE", e.g.
// "sluice: ACQUIRE: proto: invalid limit: token_bucket: max must be >= 1".
func (e *StatusError) Error() string {
	s := "sluice: "
	if e.Op != 0 {
		s += e.Op.String() + ": "
	}
	s += e.Status.Err().Error()
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Unwrap returns the status's sentinel error.
func (e *StatusError) Unwrap() error { return e.Status.Err() }

// statusError returns the error of a result with status st, or nil for
// StatusOK.
func statusError(op proto.Opcode, st proto.Status, msg []byte) error {
	if st == proto.StatusOK {
		return nil
	}
	return &StatusError{Op: op, Status: st, Message: string(msg)}
}
