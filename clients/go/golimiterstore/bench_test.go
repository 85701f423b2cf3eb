package golimiterstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clients/go/golimiterstore"
	"github.com/sluicehq/sluice/clients/go/internal/sluicedtest"
	"github.com/sluicehq/sluice/clients/go/sluice"
)

// Takes through the store beside the same decisions through the client
// alone, on one sidecar in the same run: the store's overhead.
func BenchmarkStore_overhead(b *testing.B) {
	l := sluice.FixedWindow(1<<40, time.Hour) // never reached
	sluicedtest.BenchOverhead(b, l, golimiterstore.DefaultPrefix+"k", func(c *sluice.Client) []sluicedtest.Decider {
		s, err := golimiterstore.New(c, &golimiterstore.Config{Limit: l})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		return []sluicedtest.Decider{{Name: "store", Decide: func() error { _, _, _, _, err := s.Take(ctx, "k"); return err }}}
	})
}
