package engine

import (
	"testing"

	"github.com/sluicehq/sluice/bucket"
)

func TestCombine(t *testing.T) {
	ok := func(rem, lim, reset int64) bucket.Decision {
		return bucket.Decision{Allowed: true, Remaining: rem, Limit: lim, RetryAfter: -1, ResetAfter: reset}
	}
	no := func(rem, lim, retry, reset int64) bucket.Decision {
		return bucket.Decision{Remaining: rem, Limit: lim, RetryAfter: retry, ResetAfter: reset}
	}
	for _, c := range []struct {
		name  string
		ds    []bucket.Decision
		want  bucket.Decision
		which int
	}{
		{"one", []bucket.Decision{ok(4, 5, 10)}, ok(4, 5, 10), 0},
		{"allowed: the fewest remaining", []bucket.Decision{ok(4, 5, 10), ok(900, 1000, 86400)}, ok(4, 5, 86400), 0},
		{"allowed: the second has fewer", []bucket.Decision{ok(40, 50, 10), ok(3, 1000, 86400)}, ok(3, 1000, 86400), 1},
		{"one denied", []bucket.Decision{ok(4, 5, 10), no(0, 1000, 3600, 3600)}, no(0, 1000, 3600, 3600), 1},
		{"two denied: the later retry", []bucket.Decision{no(0, 5, 2, 9), no(0, 1000, 3600, 3600)}, no(0, 5, 3600, 3600), 1},
		{"never beats a time", []bucket.Decision{no(0, 5, -1, 9), no(0, 1000, 3600, 3600)}, no(0, 5, -1, 3600), 0},
		{"denied but others remain more", []bucket.Decision{no(2, 5, 7, 9), ok(0, 1000, 50)}, no(0, 5, 7, 50), 0},
	} {
		got, which := Combine(c.ds)
		if which != c.which {
			t.Errorf("%s: reports limit %d, want %d", c.name, which, c.which)
		}
		c.want.Limit = c.ds[c.which].Limit
		if got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
