package httpratecounter_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-chi/httprate"
	"github.com/sluicehq/sluice/clients/go/httpratecounter"
	"github.com/sluicehq/sluice/clients/go/internal/sluicedtest"
	"github.com/sluicehq/sluice/clients/go/sluice"
)

// discard is a ResponseWriter that keeps nothing but its header.
type discard struct{ h http.Header }

func (d discard) Header() http.Header       { return d.h }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}

// Decisions through the counter (Get and the Increment that follows, as
// httprate calls them) and through httprate's rate limiter, beside the
// same decisions through the client alone, on one sidecar in the same
// run. The rate limiter holds its mutex across the counter's call, so in
// parallel a process decides one request at a time.
func BenchmarkCounter_overhead(b *testing.B) {
	const limit = 1 << 30 // never reached
	sluicedtest.BenchOverhead(b, sluice.SlidingWindow(limit, time.Hour), httpratecounter.DefaultPrefix+"k", func(c *sluice.Client) []sluicedtest.Decider {
		k := httpratecounter.New(c)
		k.Config(limit, time.Hour)
		rl := httprate.NewRateLimiter(limit, time.Hour, httprate.WithLimitCounter(httpratecounter.New(c)))
		r := httptest.NewRequest("GET", "/", nil)
		return []sluicedtest.Decider{
			{Name: "counter", Decide: func() error {
				now := time.Now()
				if _, _, err := k.Get("k", now, now); err != nil {
					return err
				}
				return k.Increment("k", now)
			}},
			{Name: "httprate", Decide: func() error {
				rl.OnLimit(discard{http.Header{}}, r, "k")
				return nil
			}},
		}
	})
}
