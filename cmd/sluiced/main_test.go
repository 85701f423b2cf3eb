package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/internal/sidecartest"
	"github.com/sluicehq/sluice/shm"
	"golang.org/x/sys/unix"
)

// runFor runs sluiced with args and env in dir for at most d, and returns
// its exit status and stderr.
func runFor(t *testing.T, d time.Duration, args []string, env map[string]string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var stderr bytes.Buffer
	code := run(ctx, args, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, io.Discard, &stderr)
	return code, stderr.String()
}

// shortDir returns a temporary directory with a path short enough for
// socket names.
var shortDir = sidecartest.ShortDir

// paths returns the flags that put every file sluiced makes under dir.
func paths(dir string) []string {
	return []string{"--state", filepath.Join(dir, "var", "state"), "--socket", filepath.Join(dir, "var", "s"),
		"--resp-socket", filepath.Join(dir, "var", "r"), "--slots", "64"}
}

// Ensure every bad flag or variable is refused before anything is created,
// with exit status 2 and one line that names the flag and what it accepts
// (--sync-interval -1s panicked after creating a 128 MB state file and
// binding both sockets; --max-conns -5 and --idle-timeout -1s were taken).
func TestRun_badFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--sync-interval", "-1s"}, nil, "--sync-interval -1s: want a duration from 1ms to 24h0m0s"},
		{[]string{"--sync-interval", "0"}, nil, "--sync-interval 0s: want a duration"},
		{[]string{"--sync-interval", "48h"}, nil, "--sync-interval 48h0m0s: want a duration from 1ms to 24h0m0s"},
		{[]string{"--max-conns", "-5"}, nil, "--max-conns -5: want a number of connections from 1 to 1000000"},
		{[]string{"--max-conns-per-uid", "-1"}, nil, "--max-conns-per-uid -1: want 0 (no cap)"},
		{[]string{"--transport", "threads"}, nil, "--transport threads: want auto, goroutines or epoll"},
		{[]string{"--loops", "-1"}, nil, "--loops -1: want 0 (half the CPUs)"},
		{[]string{"--loop-spin", "2ms"}, nil, "--loop-spin 2ms: want a duration up to 1ms"},
		{[]string{"--idle-timeout", "-1s"}, nil, "--idle-timeout -1s: want a duration"},
		{[]string{"--lock-wait", "0s"}, nil, "--lock-wait 0s: want a duration"},
		{[]string{"--slot-size", "96"}, nil, "--slot-size 96: want 64, 128 or 256"},
		{[]string{"--slots", "2000000000000"}, nil, "--slots 2000000000000: want a slot count from 1 to 1099511627776"},
		{[]string{"--socket-mode", "999"}, nil, `--socket-mode "999": want octal permissions`},
		{[]string{"--resp-addr", "0.0.0.0:9049"}, nil, "--resp-addr 0.0.0.0:9049: want a loopback host:port"},
		{[]string{"--resp-addr", "127.0.0.1:9049", "--allow-uid", "1"}, nil, "cannot be combined with --allow-uid"},
		{[]string{"--sync-interval", "soon"}, nil, `--sync-interval "soon": want a duration such as 500ms, 30s, 5m, 2h or 1d`},
		{[]string{"--no-such-flag"}, nil, "unknown flag --no-such-flag"},
		{nil, map[string]string{"SLUICE_MAX_CONNS": "many"}, `SLUICE_MAX_CONNS="many"`},
		{nil, map[string]string{"SLUICE_SYNC_INTERVAL": "-2s"}, "--sync-interval -2s"},
		{[]string{"extra"}, nil, `unexpected argument "extra"`},
	} {
		dir := t.TempDir()
		code, stderr := runFor(t, 5*time.Second, append(paths(dir), c.args...), c.env)
		if code != exitUsage || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v %v: exit %d, stderr %q; want 2 and one line with %q", c.args, c.env, code, stderr, c.want)
		}
		if _, err := os.Stat(filepath.Join(dir, "var")); err == nil {
			t.Errorf("%v %v: files were created before the flags were checked", c.args, c.env)
		}
	}
}

// Ensure an existing state file keeps its geometry: flags left unset (only
// their defaults) never disagree with it, one set to the file's value is
// fine, and one set to another value is an error that says what the file
// has (the default --slot-size 64 was refused with a file of 128-byte
// slots when only --slots was given).
func TestRun_existingGeometry(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "var", "state")
	os.MkdirAll(filepath.Dir(state), 0o750)
	tb, err := shm.Create(state, shm.Options{SlotCount: 64, SlotSize: 128}, 0)
	if err != nil {
		t.Fatal(err)
	}
	tb.Close()
	for _, c := range []struct {
		extra []string
		code  int
		want  string
	}{
		{nil, exitOK, ""},
		{[]string{"--slot-size", "128"}, exitOK, ""},
		{[]string{"--slot-size", "64"}, exitFail, "has 64 slots of 128 bytes"},
		{[]string{"--slots", "65"}, exitFail, "has 64 slots of 128 bytes"},
	} {
		code, stderr := runFor(t, 300*time.Millisecond, append(paths(dir), c.extra...), nil)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d with %q", c.extra, code, stderr, c.code, c.want)
		}
	}
}

// Ensure duration flags and variables take days ("1d" was refused).
func TestRun_days(t *testing.T) {
	dir := t.TempDir()
	code, stderr := runFor(t, 300*time.Millisecond, append(paths(dir), "--idle-timeout", "1d", "--sync-interval", "0.5d"),
		map[string]string{"SLUICE_GLOBAL_TIMEOUT": "0.0000001d"})
	if code != exitOK {
		t.Errorf("exit %d: %s", code, stderr)
	}
}

// goNames matches what a user should never read: a package prefix
// ("shm: open ...: shm: state file ...", "slog: level string") or a Go
// identifier.
var goNames = regexp.MustCompile(`\b(shm|proto|server|engine|slog|redis): |\b(Max|Min|Err|Default)[A-Z]\w*|\b[a-z]+\.[A-Z]\w+`)

// Ensure sluiced's errors are sentences that say what is wrong and with
// which file: a state file another process holds, a socket another
// sluiced serves (it did not say which), a bad log level.
func TestRun_errorTexts(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "var", "state")
	os.MkdirAll(filepath.Dir(state), 0o750)
	tb, err := shm.Create(state, shm.Options{SlotCount: 64}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	other := t.TempDir()
	sock := filepath.Join(other, "var", "s")
	os.MkdirAll(filepath.Dir(sock), 0o750)
	lock, err := os.OpenFile(sock+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{paths(dir), exitFail, "the state file " + state + " is in use by another process: another sluiced serves it (stop that one, or give this one its own --state)"},
		{paths(other), exitFail, "another sluiced is serving this socket: " + sock},
		{append(paths(other), "--log-level", "verbose"), exitUsage, `--log-level "verbose": want debug, info, warn or error`},
	} {
		code, stderr := runFor(t, time.Minute, c.args, nil)
		if code != c.code || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, c.want) || goNames.MatchString(stderr) {
			t.Errorf("%v: exit %d, stderr %q; want %d and one line with %q", c.args, code, stderr, c.code, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(other, "var", "state")); err == nil {
		t.Error("the failed start left the state file it created")
	}
}

// Ensure configFlags maps real Config fields to real flags, so that every
// ConfigError of a field sluiced sets is said in the flag's terms.
func TestConfigFlags_exist(t *testing.T) {
	code, usage := runFor(t, 5*time.Second, []string{"-h"}, nil)
	if code != exitOK {
		t.Fatalf("-h: exit %d", code)
	}
	cfg := reflect.TypeFor[server.Config]()
	for field, flag := range configFlags {
		if _, ok := cfg.FieldByName(field); !ok {
			t.Errorf("configFlags: Config has no field %s", field)
		}
		if !strings.Contains(usage, "  -"+flag+" ") && !strings.Contains(usage, "  -"+flag+"\n") {
			t.Errorf("configFlags: sluiced has no flag --%s (for %s)", flag, field)
		}
	}
}
