package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// The commands that ask about the sidecar: scan, stats, ping.

func runScan(x *cli, args []string) int {
	fs := x.flags("scan")
	count := fs.Int("count", 0, "print at most `N` buckets (0: all)")
	pos, code, ok := x.parse("scan", fs, args, 0, 1)
	if !ok {
		return code
	}
	if *count < 0 {
		return x.fail("scan: --count %d: want a number of buckets, 0 for all", *count)
	}
	prefix := ""
	if len(pos) > 0 {
		prefix = pos[0]
	}
	c, code, ok := x.dial("scan")
	if !ok {
		return code
	}
	defer c.Close()
	printed := 0
	for cursor := uint64(0); ; {
		page := scanPage
		if *count > 0 {
			page = min(page, *count-printed)
		}
		cx, cancel := x.callContext()
		es, next, err := c.Scan(cx, prefix, cursor, page)
		cancel()
		if err != nil {
			return x.failCmd("scan", err)
		}
		if cursor == 0 {
			fmt.Fprintf(x.stdout, scanLine, "ALGORITHM", "FRESH AT (UTC)", "KEY")
		}
		for _, e := range es {
			fmt.Fprintf(x.stdout, scanLine, e.Algorithm, e.FreshAt.UTC().Format(scanTime), printable(e.Key))
		}
		printed += len(es)
		if next == 0 || *count > 0 && printed >= *count {
			break
		}
		cursor = next
	}
	return exitOK
}

// scanPage is how many buckets scan asks the sidecar for at once, the
// most a SCAN returns.
const scanPage = 1000

// scanTime is the form of scan's times, UTC to the millisecond, and
// scanLine its lines: columns as wide as the longest algorithm's name and a
// time, so that they line up as they stream.
const (
	scanTime = "2006-01-02T15:04:05.000Z"
	scanLine = "%-15s  %-24s  %s\n"
)

// printable returns key as is if it is printable text without spaces, else
// quoted as a Go string.
func printable(key string) string {
	if utf8.ValidString(key) && !strings.ContainsFunc(key, func(r rune) bool { return !unicode.IsPrint(r) || r == ' ' }) {
		return key
	}
	return strconv.Quote(key)
}

func runStats(x *cli, args []string) int {
	fs := x.flags("stats")
	asJSON := fs.Bool("json", false, "print the counters as a JSON object")
	if _, code, ok := x.parse("stats", fs, args, 0, 0); !ok {
		return code
	}
	c, code, ok := x.dial("stats")
	if !ok {
		return code
	}
	defer c.Close()
	cx, cancel := x.callContext()
	defer cancel()
	st, err := c.Stats(cx)
	if err != nil {
		return x.failCmd("stats", err)
	}
	if *asJSON {
		if err := json.NewEncoder(x.stdout).Encode(st); err != nil {
			return x.failCmd("stats", err)
		}
		return exitOK
	}
	names := make([]string, 0, len(st))
	for name := range st {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		fmt.Fprintf(x.stdout, "%s %d\n", name, st[name])
	}
	return exitOK
}

func runPing(x *cli, args []string) int {
	fs := x.flags("ping")
	if _, code, ok := x.parse("ping", fs, args, 0, 0); !ok {
		return code
	}
	c, code, ok := x.dial("ping")
	if !ok {
		return code
	}
	defer c.Close()
	cx, cancel := x.callContext()
	defer cancel()
	start := time.Now()
	if err := c.Ping(cx); err != nil {
		return x.failCmd("ping", err)
	}
	fmt.Fprintf(x.stdout, "pong %v\n", time.Since(start).Round(time.Microsecond))
	return exitOK
}
