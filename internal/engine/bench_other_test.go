//go:build !linux

package engine

import (
	"testing"
)

// reportMapped reports nothing where there is no /proc/self/smaps.
func reportMapped(*testing.B, *Engine, int) {}
