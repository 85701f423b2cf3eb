package errtext

import (
	"regexp"
	"strings"
)

// prefixes are the package prefixes errors carry: this project's, and
// those of the libraries whose errors reach users (go-redis).
var prefixes = []string{"shm: ", "proto: ", "server: ", "redis: "}

// String returns err's text without package prefixes, at its start or after
// a ": ". It returns "" for a nil err.
func String(err error) string {
	if err == nil {
		return ""
	}
	return Clean(err.Error())
}

// Clean returns s without package prefixes, at its start or after a ": ".
func Clean(s string) string {
	for {
		before := s
		for _, p := range prefixes {
			s = strings.TrimPrefix(s, p)
			s = strings.ReplaceAll(s, ": "+p, ": ")
		}
		if s == before {
			return s
		}
	}
}

// Go's flag package says "invalid value "x" for flag -name: reason" and
// "flag provided but not defined: -name", with one dash where the
// commands' usage and docs write two.
var (
	flagValue   = regexp.MustCompile(`^invalid (?:boolean )?value (".*") for (?:flag )?-([\w-]+): (.*)$`)
	flagUnknown = regexp.MustCompile(`^flag provided but not defined: -+([\w-]+)$`)
	flagNoValue = regexp.MustCompile(`^flag needs an argument: -+([\w-]+)$`)
)

// Flag returns an error of Go's flag package as the commands say it:
// `--sync-interval "soon": want a duration ...`, "unknown flag --bogus",
// "--cost needs a value". Other errors are String's.
func Flag(err error) string {
	s := String(err)
	if m := flagValue.FindStringSubmatch(s); m != nil {
		return "--" + m[2] + " " + m[1] + ": " + m[3]
	}
	if m := flagUnknown.FindStringSubmatch(s); m != nil {
		return "unknown flag --" + m[1]
	}
	if m := flagNoValue.FindStringSubmatch(s); m != nil {
		return "--" + m[1] + " needs a value"
	}
	return s
}
