package proto

import (
	"errors"
	"fmt"
	"strconv"
)

// Codec errors. Decoders wrap them with %w and add what was wrong and where,
// so callers match with errors.Is and show err.Error() to people. Each but
// ErrShortHeader is also the error of a status (see Status.Err), so an error
// a server finds in a request travels to the client as a status and comes
// back as the same sentinel.
var (
	// ErrShortHeader: ParseHeader was given fewer than HeaderLen bytes.
	// StatusOf maps it to StatusMalformed.
	ErrShortHeader = errors.New("proto: short header")

	// ErrMalformed: the bytes do not follow the format: a truncated body,
	// reserved flag bits set, a count or length field out of range, a kind
	// other than request or response, bytes after the last operation.
	ErrMalformed = errors.New("proto: malformed")

	// ErrBadVersion: the frame's version byte is not Version.
	ErrBadVersion = errors.New("proto: unsupported protocol version")

	// ErrFrameTooLarge: the frame's length field is above MaxFrameLen.
	ErrFrameTooLarge = errors.New("proto: frame too large")

	// ErrBatchTooLarge: the frame's count field is above MaxBatch.
	ErrBatchTooLarge = errors.New("proto: batch too large")

	// ErrUnknownOpcode: an operation, or a result with status OK, has an
	// opcode this version does not define.
	ErrUnknownOpcode = errors.New("proto: unknown opcode")

	// ErrInvalidLimit: an algorithm the frame's version does not define
	// (1..5 in versions 1 and 2, 1..8 from version 3), or a limit spec
	// that ParseLimit rejects.
	ErrInvalidLimit = errors.New("proto: invalid limit")

	// ErrInvalidKey: a key of 0 or more than MaxKeyLen bytes, or a scan
	// prefix of more than MaxKeyLen bytes.
	ErrInvalidKey = errors.New("proto: invalid key")

	// ErrTooManyItems: a MULTI with more than MaxMulti items.
	ErrTooManyItems = errors.New("proto: too many items in multi")
)

// Status errors: Status.Err maps each status other than StatusOK to one of
// these, and StatusOf maps them back. The statuses a decoder can find are
// the codec errors above under a second name.
var (
	ErrStatusMalformed     = ErrMalformed
	ErrStatusBadVersion    = ErrBadVersion
	ErrStatusFrameTooLarge = ErrFrameTooLarge
	ErrStatusBatchTooLarge = ErrBatchTooLarge
	ErrStatusUnknownOpcode = ErrUnknownOpcode
	ErrStatusInvalidLimit  = ErrInvalidLimit
	ErrStatusInvalidKey    = ErrInvalidKey
	ErrStatusInvalidCost   = errors.New("proto: invalid cost")
	ErrStatusTableFull     = errors.New("proto: table full")
	ErrStatusTooManyItems  = ErrTooManyItems
	ErrStatusContended     = errors.New("proto: contended: could not lock the slots, retry")
	ErrStatusUnsupported   = errors.New("proto: unsupported")
	ErrStatusShuttingDown  = errors.New("proto: server shutting down")
	ErrStatusInternal      = errors.New("proto: internal server error")
	ErrStatusBusy          = errors.New("proto: server busy: connection limit reached")
	ErrStatusDenied        = errors.New("proto: peer not allowed")
)

// Status is the outcome of one operation, the second byte of every result.
// It is a closed enum: a value above StatusDenied is malformed in this
// version. The zero value is StatusOK.
type Status uint8

// The statuses. doc.go says when a server sends each.
const (
	StatusOK            Status = iota // success; the result body is the opcode's
	StatusMalformed                   // bad frame or operation bytes
	StatusBadVersion                  // the frame's version is not spoken
	StatusFrameTooLarge               // length field above MaxFrameLen
	StatusBatchTooLarge               // count field above MaxBatch
	StatusUnknownOpcode               // opcode not defined in this version
	StatusInvalidLimit                // algorithm or parameters rejected
	StatusInvalidKey                  // key empty, too long, or not usable
	StatusInvalidCost                 // negative cost or refund amount
	StatusTableFull                   // no slot for a new bucket
	StatusTooManyItems                // MULTI with more than MaxMulti items
	StatusContended                   // the slots could not be locked; retry
	StatusUnsupported                 // not possible on this server (scan without inline keys)
	StatusShuttingDown                // the server is stopping
	StatusInternal                    // a server bug or I/O failure
	StatusBusy                        // connection limit reached
	StatusDenied                      // peer not allowed

	numStatuses // one past the last Status
)

var statusNames = [numStatuses]string{
	"OK", "Malformed", "BadVersion", "FrameTooLarge", "BatchTooLarge", "UnknownOpcode",
	"InvalidLimit", "InvalidKey", "InvalidCost", "TableFull", "TooManyItems", "Contended",
	"Unsupported", "ShuttingDown", "Internal", "Busy", "Denied",
}

var statusErrs = [numStatuses]error{
	nil, ErrStatusMalformed, ErrStatusBadVersion, ErrStatusFrameTooLarge, ErrStatusBatchTooLarge,
	ErrStatusUnknownOpcode, ErrStatusInvalidLimit, ErrStatusInvalidKey, ErrStatusInvalidCost,
	ErrStatusTableFull, ErrStatusTooManyItems, ErrStatusContended, ErrStatusUnsupported,
	ErrStatusShuttingDown, ErrStatusInternal, ErrStatusBusy, ErrStatusDenied,
}

// String returns the status's name as in the constants without the prefix
// ("TableFull"), or "status(N)" for a value outside the enum.
func (s Status) String() string {
	if s < numStatuses {
		return statusNames[s]
	}
	return "status(" + strconv.Itoa(int(s)) + ")"
}

// Valid reports whether s is one of the statuses of this version.
func (s Status) Valid() bool { return s < numStatuses }

// Err returns the sentinel error of s: nil for StatusOK, ErrStatusTableFull
// for StatusTableFull, and so on; ErrMalformed for a value outside the enum.
// It allocates nothing; Result.Err adds the server's message.
func (s Status) Err() error {
	if s < numStatuses {
		return statusErrs[s]
	}
	return ErrMalformed
}

// StatusOf returns the status that reports err on the wire: StatusOK for
// nil; the status whose sentinel err wraps (errors.Is), ErrShortHeader
// counting as StatusMalformed; StatusInternal for any other error.
func StatusOf(err error) Status {
	if err == nil {
		return StatusOK
	}
	for s := StatusMalformed; s < numStatuses; s++ {
		if errors.Is(err, statusErrs[s]) {
			return s
		}
	}
	if errors.Is(err, ErrShortHeader) {
		return StatusMalformed
	}
	return StatusInternal
}

// errorf returns an error wrapping sentinel, with the formatted detail
// after it. Decoders call it only on their error paths, so the allocation
// never touches a well-formed request.
func errorf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{sentinel}, args...)...)
}

// truncated is the error of a body shorter than its layout needs.
func truncated(what string, need, have int) error {
	return errorf(ErrMalformed, "%s: truncated: need %d bytes, have %d", what, need, have)
}
