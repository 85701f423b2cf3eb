//go:build race

package server

// raceEnabled: the race detector slows the code several times over.
const raceEnabled = true
