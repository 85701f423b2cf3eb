package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clients/go/sluice"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/internal/sidecartest"
)

// t0 is the sidecar's clock in these tests, Unix ns: 2023-11-14T22:13:20Z.
const t0 = 1_700_000_000 * int64(time.Second)

const tb10 = "token_bucket:max=10,refill_time=1h,refill_amount=1"

// startSidecar runs a sidecar, its clock stopped at t0, until the test
// ends, and returns its socket.
func startSidecar(t *testing.T, slotSize int) string {
	t.Helper()
	return startSidecarWith(t, slotSize, nil)
}

// startSidecarWith is startSidecar with the named limits of a config file
// (nil for none), and its configuration changed by edit.
func startSidecarWith(t *testing.T, slotSize int, limits *config.Holder, edit ...func(*server.Config)) string {
	t.Helper()
	dir := sidecartest.ShortDir(t)
	cfg := server.Config{
		StatePath: filepath.Join(dir, "state"), SocketPath: filepath.Join(dir, "sock"), RESPSocket: "-",
		Slots: 1024, SlotSize: slotSize,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now:    func() int64 { return t0 },
		Limits: limits,
	}
	for _, e := range edit {
		e(&cfg)
	}
	srv, err := sidecartest.Start(func(ctx context.Context, ready func()) error {
		cfg.Ready = ready
		return server.Run(ctx, cfg)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Errorf("sidecar: %v", err)
		}
	})
	return cfg.SocketPath
}

// step is one command line and what it must print and return.
type step struct {
	args   string // split on spaces
	code   int
	stdout string // exact, unless it ends with "..." (then a prefix); ID stands for any lease id but 0
	stderr string // a prefix; "" means nothing
}

// sidecarEnv is the environment of a command run against the sidecar at
// sock: $SLUICE_SOCKET, and a $SLUICE_TIMEOUT no busy machine reaches (the
// tests that do not test the timeout must not meet it).
func sidecarEnv(sock string) func(string) string {
	return func(k string) string {
		switch k {
		case "SLUICE_SOCKET":
			return sock
		case "SLUICE_TIMEOUT":
			return "1m"
		}
		return ""
	}
}

// leaseID matches a lease id in sluice's output: random, so steps say ID.
var leaseID = regexp.MustCompile(`(lease=|"lease":)[1-9][0-9]*`)

// runSteps runs the steps against socket in order.
func runSteps(t *testing.T, socket string, steps []step) {
	t.Helper()
	for _, s := range steps {
		var stdout, stderr bytes.Buffer
		args := strings.Fields(s.args)
		code := run(args, sidecarEnv(socket), &stdout, &stderr)
		out := stdout.String()
		if strings.Contains(s.stdout, "ID") {
			out = leaseID.ReplaceAllString(out, "${1}ID")
		}
		outOK := out == s.stdout
		if p, ok := strings.CutSuffix(s.stdout, "..."); ok {
			outOK = strings.HasPrefix(out, p)
		}
		errOK := (s.stderr == "" && stderr.Len() == 0) ||
			(s.stderr != "" && strings.HasPrefix(stderr.String(), s.stderr) && strings.Count(stderr.String(), "\n") == 1)
		if code != s.code || !outOK || !errOK {
			t.Errorf("sluice %s\n got %d, stdout %q, stderr %q\nwant %d, stdout %q, stderr %q", s.args,
				code, out, stderr.String(), s.code, s.stdout, s.stderr)
		}
	}
}

// quotaSpec is a monthly quota anchored on the 31st in Paris.
const quotaSpec = "quota:limit=1,period=month,tz=Europe/Paris,anchor=31"

// parisAt is a local hour in Paris as --at takes it, Unix ns.
func parisAt(y int, m time.Month, d, h int) string {
	loc, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		panic(err)
	}
	return strconv.FormatInt(time.Date(y, m, d, h, 0, 0, 0, loc).UnixNano(), 10)
}

func TestDecisions(t *testing.T) {
	sock := startSidecar(t, 128)
	at2h := strconv.FormatInt(t0+int64(2*time.Hour), 10)
	runSteps(t, sock, []step{
		{"acquire login:alice " + tb10, 0, "allowed remaining=9 limit=10 reset_after=1h0m0s\n", ""},
		{"acquire login:alice " + tb10 + " --cost 3", 0, "allowed remaining=6 limit=10 reset_after=4h0m0s\n", ""},
		{"acquire --json --cost 7 login:alice " + tb10, 1,
			`{"allowed":false,"remaining":6,"limit":10,"retry_after_ns":3600000000000,"reset_after_ns":14400000000000,"delay_ns":0}` + "\n", ""},
		{"acquire login:alice " + tb10 + " --cost 11", 1, "denied remaining=6 limit=10 retry_after=never reset_after=4h0m0s\n", ""},
		{"peek login:alice " + tb10, 0, "allowed remaining=6 limit=10 reset_after=4h0m0s\n", ""},
		{"peek --json login:alice " + tb10, 0,
			`{"allowed":true,"remaining":6,"limit":10,"retry_after_ns":-1,"reset_after_ns":14400000000000,"delay_ns":0}` + "\n", ""},
		{"refund login:alice " + tb10 + " 2", 0, "allowed remaining=8 limit=10 reset_after=2h0m0s\n", ""},
		{"refund login:alice " + tb10 + " 1 --json", 0,
			`{"allowed":true,"remaining":9,"limit":10,"retry_after_ns":-1,"reset_after_ns":3600000000000,"delay_ns":0}` + "\n", ""},
		{"reset login:alice " + tb10, 0, "reset: the bucket existed\n", ""},
		{"reset login:alice " + tb10, 0, "reset: no such bucket\n", ""},
		// --at: the bucket lives at the given times.
		{"acquire replay " + tb10 + " --cost 10 --at " + at2h, 0, "allowed remaining=0 limit=10 reset_after=10h0m0s\n", ""},
		{"peek replay " + tb10 + " --at " + at2h, 1, "denied remaining=0 limit=10 retry_after=1h0m0s reset_after=10h0m0s\n", ""},
		// --strict restarts the refill clock of an emptied bucket.
		{"acquire --strict s token_bucket:max=1,refill_time=1s --at " + strconv.FormatInt(t0+5e8, 10), 0,
			"allowed remaining=0 limit=1 reset_after=1s\n", ""},
		// The pacer's delay.
		{"acquire p pacer:rate=4,period=1s,max_delay=1s", 0, "allowed remaining=4 limit=5 reset_after=250ms\n", ""},
		{"acquire p pacer:rate=4,period=1s,max_delay=1s", 0, "allowed remaining=3 limit=5 reset_after=500ms delay=250ms\n", ""},
		// A shadow request, and a spec's shadow=true: a denial answered as
		// allowed, shown as shadow_denied.
		{"acquire sh " + tb10 + " --cost 10 --at " + at2h, 0, "allowed remaining=0 limit=10 reset_after=10h0m0s\n", ""},
		{"acquire sh " + tb10 + " --shadow --at " + at2h, 0, "allowed shadow_denied remaining=0 limit=10 reset_after=10h0m0s\n", ""},
		{"acquire --json sh " + tb10 + ",shadow=true --at " + at2h, 0,
			`{"allowed":true,"remaining":0,"limit":10,"retry_after_ns":-1,"reset_after_ns":36000000000000,"delay_ns":0,"shadow_denied":true}` + "\n", ""},
		{"acquire sh " + tb10 + " --at " + at2h, 1, "denied remaining=0 limit=10 retry_after=1h0m0s reset_after=10h0m0s\n", ""},
		// A monthly quota in a zone, anchored on the 31st: in February of a
		// leap year the period starts on the 29th; denied, it is retried then.
		{"acquire q " + quotaSpec + " --at " + parisAt(2024, 2, 28, 12), 0, "allowed remaining=0 limit=1 reset_after=12h0m0s\n", ""},
		{"acquire q " + quotaSpec + " --at " + parisAt(2024, 2, 28, 18), 1, "denied remaining=0 limit=1 retry_after=6h0m0s reset_after=6h0m0s\n", ""},
		{"acquire q " + quotaSpec + " --at " + parisAt(2024, 2, 29, 0), 0, "allowed remaining=0 limit=1 reset_after=744h0m0s\n", ""},
		{"acquire q quota:limit=1,period=day,tz=Mars/Olympus_Mons", 2, "", "sluice: acquire: invalid limit: unknown time zone \"Mars/Olympus_Mons\"\n"},
		// A key that looks like a flag, after --.
		{"acquire --cost 2 -- --key " + tb10, 0, "allowed remaining=8 limit=10 reset_after=2h0m0s\n", ""},
	})
}

func TestInspect(t *testing.T) {
	sock := startSidecar(t, 128)
	for _, k := range []string{"user:1", "user:2", "user:3", "ip:1"} {
		runSteps(t, sock, []step{{"acquire " + k + " " + tb10, 0, "allowed...", ""}})
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"scan", "user:"}, sidecarEnv(sock), &stdout, &stderr); code != 0 {
		t.Fatalf("scan: %d %s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	slices.Sort(lines[1:])
	want := []string{
		"ALGORITHM        FRESH AT (UTC)            KEY",
		"token_bucket     2023-11-14T23:13:20.000Z  user:1",
		"token_bucket     2023-11-14T23:13:20.000Z  user:2",
		"token_bucket     2023-11-14T23:13:20.000Z  user:3",
	}
	if !slices.Equal(lines, want) {
		t.Errorf("scan user:\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	stdout.Reset()
	run([]string{"scan"}, sidecarEnv(sock), &stdout, &stderr)
	if n := strings.Count(stdout.String(), "\n"); n != 1+4 {
		t.Errorf("scan of everything: %d lines:\n%s", n, stdout.String())
	}
	// --count is how many buckets scan prints, whatever the pages.
	for _, n := range []int{1, 2, 3, 4, 5} {
		stdout.Reset()
		run([]string{"scan", "--count", strconv.Itoa(n)}, sidecarEnv(sock), &stdout, &stderr)
		if got := strings.Count(stdout.String(), "\n"); got != 1+min(n, 4) {
			t.Errorf("scan --count %d printed %d lines:\n%s", n, got, stdout.String())
		}
	}

	stdout.Reset()
	if code := run([]string{"stats", "--json"}, sidecarEnv(sock), &stdout, &stderr); code != 0 {
		t.Fatalf("stats: %d %s", code, stderr.String())
	}
	var st map[string]uint64
	if err := json.Unmarshal(stdout.Bytes(), &st); err != nil || st["slot_count"] != 1024 || st["used_slots"] != 4 {
		t.Errorf("stats --json: %v %v", st, err)
	}
	runSteps(t, sock, []step{
		{"stats", 0, "allowed 4\n...", ""},
		{"ping", 0, "pong ...", ""},
		{"scan --count -1", 2, "", "sluice: scan: --count -1: want a number of buckets, 0 for all"},
	})
	// Without inline keys, scan is an error.
	runSteps(t, startSidecar(t, 64), []step{
		{"scan", 2, "", "sluice: scan: not supported by this sidecar: scan needs key bytes kept inline"},
	})
}

func TestSocket(t *testing.T) {
	sock := startSidecar(t, 128)
	absent := filepath.Join(filepath.Dir(sock), "absent")
	runSteps(t, absent, []step{ // $SLUICE_SOCKET names an absent socket
		{"ping", 2, "", "sluice: ping: no sidecar at " + absent + ": no such socket (start sluiced, or give its socket with --socket or $SLUICE_SOCKET)"},
		{"--socket " + sock + " ping", 0, "pong ...", ""},
		{"ping --socket " + sock, 0, "pong ...", ""},
		{"acquire k " + tb10 + " --socket " + sock, 0, "allowed...", ""},
	})
	var stdout, stderr bytes.Buffer
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if code := run([]string{"ping"}, func(string) string { return "" }, &stdout, &stderr); code != 2 ||
		!strings.Contains(stderr.String(), "no sidecar at "+filepath.Join(wd, "var", "sluice.sock")+":") {
		t.Errorf("default socket: %d %q", code, stderr.String())
	}
}

func TestUsage(t *testing.T) {
	sock := startSidecar(t, 128)
	runSteps(t, sock, []step{
		{"--help", 0, "usage: sluice [--socket PATH] [--timeout D] [--direct [--state PATH]] COMMAND [ARGS]\n...", ""},
		{"-h", 0, "usage: sluice [--socket PATH] [--timeout D] [--direct [--state PATH]] COMMAND [ARGS]\n...", ""},
		{"help", 0, "usage: sluice [--socket PATH] [--timeout D] [--direct [--state PATH]] COMMAND [ARGS]\n...", ""},
		{"help scan", 0, "usage: sluice scan [PREFIX] [--count N]\n...", ""},
		{"acquire --help", 0, "usage: sluice acquire KEY LIMIT [--cost N] [--at UNIX_NANOS] [--strict] [--shadow] [--json]\n...", ""},
		{"peek k --help", 0, "usage: sluice peek KEY LIMIT...", ""},
		{"refund -h", 0, "usage: sluice refund KEY LIMIT AMOUNT...", ""},
		{"reset --help", 0, "usage: sluice reset KEY LIMIT\n...", ""},
		{"stats --help", 0, "usage: sluice stats [--json]\n...", ""},
		{"ping --help", 0, "usage: sluice ping\n...", ""},

		{"", 2, "", "sluice: no command (see sluice --help)"},
		{"frobnicate", 2, "", `sluice: unknown command "frobnicate"`},
		{"--bogus ping", 2, "", "sluice: unknown flag --bogus (see sluice --help)"},
		{"acquire k", 2, "", "sluice: acquire: want KEY LIMIT"},
		{"acquire k " + tb10 + " extra", 2, "", "sluice: acquire: want KEY LIMIT"},
		{"acquire k " + tb10 + " --cost x", 2, "", `sluice: acquire: --cost "x": parse error`},
		{"acquire k " + tb10 + " --at noon", 2, "", `sluice: acquire: --at "noon": want Unix nanoseconds (see sluice acquire --help)`},
		{"acquire k gcra:burst=1", 2, "", `sluice: acquire: invalid limit: limit "gcra:burst=1": missing parameter "count"`},
		{"acquire k token_bucket:max=0,refill_time=1h", 2, "", "sluice: acquire: invalid limit: "},
		{"acquire k " + tb10 + " --cost -1", 2, "", "sluice: acquire: invalid cost: "},
		{"refund k " + tb10 + " lots", 2, "", `sluice: refund: AMOUNT "lots": want a whole number of tokens`},
		{"reset k", 2, "", "sluice: reset: want KEY LIMIT"},
		{"stats extra", 2, "", `sluice: stats: takes no arguments, got "extra"`},
		{"ping extra", 2, "", `sluice: ping: takes no arguments, got "extra"`},
	})
}

// --direct decides in the state file, on the same buckets as the socket.
func TestDirect(t *testing.T) {
	sock := startSidecar(t, 64)
	state := filepath.Join(filepath.Dir(sock), "state")
	at := " --at " + strconv.FormatInt(t0, 10)
	d := "--direct --state " + state + " "
	runSteps(t, sock, []step{
		{"acquire mixed " + tb10 + " --cost 4" + at, 0, "allowed remaining=6 limit=10 reset_after=4h0m0s\n", ""},
		{d + "acquire mixed " + tb10 + " --cost 4" + at, 0, "allowed remaining=2 limit=10 reset_after=8h0m0s\n", ""},
		{"peek mixed " + tb10 + at, 0, "allowed remaining=2 limit=10 reset_after=8h0m0s\n", ""},
		{"acquire --direct --state " + state + " mixed " + tb10 + " --cost 3" + at, 1,
			"denied remaining=2 limit=10 retry_after=1h0m0s reset_after=8h0m0s\n", ""},
		{d + "reset mixed " + tb10, 0, "reset: the bucket existed\n", ""},
		{"peek mixed " + tb10 + at, 0, "allowed remaining=10 limit=10 reset_after=0s\n", ""},
		{"--direct --state " + state + ".missing peek k " + tb10, 2, "", "sluice: peek: cannot decide in " + state + ".missing"},
	})
}

// Ensure a sidecar that does not answer (stopped with SIGSTOP: its socket
// still takes connections) is reported in words after --timeout, 1 s by
// default, instead of "context deadline exceeded" after 5 s.
func TestTimeout(t *testing.T) {
	dir := sidecartest.ShortDir(t)
	silent := filepath.Join(dir, "silent")
	ln, err := net.Listen("unix", silent) // never accepts: connections wait in its backlog
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	env := func(timeout string) func(string) string {
		return func(k string) string {
			switch k {
			case "SLUICE_SOCKET":
				return silent
			case "SLUICE_TIMEOUT":
				return timeout
			}
			return ""
		}
	}
	for _, c := range []struct {
		args    string
		timeout string // $SLUICE_TIMEOUT
		within  string
	}{
		{"ping", "", "1s"},
		{"--timeout 300ms ping", "", "300ms"},
		{"acquire k " + tb10 + " --timeout 300ms", "", "300ms"},
		{"stats", "250ms", "250ms"},
		{"--timeout 200ms lease k concurrency:limit=1,lease=1d --hold 1d", "1m", "200ms"},
	} {
		var stdout, stderr bytes.Buffer
		start := time.Now()
		code := run(strings.Fields(c.args), env(c.timeout), &stdout, &stderr)
		took := time.Since(start)
		want := "did not answer within " + c.within + ": it is stopped or overloaded (--timeout waits longer)"
		if code != exitError || !strings.Contains(stderr.String(), want) || strings.Contains(stderr.String(), "deadline") {
			t.Errorf("sluice %s: exit %d, stderr %q; want 2 and %q", c.args, code, stderr.String(), want)
		}
		if took > 4*time.Second { // 5 s before --timeout; the timeout itself is not measured
			t.Errorf("sluice %s took %v", c.args, took)
		}
	}
	runSteps(t, silent, []step{
		{"--timeout 0 ping", 2, "", "sluice: ping: --timeout 0s: want a duration above 0"},
		{"ping --timeout soon", 2, "", `sluice: ping: --timeout "soon": want a duration such as 500ms, 30s, 5m, 2h or 1d (see sluice ping --help)`},
	})
	var stderr bytes.Buffer
	if code := run([]string{"ping"}, env("x"), io.Discard, &stderr); code != exitError || stderr.String() != "sluice: SLUICE_TIMEOUT=\"x\": want a duration such as 500ms or 5s\n" {
		t.Errorf("SLUICE_TIMEOUT=x: exit %d, %q", code, stderr.String())
	}
}

// Ensure --direct is listed and taken only by the commands that decide in
// the state file; the others refuse it (scan and top listed it and ignored
// it).
func TestDirect_onlyWhereItDecides(t *testing.T) {
	sock := startSidecar(t, 128)
	refusal := ": --direct decides in the state file, which only acquire, peek, refund and reset do (drop --direct)"
	var steps []step
	for _, cmd := range []string{"scan", "stats", "ping", "top --once", "release k concurrency:limit=1,lease=1s 1", "inspect x", "verify x", "config check x"} {
		name, _, _ := strings.Cut(cmd, " ")
		steps = append(steps, step{"--direct " + cmd, 2, "", "sluice: " + name + refusal},
			step{cmd + " --direct", 2, "", "sluice: " + name + refusal})
	}
	runSteps(t, sock, steps)
	for _, cmd := range []string{"acquire", "peek", "refund", "reset", "scan", "top", "stats", "ping", "lease", "release", "inspect", "verify", "config"} {
		var stdout bytes.Buffer
		run([]string{cmd, "--help"}, sidecarEnv(sock), &stdout, io.Discard)
		if listed := strings.Contains(stdout.String(), "--direct"); listed != slices.Contains(directCommands, cmd) {
			t.Errorf("sluice %s --help lists --direct: %v\n%s", cmd, listed, stdout.String())
		}
	}
}

// Ensure durations are printed for people: to the millisecond, or to the
// microsecond below one (reset_after=2h56m57.189776841s was printed to the
// nanosecond).
func TestFormatDecision_rounds(t *testing.T) {
	for _, c := range []struct {
		d    sluice.Decision
		want string
	}{
		{sluice.Decision{Allowed: true, Remaining: 9, Limit: 10, ResetAfter: 2*time.Hour + 56*time.Minute + 57189776841*time.Nanosecond},
			"allowed remaining=9 limit=10 reset_after=2h56m57.19s"},
		{sluice.Decision{Remaining: 0, Limit: 10, RetryAfter: 1499999 * time.Microsecond, ResetAfter: time.Hour},
			"denied remaining=0 limit=10 retry_after=1.5s reset_after=1h0m0s"},
		{sluice.Decision{Allowed: true, Limit: 5, ResetAfter: 250400 * time.Nanosecond, Delay: 999999 * time.Nanosecond},
			"allowed remaining=0 limit=5 reset_after=250µs delay=1ms"},
		{sluice.Decision{Limit: 5, RetryAfter: -1, ResetAfter: 0}, "denied remaining=0 limit=5 retry_after=never reset_after=0s"},
	} {
		if got := formatDecision(c.d); got != c.want {
			t.Errorf("formatDecision(%+v) = %q, want %q", c.d, got, c.want)
		}
	}
}

// override set, list and unset keep run-time overrides in the overrides
// file beside the config file, checked before they are written.
func TestOverrideCommand(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(path, []byte("limits:\n  api:\n    limit: \"quota:limit=100,period=day\"\n    overrides:\n      \"tenant:beta-*\": \"quota:limit=500,period=day\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(k string) string {
		if k == "SLUICE_CONFIG" {
			return path
		}
		return ""
	}
	for _, s := range []step{
		{"override set api tenant:acme quota:limit=10000,period=day,tz=America/New_York", 0, "api tenant:acme: quota:limit=10000,period=day,tz=America/New_York\n", ""},
		{"override list", 0, "api tenant:acme quota:limit=10000,period=day,tz=America/New_York\napi tenant:beta-* quota:limit=500,period=day\n", ""},
		{"override set api tenant:x quota:limit=1,period=fortnight", 2, "", "sluice: override set: "},
		{"override set nope tenant:x quota:limit=1,period=day", 2, "", "sluice: override set: "},
		{"override unset api tenant:acme", 0, "api tenant:acme: override removed\n", ""},
		{"override unset api tenant:acme", 0, "api tenant:acme: no override in " + config.OverridesPath(path) + "\n", ""},
		{"override list api", 0, "api tenant:beta-* quota:limit=500,period=day\n", ""},
		{"override frob", 2, "", "sluice: override: unknown subcommand"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(strings.Fields(s.args), env, &stdout, &stderr)
		if code != s.code || stdout.String() != s.stdout || !strings.HasPrefix(stderr.String(), s.stderr) || (s.stderr == "") != (stderr.Len() == 0) {
			t.Errorf("sluice %s: %d %q %q, want %d %q %q", s.args, code, stdout.String(), stderr.String(), s.code, s.stdout, s.stderr)
		}
	}
}
