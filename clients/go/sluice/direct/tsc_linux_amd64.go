package direct

import (
	"bytes"
	"os"
)

// rdtsc reads the processor's time-stamp counter (tsc_linux_amd64.s).
func rdtsc() uint64

// tscUsable reports whether the time-stamp counter can time decisions:
// the kernel keeps its own clocks on it (it chooses the TSC only where it
// ticks at a constant rate and agrees across processors).
func tscUsable() bool {
	b, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
	return err == nil && string(bytes.TrimSpace(b)) == "tsc"
}
