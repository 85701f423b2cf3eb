package sluice

import "github.com/sluicehq/sluice/proto"

// What packages that decide without the socket, such as package direct,
// read and write in the client's terms: a request's options as the wire
// carries them, and a decision as the client returns it.

// WireOptions returns what opts set in a request: its flags and, with
// proto.FlagAt, the request's time (Unix ns; the last At wins).
func WireOptions(opts []RequestOption) (proto.Flags, int64) { return requestFlags(opts) }

// WireDecision returns a decision as the wire carries it as the client's
// Decision: the same fields, durations in nanoseconds.
func WireDecision(w *proto.Decision) Decision { return decisionOf(w) }

// SetWireDecision is WireDecision in place: it sets the fields of *d that
// w carries and leaves the others (Degraded, ShadowDenied, Outage, ...).
func SetWireDecision(d *Decision, w *proto.Decision) { setDecision(d, w) }
