package main

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/sluicehq/sluice/internal/config"
)

// runOverride runs "override set NAME KEY SPEC", "override unset NAME KEY"
// and "override list [NAME]": the overrides of the sidecar's config file
// that live in its overrides file (config.OverridesPath), which the sidecar
// reloads within a second and which outlive restarts.
func runOverride(x *cli, args []string) int {
	fs := x.flags("override")
	path := fs.String("config", x.config, "the sidecar's config `FILE` (default $SLUICE_CONFIG, else sluice.yaml)")
	pos, code, ok := x.parse("override", fs, args, 1, 4)
	if !ok {
		return code
	}
	want := map[string]int{"set": 4, "unset": 3, "list": 1}
	n, known := want[pos[0]]
	switch {
	case !known:
		return x.fail("override: unknown subcommand %q (want set, unset or list)", pos[0])
	case pos[0] == "list" && len(pos) <= 2:
	case len(pos) != n:
		return x.fail("override %s: want %d arguments, got %d", pos[0], n-1, len(pos)-1)
	}
	switch pos[0] {
	case "set", "unset":
		spec := ""
		if pos[0] == "set" {
			spec = pos[3]
		}
		existed, err := config.SetOverride(*path, pos[1], pos[2], spec)
		if err != nil {
			return x.fail("override %s: %v", pos[0], err)
		}
		switch {
		case spec != "":
			fmt.Fprintf(x.stdout, "%s %s: %s\n", pos[1], pos[2], spec)
		case existed:
			fmt.Fprintf(x.stdout, "%s %s: override removed\n", pos[1], pos[2])
		default:
			fmt.Fprintf(x.stdout, "%s %s: no override in %s\n", pos[1], pos[2], config.OverridesPath(*path))
		}
		return exitOK
	}
	s, err := config.Load(*path)
	if err != nil {
		return x.fail("override list: %v", err)
	}
	for _, name := range s.Names() {
		if len(pos) == 2 && name != pos[1] {
			continue
		}
		l, _ := s.Lookup(name)
		all := slices.Clone(l.Overrides.All())
		slices.SortFunc(all, func(a, b config.Override) int { return cmp.Compare(a.Key, b.Key) })
		for _, o := range all {
			spec := o.Limit.Wire.String()
			for _, p := range o.Limit.More {
				spec += " + " + p.Wire.String()
			}
			fmt.Fprintf(x.stdout, "%s %s %s\n", name, o.Key, spec)
		}
	}
	return exitOK
}
