package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// The README's CLI command lines run against a sidecar: each exits 0
// (allowed, or done) or 1 (denied), never 2, and where the README shows
// a command's output on the next line ("# allowed remaining=9 ..."), the
// command prints it. Lines with placeholders (KEY, LIMIT, AMOUNT) are
// synopses, not commands, and are left out.
func TestDocs_readmeCommands(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	sock := startSidecar(t, 128)
	env := sidecarEnv(sock)
	lines := strings.Split(string(readme), "\n")
	ran := 0
	for i, line := range lines {
		if !strings.HasPrefix(line, "bin/sluice ") {
			continue
		}
		code, _, _ := strings.Cut(line, "#")
		for _, cmd := range strings.Split(code, ";") {
			args := strings.Fields(strings.TrimPrefix(strings.TrimSpace(cmd), "bin/sluice"))
			if len(args) == 0 || strings.ContainsAny(strings.Join(args, " "), "ABCDEFGHIJKLMNOPQRSTUVWXYZ") {
				continue // a synopsis: KEY LIMIT AMOUNT
			}
			var stdout, stderr bytes.Buffer
			status := run(args, env, &stdout, &stderr)
			ran++
			if status != exitOK && status != exitDenied {
				t.Errorf("README line %d: sluice %s: exit %d, %s", i+1, strings.Join(args, " "), status, stderr.String())
				continue
			}
			// The output the README shows, if the next line shows it.
			if next := ""; i+1 < len(lines) {
				next = lines[i+1]
				if !strings.HasPrefix(next, "# allowed") && !strings.HasPrefix(next, "# denied") {
					continue
				}
				want, _, _ := strings.Cut(strings.TrimPrefix(next, "# "), "  ")
				if got := strings.TrimSpace(stdout.String()); got != want {
					t.Errorf("README line %d: sluice %s printed %q, the README shows %q", i+1, strings.Join(args, " "), got, want)
				}
			}
		}
	}
	if ran < 5 {
		t.Errorf("ran %d README commands; the README has more", ran)
	}
}

// Ensure the README says the CLI's --timeout as the code sets it.
func TestDocs_readmeTimeout(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if want := "`--timeout D` (default " + defaultTimeout.String() + ", or `$SLUICE_TIMEOUT`)"; !bytes.Contains(readme, []byte(want)) {
		t.Errorf("the README does not say %q", want)
	}
}
