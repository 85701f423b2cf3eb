package main

import (
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/internal/config"
)

// Exit status of "config check": the file is invalid.
const exitInvalid = 1

// runConfig runs "config check PATH": validate a config file offline, as
// sluiced would load it, and list its limits; and "config import FILE".
func runConfig(x *cli, args []string) int {
	fs := x.flags("config")
	quiet := fs.Bool("quiet", false, "print nothing when the file is valid")
	pos, code, ok := x.parse("config", fs, args, 2, 2)
	if !ok {
		return code
	}
	switch pos[0] {
	case "import":
		return importRLS(x, pos[1])
	case "check":
	default:
		return x.fail("config: unknown subcommand %q (want check or import)", pos[0])
	}
	s, err := config.Load(pos[1])
	if err != nil {
		fmt.Fprintln(x.stderr, "sluice: config check: "+err.Error())
		return exitInvalid
	}
	if *quiet {
		return exitOK
	}
	noun := "limits"
	if s.Len() == 1 {
		noun = "limit"
	}
	fmt.Fprintf(x.stdout, "%s: %d %s, valid\n", pos[1], s.Len(), noun)
	for _, name := range s.Names() {
		l, _ := s.Lookup(name)
		opts := ""
		if l.Shadow {
			opts += " shadow"
		}
		if l.Scope == config.Global {
			opts += " global"
		}
		spec := l.Wire.String()
		for _, p := range l.More {
			spec += " + " + p.Wire.String() // a list, decided all or nothing
		}
		fmt.Fprintf(x.stdout, "  %s %s%s\n", name, spec, opts)
	}
	for _, r := range s.Routes() {
		fmt.Fprintf(x.stdout, "  resp %q %s\n", r.Match, r.Limit.Scope)
	}
	if ds := s.RLS().Domains(); len(ds) > 0 {
		fmt.Fprintf(x.stdout, "  rate limit service domains: %s\n", strings.Join(ds, ", "))
	}
	return exitOK
}
