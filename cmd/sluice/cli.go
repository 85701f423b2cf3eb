package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/clients/go/sluice"
	"github.com/sluicehq/sluice/clients/go/sluice/direct"
	"github.com/sluicehq/sluice/internal/errtext"
	"github.com/sluicehq/sluice/internal/version"
	"github.com/sluicehq/sluice/proto"
)

// Exit statuses.
const (
	exitOK     = 0 // allowed, or a command that decides nothing succeeded
	exitDenied = 1 // the request was denied
	exitError  = 2 // anything went wrong, usage errors included
)

// defaultSocket and defaultState are sluiced's default socket and state
// file, relative to the working directory, as for sluiced.
const (
	defaultSocket = "var/sluice.sock"
	defaultState  = "var/sluice.state"
)

// defaultTimeout is how long a command waits for the sidecar to answer
// (--timeout): a sidecar on the same host answers in microseconds, so a
// second without an answer means it is stopped or stuck.
const defaultTimeout = time.Second

// command is one of the CLI's commands.
type command struct {
	name    string
	args    string // the synopsis after the name
	summary string
	run     func(x *cli, args []string) int
}

var commands []command // set by init: the commands refer to usage, which lists them

func init() {
	commands = []command{
		{"acquire", "KEY LIMIT [--cost N] [--at UNIX_NANOS] [--strict] [--shadow] [--json]",
			"Decide a request of cost N (default 1) against KEY's bucket under LIMIT and, if allowed, consume N.", runAcquire},
		{"peek", "KEY LIMIT [--at UNIX_NANOS] [--json]",
			"Show the bucket as it stands (remaining now, and whether a cost-1 acquire would pass), changing nothing.", runPeek},
		{"refund", "KEY LIMIT AMOUNT [--json]",
			"Give AMOUNT tokens back to KEY's bucket (capped at the limit's maximum) and show its state.", runRefund},
		{"reset", "KEY LIMIT",
			"Forget KEY's bucket under LIMIT.", runReset},
		{"lease", "KEY LIMIT [--wait D] [-- COMMAND [ARGS...] | --hold D] [--json]",
			"Take a slot of KEY's bucket under LIMIT, a concurrency limit, and run COMMAND holding it until it ends; exit with its status, or 1 if every slot is held. Without a COMMAND, print the lease and hold it for --hold D, or until interrupted. The slot comes back when sluice exits, whatever ends it.", runLease},
		{"release", "KEY LIMIT ID [--json]",
			"Give back lease ID of KEY's bucket under LIMIT, taken by any process of the same user; exit 0 if it was held, 1 if not (unknown, released or expired).", runRelease},
		{"scan", "[PREFIX] [--count N]",
			"List the buckets whose key starts with PREFIX (all without one), at most N of them: algorithm, when the bucket is fresh again, key, under a header.", runScan},
		{"stats", "[--json]",
			"Show the sidecar's counters.", runStats},
		{"ping", "",
			"Check that the sidecar answers.", runPing},
		{"top", "[--interval D] [--once] [--metrics ADDR]",
			"Show the sidecar's decisions/s, outcomes, connections, table load and overrides (with --metrics, each named limit's busiest), refreshed until ctrl-c.", runTop},
		{"inspect", "STATEFILE [--json]",
			"Describe a state file offline: header, geometry, load, live buckets by algorithm, probe lengths, clean or dirty. Read-only; safe beside a running sidecar.", runInspect},
		{"verify", "STATEFILE",
			"Check every slot checksum and probe invariant of a state file offline; exit 0 if sound, 1 with a report if damaged. Read-only; safe beside a running sidecar.", runVerify},
		{"config", "check PATH [--quiet] | import FILE",
			"Validate a config file offline and list its limits; exit 0 if it is valid, 1 if not. import prints the Sluice config file (its rls section) that decides as the envoyproxy/ratelimit file FILE does, to see and edit.", runConfig},
		{"override", "set NAME KEY SPEC | unset NAME KEY | list [NAME] [--config FILE]",
			"Give KEY (a key, or a glob: '*' any bytes, '?' one, '\\' escapes) its own limit SPEC under the named limit NAME, remove it, or list the overrides (the config file's and these), without editing the config file: they are kept in the overrides file beside it, which the sidecar reloads and which outlives restarts.", runOverride},
	}
}

// cli is one invocation of the command.
type cli struct {
	stdout, stderr io.Writer
	socket         string
	state          string        // the state file, with direct
	direct         bool          // decide in the state file instead of through the socket
	timeout        time.Duration // how long to wait for the sidecar (to connect, and for each answer)
	config         string        // the sidecar's config file, for override: $SLUICE_CONFIG, else sluice.yaml
	metrics        *http.Client  // top --metrics: reads metricsURL
	metricsURL     string
}

// directCommands are the commands that --direct decides in the state file.
var directCommands = []string{"acquire", "peek", "refund", "reset"}

// run runs the command line args (without the program name) and returns
// the exit status. getenv reads the environment (SLUICE_SOCKET).
func run(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	x := &cli{stdout: stdout, stderr: stderr, socket: defaultSocket, state: defaultState, timeout: defaultTimeout}
	if s := getenv("SLUICE_SOCKET"); s != "" {
		x.socket = s
	}
	if s := getenv("SLUICE_STATE"); s != "" {
		x.state = s
	}
	x.config = cmp.Or(getenv("SLUICE_CONFIG"), "sluice.yaml")
	if s := getenv("SLUICE_TIMEOUT"); s != "" {
		d, err := proto.ParseDuration(s)
		if err != nil || d <= 0 {
			return x.fail("SLUICE_TIMEOUT=%q: want a duration such as 500ms or 5s", s)
		}
		x.timeout = d
	}
	fs := flag.NewFlagSet("sluice", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&x.socket, "socket", x.socket, "the sidecar's Unix socket (default $SLUICE_SOCKET, else "+defaultSocket+")")
	x.timeoutFlag(fs)
	x.directFlags(fs, true)
	showVersion := fs.Bool("version", false, "print the version and the format versions")
	switch err := fs.Parse(args); {
	case errors.Is(err, flag.ErrHelp):
		x.usage()
		return exitOK
	case err != nil:
		return x.fail("%s (see sluice --help)", errtext.Flag(err))
	}
	if *showVersion {
		fmt.Fprintln(x.stdout, version.String("sluice"))
		return exitOK
	}
	args = fs.Args()
	if len(args) == 0 {
		return x.fail("no command (see sluice --help)")
	}
	if args[0] == "help" {
		if len(args) > 1 {
			if cmd := lookup(args[1]); cmd != nil {
				return cmd.run(x, []string{"--help"})
			}
		}
		x.usage()
		return exitOK
	}
	cmd := lookup(args[0])
	if cmd == nil {
		return x.fail("unknown command %q (see sluice --help)", args[0])
	}
	return cmd.run(x, args[1:])
}

func lookup(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

// usage prints the command's usage to stdout.
func (x *cli) usage() {
	w := x.stdout
	fmt.Fprintln(w, "usage: sluice [--socket PATH] [--timeout D] [--direct [--state PATH]] COMMAND [ARGS]\n       sluice --version")
	fmt.Fprintln(w, "\nTalk to a running sluiced over its Unix socket, or with --direct decide")
	fmt.Fprintln(w, "acquire, peek, refund and reset in its state file, beside it. inspect,")
	fmt.Fprintln(w, "verify and config check work offline.")
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range commands {
		fmt.Fprintln(w, strings.TrimRight(fmt.Sprintf("  %-8s %s", c.name, c.args), " "))
	}
	fmt.Fprintln(w, "\nLIMIT is a limit spec, ALGORITHM:name=value,..., for example")
	for _, s := range []string{
		"token_bucket:max=10,refill_time=1h,refill_amount=1",
		"gcra:burst=4,count=1,period=1s",
		"fixed_window:limit=100,window=1m",
		"sliding_window:limit=100,window=1m",
		"pacer:rate=4,period=1s,max_delay=2s",
		"sliding_log:limit=100,window=1m",
		"window_counters:limit=100,window=1h,counters=60",
		"concurrency:limit=2,lease=1h   (lease and release)",
		"quota:limit=1000,period=month,tz=Europe/Paris,anchor=15",
	} {
		fmt.Fprintln(w, "  "+s)
	}
	fmt.Fprintln(w, "or the name of a limit of the sidecar's config file (a LIMIT without ':'),\nfor example login.")
	fmt.Fprintln(w, "\n--socket defaults to $SLUICE_SOCKET, else "+defaultSocket+"; --state to $SLUICE_STATE,")
	fmt.Fprintln(w, "else "+defaultState+". --timeout (default "+defaultTimeout.String()+") is how long to wait for the")
	fmt.Fprintln(w, "sidecar's answer. Flags may come before or after the arguments; -- ends them.")
	fmt.Fprintln(w, "\"sluice COMMAND --help\" describes a command.")
	fmt.Fprintln(w, "\nexit status: 0 allowed (or success), 1 denied, 2 error")
}

// fail prints a one-line error, in words (errtext), and returns exitError.
func (x *cli) fail(format string, a ...any) int {
	msg := errtext.Clean(strings.TrimPrefix(fmt.Sprintf(format, a...), "sluice: "))
	fmt.Fprintln(x.stderr, "sluice: "+strings.Join(strings.Fields(msg), " "))
	return exitError
}

// failCmd reports err, an error of the command name. The sidecar's
// absence and silence are said in words, with what to do about them.
func (x *cli) failCmd(name string, err error) int {
	socket := x.socket
	if abs, aerr := filepath.Abs(socket); aerr == nil {
		socket = abs // a relative path is resolved where sluice runs: say where
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return x.fail("%s: the sidecar at %s did not answer within %v: it is stopped or overloaded (--timeout waits longer)", name, socket, x.timeout)
	case errors.Is(err, syscall.ENOENT) && errors.Is(err, sluice.ErrUnavailable):
		return x.fail("%s: no sidecar at %s: no such socket (start sluiced, or give its socket with --socket or $SLUICE_SOCKET)", name, socket)
	case errors.Is(err, syscall.ECONNREFUSED):
		return x.fail("%s: no sidecar at %s: nothing listens on the socket (sluiced is not running)", name, socket)
	}
	return x.fail("%s: %s", name, strings.TrimPrefix(err.Error(), "sluice: "))
}

// flags returns a flag set for command name with the flags sluice takes
// before the command, which a command accepts too: --socket and
// --timeout, and --direct and --state, listed by the commands that take
// them (the others refuse --direct).
func (x *cli) flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&x.socket, "socket", x.socket, "`PATH` of the sidecar's Unix socket")
	x.timeoutFlag(fs)
	x.directFlags(fs, slices.Contains(directCommands, name))
	return fs
}

// timeoutFlag adds --timeout to fs.
func (x *cli) timeoutFlag(fs *flag.FlagSet) {
	fs.TextVar((*proto.Duration)(&x.timeout), "timeout", proto.Duration(x.timeout), "wait at most `D` for the sidecar to answer")
}

// durationFlag defines a duration flag that accepts days (1d) as well as
// Go's units.
func durationFlag(fs *flag.FlagSet, name string, value time.Duration, usage string) *time.Duration {
	p := new(time.Duration)
	fs.TextVar((*proto.Duration)(p), name, proto.Duration(value), usage)
	return p
}

// directFlags adds --direct and --state to fs; listed, they show in the
// command's usage (an unlisted flag has no usage text).
func (x *cli) directFlags(fs *flag.FlagSet, listed bool) {
	direct, state := "decide in the sidecar's state file instead of through its socket", "`PATH` of the sidecar's state file, with --direct"
	if !listed {
		direct, state = "", ""
	}
	fs.BoolVar(&x.direct, "direct", x.direct, direct)
	fs.StringVar(&x.state, "state", x.state, state)
}

// parse parses a command's flags and arguments, in any order, and checks
// that there are min to max arguments. If it returns ok false, the command
// is over with exit status code: --help printed the usage, or the command
// line is wrong.
func (x *cli) parse(cmd string, fs *flag.FlagSet, args []string, min, max int) (pos []string, code int, ok bool) {
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			x.commandUsage(cmd, fs)
			return nil, exitOK, false
		}
		if err != nil {
			return nil, x.fail("%s: %s (see sluice %s --help)", cmd, errtext.Flag(err), cmd), false
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			pos = append(pos, rest...) // after --, everything is an argument
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	if len(pos) > max && max == 0 {
		return nil, x.fail("%s: takes no arguments, got %q (see sluice %s --help)", cmd, pos[0], cmd), false
	}
	if len(pos) < min || len(pos) > max {
		return nil, x.fail("%s: want %s (see sluice %s --help)", cmd, lookup(cmd).args, cmd), false
	}
	if code, ok := x.checkDirect(cmd); !ok {
		return nil, code, false
	}
	return pos, exitOK, true
}

// checkDirect refuses --direct for a command that does not decide in the
// state file.
func (x *cli) checkDirect(cmd string) (int, bool) {
	if !x.direct || slices.Contains(directCommands, cmd) {
		return exitOK, true
	}
	return x.fail("%s: --direct decides in the state file, which only acquire, peek, refund and reset do (drop --direct)", cmd), false
}

// commandUsage prints a command's usage and flags to stdout.
func (x *cli) commandUsage(name string, fs *flag.FlagSet) {
	c := lookup(name)
	synopsis := strings.TrimRight("sluice "+c.name+" "+c.args, " ")
	fmt.Fprintf(x.stdout, "usage: %s\n\n%s\n\nflags:\n", synopsis, c.summary)
	var lines []string
	fs.VisitAll(func(f *flag.Flag) {
		if f.Usage == "" {
			return // not for this command
		}
		arg, help := flag.UnquoteUsage(f)
		if arg != "" {
			arg = " " + arg
		}
		if f.DefValue != "" && f.DefValue != "false" && f.Name != "socket" {
			help += " (default " + f.DefValue + ")"
		}
		lines = append(lines, fmt.Sprintf("  --%s%s\n    \t%s", f.Name, arg, help))
	})
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Fprintln(x.stdout, l)
	}
}

// dial connects to the sidecar, reporting failure. Every call waits for
// its answer at most x.timeout.
func (x *cli) dial(cmd string) (*sluice.Client, int, bool) {
	if x.timeout <= 0 {
		return nil, x.fail("%s: --timeout %v: want a duration above 0", cmd, x.timeout), false
	}
	// The start check (is a sidecar answering there?) waits x.timeout too.
	ctx, cancel := context.WithTimeout(context.Background(), x.timeout)
	defer cancel()
	c, err := sluice.DialContext(ctx, x.socket, sluice.WithTimeout(x.timeout), sluice.WithDialTimeout(x.timeout), sluice.WithFailurePolicy(sluice.FailError))
	if err != nil {
		return nil, x.failCmd(cmd, err), false
	}
	return c, exitOK, true
}

// bucketClient is what the commands on one bucket need: the socket client
// or, with --direct, the direct one.
type bucketClient interface {
	Acquire(ctx context.Context, l sluice.Limit, key string, cost int64, opts ...sluice.RequestOption) (sluice.Decision, error)
	Peek(ctx context.Context, l sluice.Limit, key string, opts ...sluice.RequestOption) (sluice.Decision, error)
	Refund(ctx context.Context, l sluice.Limit, key string, amount int64, opts ...sluice.RequestOption) (sluice.Decision, error)
	Reset(ctx context.Context, l sluice.Limit, key string) (bool, error)
	Close() error
}

// open returns the client for a command on one bucket, reporting failure.
func (x *cli) open(cmd string) (bucketClient, int, bool) {
	if !x.direct {
		return x.dial(cmd)
	}
	c, err := direct.Open(x.state, direct.Options{})
	if err != nil {
		return nil, x.failCmd(cmd, err), false
	}
	return c, exitOK, true
}

// callContext returns the context of a call to the sidecar. The client's
// timeout (x.timeout) ends a call that gets no answer; the context's
// deadline, later, only backs it up.
func (x *cli) callContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 2*x.timeout+time.Second)
}
