// Package vocab holds the facts every layer of Sluice shares: the
// algorithms' enum and names, the limits of a key and of a batch, the
// number of state words a slot keeps, the checksum of an extended bucket's
// block, and the decision every algorithm makes and every protocol carries.
//
// It imports only the standard library, so that proto, bucket and shm, which
// import nothing of one another, can all import it: a fact written here is
// written once. The Python client and the global limits' Lua scripts keep
// their own copies; they check them against the vectors of proto/testdata
// and internal/global/testdata, as the Go packages check theirs against
// this one.
//
// # Adding an algorithm
//
// An algorithm gets its value and name here (the next value: values are
// stored in state files and sent on the wire, so they never change), then
// its code in package bucket: see "Adding an algorithm" in bucket's
// documentation for the list of places to touch.
package vocab
