// Package cputime measures the CPU time a benchmark's loop uses, beside the
// wall clock's ns/op: on a host shared with other work the wall clock also
// counts the time a benchmark waits for a processor, which varies from run
// to run by more than the differences measured. It is for benchmarks only.
package cputime

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// Clock is the calling thread's CPU clock from a start: the goroutine keeps
// its thread from Start until Report.
type Clock struct{ start int64 }

// Start locks the goroutine to its thread and reads the thread's CPU clock.
func Start() Clock {
	runtime.LockOSThread()
	return Clock{thread()}
}

// Report reports the CPU time per iteration since Start as cpu-ns/op and
// unlocks the goroutine from its thread.
func (c Clock) Report(b *testing.B) {
	b.ReportMetric(float64(thread()-c.start)/float64(b.N), "cpu-ns/op")
	runtime.UnlockOSThread()
}

// thread is the CPU time of the calling thread, in ns (0 where the system
// has no such clock).
func thread() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return ts.Nano()
}
