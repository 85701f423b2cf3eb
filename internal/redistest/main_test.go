package redistest

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	QuietClientLogs()
	os.Exit(m.Run())
}
