//go:build race

package engine

// raceEnabled: the race detector makes sync.Pool drop what is put back at
// random, so a pooled scratch is allocated again now and then.
const raceEnabled = true
