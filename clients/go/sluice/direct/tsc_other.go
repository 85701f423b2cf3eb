//go:build !linux || !amd64

package direct

// rdtsc is never called where the time-stamp counter is not used.
func rdtsc() uint64 { return 0 }

// tscUsable reports that this platform times decisions with the
// monotonic clock alone.
func tscUsable() bool { return false }
