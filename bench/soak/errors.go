package soak

import "errors"

var (
	// ErrConfig is returned for a Config no soak can run: a bucket count
	// below 1 or repeated, a load outside (0, 1], a negative duration.
	ErrConfig = errors.New("soak: invalid configuration")
	// ErrNoRoom is returned, before any state file is created, when Dir's
	// file system has less free space than a state file plus 1 GiB.
	ErrNoRoom = errors.New("soak: not enough free space")
	// ErrFormat is returned when a /proc file does not have the expected
	// format.
	ErrFormat = errors.New("soak: unexpected /proc format")
	// ErrUnsupported is returned on systems other than Linux.
	ErrUnsupported = errors.New("soak: needs Linux (statfs, /proc)")
)
