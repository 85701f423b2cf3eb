package engine

import (
	"testing"

	"github.com/sluicehq/sluice/internal/hugepagetest"
)

// reportMapped reports e's state file's resident bytes per live key
// (rss-B/key) and the MiB of it mapped with huge pages (huge-MiB).
func reportMapped(b *testing.B, e *Engine, keys int) {
	path, _ := statePaths.Load(e)
	rss, huge := hugepagetest.Usage(b, path.(string))
	b.ReportMetric(float64(rss)/float64(keys), "rss-B/key")
	b.ReportMetric(float64(huge)/(1<<20), "huge-MiB")
}
