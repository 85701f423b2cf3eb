//go:build !race

package global

import "testing"

func skipUnderRace(*testing.T) {}
