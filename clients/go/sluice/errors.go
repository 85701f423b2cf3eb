package sluice

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

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
	ErrContended     = proto.ErrStatusContended     // the buckets could not be locked (a Multi's kept moving, or another process kept one locked): retry
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
	// default timeout, the sidecar is at its connection limit (ErrBusy)
	// or shutting down (ErrShuttingDown), or it sent bytes the client
	// cannot trust. The error wraps the cause too (errors.Is finds both).
	// Acquire, Peek, Multi and Lease return the failure policy's decision
	// instead, unless the policy is FailError or the sidecar has never
	// answered the client. A sidecar that refuses this process (ErrDenied)
	// or the version of a request (ErrBadVersion) is not unavailable: it
	// answered.
	ErrUnavailable = errors.New("the sidecar is unavailable")

	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("the client is closed")
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

// Error returns one sentence for people: what the status means, then the
// sidecar's message, e.g. "invalid limit: token_bucket: max must be >= 1".
// Programs match the status with errors.Is or errors.As, never the text.
func (e *StatusError) Error() string {
	s := statusText(e.Status)
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// statusText says what a status means, without package prefixes.
func statusText(st proto.Status) string {
	switch st {
	case proto.StatusMalformed:
		return "the sidecar could not decode the request"
	case proto.StatusBadVersion:
		return "the sidecar speaks another protocol version"
	case proto.StatusFrameTooLarge:
		return "the request is too large"
	case proto.StatusBatchTooLarge:
		return "too many operations in one request"
	case proto.StatusUnknownOpcode:
		return "the sidecar does not know this operation"
	case proto.StatusInvalidLimit:
		return "invalid limit"
	case proto.StatusInvalidKey:
		return "invalid key"
	case proto.StatusInvalidCost:
		return "invalid cost"
	case proto.StatusTableFull:
		return "the sidecar's table is full"
	case proto.StatusTooManyItems:
		return "too many items in one multi"
	case proto.StatusContended:
		return "could not lock the buckets, retry"
	case proto.StatusUnsupported:
		return "not supported by this sidecar"
	case proto.StatusShuttingDown:
		return "the sidecar is shutting down"
	case proto.StatusInternal:
		return "the sidecar failed"
	case proto.StatusBusy:
		return "the sidecar refused the connection, it is at its connection limit"
	case proto.StatusDenied:
		return "the sidecar refused the connection, this user or group is not allowed"
	}
	return "status " + strconv.Itoa(int(st))
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

// refused returns the error of a request the client refuses before sending
// it, as the sidecar would have refused it: a *StatusError of st.
func refused(op proto.Opcode, st proto.Status, format string, args ...any) error {
	return &StatusError{Op: op, Status: st, Message: fmt.Sprintf(format, args...)}
}

// unavailableError is an ErrUnavailable with its cause: errors.Is matches
// ErrUnavailable and whatever the cause matches.
type unavailableError struct {
	why   string // for people, "" to say only the cause
	cause error  // may be nil
}

// unavailable returns an error wrapping ErrUnavailable and cause (which may
// be nil), explained by why.
func unavailable(why string, cause error) error {
	return &unavailableError{why: why, cause: cause}
}

// Error returns "the sidecar is unavailable: WHY: CAUSE".
func (e *unavailableError) Error() string {
	s := ErrUnavailable.Error()
	if e.why != "" {
		s += ": " + e.why
	}
	if e.cause != nil {
		s += ": " + causeText(e.cause)
	}
	return s
}

func (e *unavailableError) Is(target error) bool { return target == ErrUnavailable }

// neverAnsweredError is the error of a call to a sidecar that has never
// answered the client: the failure policy does not decide it.
type neverAnsweredError struct{ err error }

func (e *neverAnsweredError) Error() string {
	return e.err.Error() + " (it has never answered this client, so the failure policy does not apply)"
}

func (e *neverAnsweredError) Unwrap() error { return e.err }

// refusal reports whether st, the status of a frame-level error, refuses
// the client rather than says the sidecar cannot serve it for now: Denied
// (this process is not allowed), BadVersion (the sidecar is older than the
// request), and anything else but Busy and ShuttingDown, which are
// outages.
func refusal(st proto.Status) bool {
	return st != proto.StatusBusy && st != proto.StatusShuttingDown
}

func (e *unavailableError) Unwrap() error { return e.cause }

// causeText is err for people: a system call's error without the Go
// operation around it ("dial unix /x: connect: connection refused" says
// "connection refused"), a deadline as "timed out".
func causeText(err error) string {
	var errno syscall.Errno
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded):
		return "timed out"
	case errors.As(err, &errno):
		return errno.Error()
	}
	return strings.ReplaceAll(err.Error(), "proto: ", "")
}
