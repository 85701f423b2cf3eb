package config

import (
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrInvalid is wrapped by every error about a config file's content.
	ErrInvalid = errors.New("invalid config file")
	// ErrUnknownLimit is returned by Set.Lookup's callers for a name the
	// current config does not define.
	ErrUnknownLimit = errors.New("unknown limit name")
	// ErrTooLarge is returned for a config file larger than MaxFileSize.
	ErrTooLarge = errors.New("config file too large")
	// ErrNotRegular is returned for a path that is not a regular file (a
	// FIFO, a device, a socket, a directory): it is refused unread.
	ErrNotRegular = errors.New("not a regular file")
	// ErrReadTimeout is returned when reading the file did not finish
	// within the read timeout (DefaultReadTimeout).
	ErrReadTimeout = errors.New("no answer from the file system")
)

// Error is a problem with a config file's content: the file, the line (0
// when it has none, such as an empty file) and the field, a path such as
// "limits.login.limit". It wraps ErrInvalid, and the parser's error when
// there is one.
type Error struct {
	File  string
	Line  int
	Field string
	Msg   string
	Err   error // the underlying error, or nil
}

// Error returns "FILE:LINE: FIELD: MSG", the form compilers use.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns ErrInvalid and the underlying error, if any.
func (e *Error) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrInvalid, e.Err}
	}
	return []error{ErrInvalid}
}
