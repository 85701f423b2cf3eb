package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/internal/server"
)

// configFlags names the flag that sets each field of server.Config that
// has one: server.Config.Validate speaks of fields, sluiced of its flags.
// A new Config field with a flag is one entry here beside its flag in run.
var configFlags = map[string]string{
	"StatePath": "state", "SocketPath": "socket", "RESPSocket": "resp-socket",
	"RESPAddr": "resp-addr", "RESPAllowRemote": "resp-allow-remote",
	"RLSSocket": "rls-socket", "RLSAddr": "rls-addr", "RLSAllowRemote": "rls-allow-remote", "RLSHeaders": "rls-headers",
	"Slots": "slots", "SlotSize": "slot-size", "ArenaCells": "arena-cells", "HugePages": "huge-pages",
	"SyncInterval": "sync-interval", "SocketMode": "socket-mode",
	"MaxConns": "max-conns", "MaxConnsPerUID": "max-conns-per-uid",
	"Transport": "transport", "Loops": "loops", "LoopSpin": "loop-spin",
	"IdleTimeout": "idle-timeout", "LockWait": "lock-wait",
	"AllowUIDs": "allow-uid", "AllowGIDs": "allow-gid",
}

// hasFlag reports whether a flag sets the Config field.
func hasFlag(field string) bool { _, ok := configFlags[field]; return ok }

// flagTerms rewrites the Config fields a message names into sluiced's
// flags, longest first (MaxConnsPerUID before MaxConns).
var flagTerms = func() *strings.Replacer {
	fields := make([]string, 0, len(configFlags))
	for f := range configFlags {
		fields = append(fields, f)
	}
	slices.SortFunc(fields, func(a, b string) int { return len(b) - len(a) })
	var pairs []string
	for _, f := range fields {
		pairs = append(pairs, f, "--"+configFlags[f])
	}
	return strings.NewReplacer(pairs...)
}()

// inFlagTerms says what is wrong with a Config in sluiced's flags: the
// flag that set the invalid field, its value and what it accepts.
func inFlagTerms(err error) string {
	var ce *server.ConfigError
	if !errors.As(err, &ce) {
		return err.Error()
	}
	name, ok := configFlags[ce.Field]
	if !ok {
		return err.Error() // a field no flag sets: sluiced leaves it zero
	}
	return fmt.Sprintf("--%s %v: %s", name, ce.Value, flagTerms.Replace(ce.Want))
}
