// Package sluicedtest runs the real sidecar for the tests of the Go
// middleware stores (clients/go/*store, *counter, *limiter): it builds
// sluiced from this checkout once per test binary (or takes $SLUICED),
// starts it on a fresh state file and socket for a test, runs the test
// binary again as worker processes that decide through an adapter at the
// same moment, and builds and runs the README's examples.
//
// It imports the Go client, internal/sidecartest and the standard library
// only, so a store's module needs nothing more than it already requires.
package sluicedtest
