package sluicedtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

// ReadmeSection is the README's section of the middleware stores.
const ReadmeSection = "## Go middleware stores"

// readmeDrive is what the example's program does after the example: it
// sends 6 requests from one client to /api/ through http.DefaultServeMux,
// where the example registered its handler, and prints each one's status
// and X-RateLimit-Remaining.
const readmeDrive = `
	for i := 0; i < 6; i++ {
		rec := httptest.NewRecorder()
		http.DefaultServeMux.ServeHTTP(rec, httptest.NewRequest("GET", "/api/", nil))
		fmt.Println(rec.Code, rec.Header().Get("X-RateLimit-Remaining"))
	}
`

// readmeWant is the output of an example that limits a client to 5
// requests at once, as every example does.
const readmeWant = "200 4\n200 3\n200 2\n200 1\n200 0\n429 0\n"

// Readme builds the Go block of the README's ReadmeSection that imports
// module (a store's module, "github.com/sluicehq/sluice/clients/go/NAME"),
// as the program of a module of its own that uses this checkout through
// replace directives, as the README says to, and runs it in a directory
// whose var/sluice.sock a sidecar listens at. The block's statements run
// in main, where ctx and apiHandler (which answers 200) are in scope and a
// "{ ... }" is "{ panic(err) }"; after them the program sends 6 requests
// to /api/ and prints each status and X-RateLimit-Remaining, which must
// show a limit of 5 requests.
func Readme(t *testing.T, module string) {
	t.Helper()
	ReadmeBlock(t, module, "")
}

// ReadmeBlock is Readme for the one Go block of the section that imports
// module and holds marker, for a module that has several examples.
func ReadmeBlock(t *testing.T, module, marker string) {
	t.Helper()
	root, err := filepath.Abs(Root())
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	i := strings.Index(text, "\n"+ReadmeSection+"\n")
	if i < 0 {
		t.Fatalf("README has no section %q", ReadmeSection)
	}
	text = text[i+1:]
	if j := strings.Index(text[len(ReadmeSection):], "\n## "); j >= 0 {
		text = text[:len(ReadmeSection)+j]
	}
	var blocks []string
	for _, m := range regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(text, -1) {
		if strings.Contains(m[1], `"`+module+`"`) && strings.Contains(m[1], marker) {
			blocks = append(blocks, m[1])
		}
	}
	if len(blocks) != 1 {
		t.Fatalf("the README's section %q has %d go blocks importing %s and holding %q, want 1", ReadmeSection, len(blocks), module, marker)
	}
	block := blocks[0]
	imports := map[string]bool{`"context"`: true, `"fmt"`: true, `"net/http"`: true, `"net/http/httptest"`: true}
	var body []string
	inImport := false
	for _, line := range strings.Split(block, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case inImport && trimmed == ")":
			inImport = false
		case inImport:
			if trimmed != "" {
				imports[trimmed] = true
			}
		case trimmed == "import (":
			inImport = true
		case strings.HasPrefix(trimmed, "import "):
			imports[strings.TrimPrefix(trimmed, "import ")] = true
		default:
			body = append(body, strings.ReplaceAll(line, "{ ... }", "{ panic(err) }"))
		}
	}
	var importLines []string
	for imp := range imports {
		importLines = append(importLines, "\t"+imp)
	}
	sort.Strings(importLines)
	program := "package main\n\nimport (\n" + strings.Join(importLines, "\n") + "\n)\n\n" +
		"func main() {\n\tctx, apiHandler := context.Background(), http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})\n\t_ = ctx\n" +
		strings.Join(body, "\n") + readmeDrive + "}\n"

	dir := ShortDir(t)
	gomod := "module example.com/readme\n\ngo 1.26.0\n\nrequire (\n\tgithub.com/sluicehq/sluice v0.0.0\n\t" + module + " v0.0.0\n)\n\n" +
		"replace github.com/sluicehq/sluice => " + root + "\n\n" +
		"replace " + module + " => " + filepath.Join(root, strings.TrimPrefix(module, "github.com/sluicehq/sluice/")) + "\n"
	for name, content := range map[string]string{"go.mod": gomod, "main.go": program} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"vet", "."}, {"build", "-o", "example", "."}} {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		// Offline: what the module needs is in the module cache already.
		// -mod=mod requires the libraries the example imports, at the
		// versions the store requires (go mod tidy would also want the
		// modules of the libraries' own tests).
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOPROXY=off", "GOSUMDB=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s\nthe program:\n%s", strings.Join(args, " "), err, out, program)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "var"), 0o755); err != nil {
		t.Fatal(err)
	}
	StartAt(t, filepath.Join(dir, "var", "sluice.sock"))
	AwayFromMinuteEnd(20 * time.Second) // the examples' windows are minutes
	cmd := exec.Command(filepath.Join(dir, "example"))
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the example: %v\n%s\nthe program:\n%s", err, out, program)
	}
	if string(out) != readmeWant {
		t.Fatalf("the example printed\n%s\nwant\n%s\nthe program:\n%s", out, readmeWant, program)
	}
}
