package throttledlimiter_test

import (
	"testing"

	"github.com/sluicehq/sluice/clients/go/internal/sluicedtest"
)

const module = "github.com/sluicehq/sluice/clients/go/throttledlimiter"

// The README's examples run as the README says to use them: the rate
// limiter, and throttled's own over the store.
func TestReadme(t *testing.T) {
	sluicedtest.ReadmeBlock(t, module, "throttledlimiter.New(")
}

func TestReadme_store(t *testing.T) {
	sluicedtest.ReadmeBlock(t, module, "throttledlimiter.NewStore(")
}
