package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/global"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/internal/version"
	"github.com/sluicehq/sluice/proto"
	"github.com/sluicehq/sluice/proto/resp"
	"github.com/sluicehq/sluice/shm"
)

// readme returns the README.
func readme(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Ensure the numbers the README gives and the code decides agree: the
// versions --version prints (it said format 4 and protocol 2 after both
// moved on), the size of the default state file (it said 128 MiB after
// the arena made it 160), and the defaults in the table of sluiced's
// flags.
func TestDocs_readmeNumbers(t *testing.T) {
	doc := readme(t)
	versions := fmt.Sprintf("(state file format %d, protocol %d, ", shm.FormatVersion, proto.Version)
	if !strings.Contains(version.String("sluiced"), versions) || !strings.Contains(doc, "sluiced v1.2.3 "+versions) {
		t.Errorf("the README's --version line does not say %q, as --version does (%s)", versions, version.String("sluiced"))
	}

	o := shm.Options{SlotCount: server.DefaultSlots}
	cells := shm.DefaultArenaCells(o.SlotCount)
	quick := fmt.Sprintf("(%s slots of 64 bytes and an arena\nof %s cells, %d MiB,",
		thousands(o.SlotCount), thousands(cells), (o.FileSize()+1<<19)>>20)
	if !strings.Contains(doc, quick) {
		t.Errorf("the quick start does not describe the default state file as %q", quick)
	}
	arena := fmt.Sprintf("(the default %s cells, %d MiB,", thousands(cells), cells*shm.CellSize>>20)
	if !strings.Contains(doc, arena) {
		t.Errorf("the --arena-cells row does not say %q", arena)
	}

	// The protocols' bounds, and the global limits' default timeout.
	for _, want := range []string{
		fmt.Sprintf("(%d MiB at most, %d operations, %d-byte keys; RESP bulk strings of %d KiB, %d arguments)",
			proto.MaxFrameLen>>20, proto.MaxBatch, proto.MaxKeyLen, resp.MaxBulkLen>>10, resp.MaxArgs),
		fmt.Sprintf("batches of up to %d operations per frame", proto.MaxBatch),
		fmt.Sprintf("`--global-timeout` (default %d ms:", global.DefaultTimeout.Milliseconds()),
	} {
		if !strings.Contains(strings.ReplaceAll(doc, "\n", " "), want) {
			t.Errorf("the README does not say %q", want)
		}
	}

	// The flags' defaults, as sluiced -h prints them.
	var help bytes.Buffer
	run(context.Background(), []string{"-h"}, func(string) (string, bool) { return "", false }, &help, &help)
	defaults := map[string]string{}
	var name string
	for _, line := range strings.Split(help.String(), "\n") {
		if m := regexp.MustCompile(`^  -([\w-]+)`).FindStringSubmatch(line); m != nil {
			name, defaults[m[1]] = m[1], ""
		} else if m := regexp.MustCompile(`\(default ([^)]*)\)`).FindStringSubmatch(line); m != nil && name != "" {
			defaults[name] = strings.Trim(m[1], `"`)
		}
	}
	rows := regexp.MustCompile("(?m)^\\| `--([\\w-]+)[^|]*\\| ([^|]*) \\|").FindAllStringSubmatch(doc, -1)
	checked := 0
	for _, r := range rows {
		flag, cell := r[1], strings.Trim(strings.Fields(r[2] + " x")[0], "`")
		def, ok := defaults[flag]
		if !ok {
			continue // another table's flag (sluice's, a global one elsewhere)
		}
		if def == "" {
			def = "0"
		}
		if !sameValue(cell, def) {
			if _, err := strconv.ParseFloat(cell, 64); err == nil || isDuration(cell) || strings.Contains(cell, "/") {
				t.Errorf("README: --%s defaults to %s; sluiced -h says %s", flag, cell, def)
			}
			continue // words ("none", "half the CPUs")
		}
		checked++
	}
	if checked < 10 {
		t.Errorf("checked %d flag defaults of the README's table, want more (the table or -h changed form)", checked)
	}
}

func isDuration(s string) bool { _, err := proto.ParseDuration(s); return err == nil && s != "0" }

// sameValue reports whether a README cell and a flag default say the same.
func sameValue(cell, def string) bool {
	if cell == def {
		return true
	}
	a, errA := proto.ParseDuration(cell)
	b, errB := time.ParseDuration(def)
	return errA == nil && errB == nil && a == b
}

// thousands formats n with comma separators.
func thousands(n uint64) string {
	s := strconv.FormatUint(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
