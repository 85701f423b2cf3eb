// Package clientwire hands package direct, which decides without the
// socket, what package sluice keeps out of its exported API: a request's
// options as the wire carries them, and a decision as the client returns
// it. Package sluice sets the two functions when it is initialised;
// package direct imports sluice, so it finds them set when its own
// variables are initialised, and asserts their types once there.
package clientwire

var (
	// Options is a func([]sluice.RequestOption) (proto.Flags, int64): the
	// flags the options set and, with proto.FlagAt, the request's time
	// (Unix ns; the last At wins).
	Options any
	// Decision is a func(*proto.Decision) sluice.Decision: the same
	// fields, durations in nanoseconds.
	Decision any
)
