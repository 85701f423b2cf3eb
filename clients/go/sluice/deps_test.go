package sluice_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The client links the standard library and the wire codec only (with the
// facts it shares, vocab, which links the standard library only): a
// service that imports it pulls in no mmap code and no third-party module.
func TestImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}",
		"github.com/sluicehq/sluice/clients/go/sluice").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	allowed := map[string]bool{
		"github.com/sluicehq/sluice/clients/go/sluice":                     true,
		"github.com/sluicehq/sluice/clients/go/sluice/internal/clientwire": true,
		"github.com/sluicehq/sluice/proto":                                 true,
		"github.com/sluicehq/sluice/vocab":                                 true,
	}
	for _, p := range strings.Fields(string(out)) {
		if !allowed[p] {
			t.Errorf("the client imports %s; it may import only the standard library, proto, vocab and its own internal package", p)
		}
	}
}
