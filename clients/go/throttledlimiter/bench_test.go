package throttledlimiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clients/go/internal/sluicedtest"
	"github.com/sluicehq/sluice/clients/go/sluice"
	"github.com/sluicehq/sluice/clients/go/throttledlimiter"
)

// Decisions through the rate limiter beside the same decisions through the
// client alone, on one sidecar in the same run: the rate limiter's
// overhead.
func BenchmarkRateLimiter_overhead(b *testing.B) {
	l := sluice.GCRA(1<<30, 1<<30, time.Hour) // never limited
	sluicedtest.BenchOverhead(b, l, throttledlimiter.DefaultPrefix+"k", func(c *sluice.Client) []sluicedtest.Decider {
		r, ctx := throttledlimiter.New(c, l), context.Background()
		return []sluicedtest.Decider{{Name: "ratelimiter", Decide: func() error { _, _, err := r.RateLimitCtx(ctx, "k", 1); return err }}}
	})
}
