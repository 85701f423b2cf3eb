package golimiterstore_test

import (
	"testing"

	"github.com/sluicehq/sluice/clients/go/internal/sluicedtest"
)

// The README's example runs as the README says to use it.
func TestReadme(t *testing.T) {
	sluicedtest.Readme(t, "github.com/sluicehq/sluice/clients/go/golimiterstore")
}
