package proto

import (
	"strings"
	"testing"
	"time"
)

// Ensure ParseDuration reads days, alone, with fractions and with other
// units, and refuses what is not a duration ("1d" was refused everywhere
// a duration was read).
func TestParseDuration_days(t *testing.T) {
	for _, c := range []struct {
		s    string
		want time.Duration
	}{
		{"1d", 24 * time.Hour},
		{"7d", 7 * 24 * time.Hour},
		{"1d12h", 36 * time.Hour},
		{"0.5d", 12 * time.Hour},
		{"1.25d", 30 * time.Hour},
		{"2d30m", 48*time.Hour + 30*time.Minute},
		{"-1d", -24 * time.Hour},
		{"+3d", 72 * time.Hour},
		{"106751d", 106751 * 24 * time.Hour},
		{"0", 0},
	} {
		if got, err := ParseDuration(c.s); err != nil || got != c.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", c.s, got, err, c.want)
		}
	}
	for _, s := range []string{"", "d", "1D", "1 d", "1day", "1dd", ".d", "106752d", "1d-1h", "-", "3"} {
		if got, err := ParseDuration(s); err == nil {
			t.Errorf("ParseDuration(%q) = %v, want an error", s, got)
		}
	}
}

// Ensure ParseDuration agrees with time.ParseDuration, to the nanosecond,
// wherever the string has no day in it.
func TestParseDuration_asGo(t *testing.T) {
	for _, s := range []string{
		"0", "5s", "-5s", "+5s", "5.6s", "5.s", ".5s", "1.004s", "100.00100s", "10ns", "11us", "12µs", "12μs",
		"13ms", "15m", "16h", "3h30m", "10.5s4m", "-2m3.4s", "1h2m3s4ms5us6ns", "39h9m14.425s",
		"0.3333333333333333333h", "9223372036854775807ns", "9223372036854775.807us", "-9223372036854775808ns",
		"0.830103483285477580700h", "9223372036854775808ns", "3000000h", "", ".", "-.", ".s", "s", "1x",
	} {
		checkAsGo(t, s)
	}
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"1h30m", "1.5s", "0.3333333333333333333h", "-9223372036854775.808us", "1d", "2d3h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !strings.Contains(s, "d") {
			checkAsGo(t, s)
		} else {
			ParseDuration(s) // never panics
		}
	})
}

func checkAsGo(t *testing.T, s string) {
	t.Helper()
	want, wantErr := time.ParseDuration(s)
	got, err := ParseDuration(s)
	if (err != nil) != (wantErr != nil) || got != want {
		t.Errorf("ParseDuration(%q) = %v, %v; time.ParseDuration: %v, %v", s, got, err, want, wantErr)
	}
}
