package errtext

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"testing"
)

func TestString(t *testing.T) {
	locked := errors.New("shm: state file is in use by another process")
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("shm: open var/sluice.state: %w", locked), "open var/sluice.state: state file is in use by another process"},
		{fmt.Errorf("%w: var/sluice.sock", errors.New("server: another sluiced is serving this socket")), "another sluiced is serving this socket: var/sluice.sock"},
		{errors.New("invalid limit: proto: limit \"x\": proto: shm: nested"), "invalid limit: limit \"x\": nested"},
		{errors.New("sluice: config: x"), "sluice: config: x"},
		{errors.New("Redis is unavailable: redis: connection pool timeout"), "Redis is unavailable: connection pool timeout"},
		{errors.New("a key with shm: inside"), "a key with shm: inside"},
		{nil, ""},
	} {
		if got := String(c.err); got != c.want {
			t.Errorf("String(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

func TestFlag(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Duration("sync-interval", 0, "")
	fs.Bool("once", false, "")
	fs.Func("log-level", "", func(string) error { return errors.New("want debug, info, warn or error") })
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--sync-interval", "soon"}, `--sync-interval "soon": parse error`},
		{[]string{"--once=maybe"}, `--once "maybe": parse error`},
		{[]string{"--log-level", "verbose"}, `--log-level "verbose": want debug, info, warn or error`},
		{[]string{"--bogus"}, "unknown flag --bogus"},
		{[]string{"-sync-interval"}, "--sync-interval needs a value"},
	} {
		if got := Flag(fs.Parse(c.args)); got != c.want {
			t.Errorf("%v: %q, want %q", c.args, got, c.want)
		}
	}
}
