//go:build race

package global

import "testing"

// skipUnderRace skips a test that checks what Redis computes, not what Go
// goroutines share, under the race detector, which makes it several times
// slower for nothing: make test runs it again without the detector.
func skipUnderRace(t *testing.T) {
	t.Helper()
	t.Skip("run by make test without the race detector (its Redis calls are serial)")
}
