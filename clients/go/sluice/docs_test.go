package sluice_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/clients/go/sluice"
)

// The documentation's limit specs: every one the READMEs, the package
// docs, the Python client's docstrings and the CLI's help show is valid
// to the parser and to the sidecar, except the few shown as errors, which
// are refused. Examples cannot drift from the syntax (a pacer written with
// count= instead of rate=, say).
func TestDocs_limitSpecs(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	files := []string{
		"README.md", "clients/python/README.md", "bench/python/README.md",
		"proto/doc.go", "clients/go/sluice/doc.go",
	}
	for _, glob := range []string{"cmd/sluice/*.go", "clients/python/src/sluice/*.py"} {
		m, err := filepath.Glob(filepath.Join(root, glob))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m {
			if !strings.HasSuffix(f, "_test.go") {
				rel, _ := filepath.Rel(root, f)
				files = append(files, rel)
			}
		}
	}
	// Shown as errors: they must be refused.
	refused := map[string]bool{
		"gcra:burst=x":                   true,
		"gcra:burst=x,count=1,period=1s": true,
	}
	spec := regexp.MustCompile(`\b(token_bucket|gcra|fixed_window|sliding_window|sliding_log|window_counters|pacer|concurrency):[a-z_]+=[^\s` + "`" + `'"|)\\]*`)
	sc := startSidecar(t)
	c := dial(t, sc.cfg.SocketPath, sluice.WithFailurePolicy(sluice.FailError))
	seen := 0
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		// A spec may be wrapped inside a code span: join the lines.
		text := regexp.MustCompile(`,\n\s*(//\s*)?`).ReplaceAllString(string(b), ",")
		for _, s := range spec.FindAllString(text, -1) {
			s = strings.TrimRight(s, ".,;:")
			if strings.ToLower(s) != s {
				continue // a template: gcra:burst=BURST,...
			}
			seen++
			l, err := sluice.ParseLimit(s)
			if err == nil {
				_, err = c.Peek(context.Background(), l, "docs") // a concurrency limit refuses acquires
			}
			switch {
			case refused[s] && err == nil:
				t.Errorf("%s: %q is shown as an error but is accepted", f, s)
			case !refused[s] && err != nil:
				t.Errorf("%s: %q: %v", f, s, err)
			}
		}
	}
	if seen < 10 {
		t.Errorf("found %d limit specs in the documentation, want at least 10", seen)
	}
}

// The README's Go example compiles against this checkout, used from
// another module through a replace directive, as the README says to.
func TestDocs_readmeGoExample(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	i := strings.Index(text, "## Go client and CLI")
	if i < 0 {
		t.Fatal("README has no section \"Go client and CLI\"")
	}
	block := regexp.MustCompile("(?s)```go\n(.*?)```").FindStringSubmatch(text[i:])
	if block == nil {
		t.Fatal("the Go client section has no go block")
	}
	var body []string
	for _, line := range strings.Split(block[1], "\n") {
		if strings.HasPrefix(line, "import ") {
			continue // the program below imports it
		}
		body = append(body, strings.ReplaceAll(line, "{ ... }", "{ panic(err) }"))
	}
	program := `package main

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/clients/go/sluice"
)

func main() {
	ctx, user, apiHandler := context.Background(), "alice", http.NotFoundHandler()
` + strings.Join(body, "\n") + "\n}\n"
	dir := t.TempDir()
	gomod := "module example.com/readme\n\ngo 1.26.0\n\nrequire github.com/sluicehq/sluice v0.0.0\n\nreplace github.com/sluicehq/sluice => " + root + "\n"
	for name, content := range map[string]string{"go.mod": gomod, "main.go": program} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"mod", "tidy"}, {"vet", "."}} {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		// Offline: what the module needs is in the module cache already.
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOPROXY=off", "GOSUMDB=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s\nthe program:\n%s", strings.Join(args, " "), err, out, program)
		}
	}
}
