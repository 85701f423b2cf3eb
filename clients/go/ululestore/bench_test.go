package ululestore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clients/go/internal/sluicedtest"
	"github.com/sluicehq/sluice/clients/go/sluice"
	"github.com/sluicehq/sluice/clients/go/ululestore"
	"github.com/ulule/limiter/v3"
	"github.com/ulule/limiter/v3/drivers/store/tests"
)

// ulule's own benchmarks of a store, against a real sluiced.
func BenchmarkStore_ululeSuite(b *testing.B) {
	c := sluicedtest.Start(b).Dial(b)
	b.Run("sequential", func(b *testing.B) { tests.BenchmarkStoreSequentialAccess(b, ululestore.New(c)) })
	b.Run("concurrent", func(b *testing.B) { tests.BenchmarkStoreConcurrentAccess(b, ululestore.New(c)) })
}

// Decisions through the store beside the same decisions through the
// client alone, on one sidecar in the same run: the store's overhead.
func BenchmarkStore_overhead(b *testing.B) {
	rate := limiter.Rate{Limit: 1 << 40, Period: time.Hour} // never reached
	l, err := ululestore.Limit(rate)
	if err != nil {
		b.Fatal(err)
	}
	sluicedtest.BenchOverhead(b, l, ululestore.DefaultPrefix+"k", func(c *sluice.Client) []sluicedtest.Decider {
		lim, ctx := limiter.New(ululestore.New(c), rate), context.Background()
		return []sluicedtest.Decider{{Name: "store", Decide: func() error { _, err := lim.Get(ctx, "k"); return err }}}
	})
}
