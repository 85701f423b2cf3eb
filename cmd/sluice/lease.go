package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/clients/go/sluice"
	"github.com/sluicehq/sluice/internal/errtext"
)

// The commands on concurrency limits: lease and release. A lease lives as
// long as the connection it was taken on, that is, as long as the sluice
// process: lease holds its slot while a command runs, or for a while.

// leasePoll is how often lease --wait asks again for a slot. A denial's
// RetryAfter is when a slot frees at the latest (the earliest lease
// expires); a release frees one sooner, unannounced.
const leasePoll = 100 * time.Millisecond

// holdSignals end a hold, and are passed on to the command a lease runs.
var holdSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

func runLease(x *cli, args []string) int {
	fs := x.flags("lease")
	hold := durationFlag(fs, "hold", 0, "without a COMMAND: hold the slot for `D`, then release it (0: until interrupted)")
	wait := durationFlag(fs, "wait", 0, "when every slot is held, keep asking for up to `D` (0: do not wait)")
	asJSON := fs.Bool("json", false, "print the decision as a JSON object (without a COMMAND)")
	pos, command, code, ok := x.parseLease(fs, args)
	if !ok {
		return code
	}
	l, err := sluice.ParseLimit(pos[1])
	if err != nil {
		return x.failCmd("lease", err)
	}
	switch {
	case x.direct:
		return x.fail("lease: a lease is held through the sidecar's socket, which gives it back when its holder's connection closes; the direct path cannot lease (drop --direct)")
	case command != nil && *hold != 0:
		return x.fail("lease: --hold is for a lease without a COMMAND: the slot is held while the COMMAND runs")
	case command != nil && *asJSON:
		return x.fail("lease: --json is for a lease without a COMMAND")
	case *hold < 0 || *wait < 0:
		return x.fail("lease: --hold and --wait want a duration >= 0")
	}
	c, code, ok := x.dial("lease")
	if !ok {
		return code
	}
	defer c.Close() // gives back whatever is still held
	ls, err := x.takeLease(c, l, pos[0], *wait)
	if err != nil {
		return x.failCmd("lease", err)
	}
	if command == nil {
		return x.holdLease(ls, *hold, *asJSON)
	}
	if !ls.Allowed {
		fmt.Fprintf(x.stderr, "sluice: lease: %s; not running %s\n", formatDecision(ls.Decision), command[0])
		return exitDenied
	}
	return x.runLeased(ls, l, command)
}

// parseLease parses lease's flags and arguments: KEY and LIMIT, then
// optionally -- and the COMMAND. A KEY or LIMIT that looks like a flag
// follows a -- of its own: lease -- -k LIMIT -- COMMAND.
func (x *cli) parseLease(fs *flag.FlagSet, args []string) (pos, command []string, code int, ok bool) {
	usage := func() (pos, command []string, code int, ok bool) {
		return nil, nil, x.fail("lease: want %s (see sluice lease --help)", lookup("lease").args), false
	}
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			x.commandUsage("lease", fs)
			return nil, nil, exitOK, false
		}
		if err != nil {
			return nil, nil, x.fail("lease: %s (see sluice lease --help)", errtext.Flag(err)), false
		}
		rest := fs.Args()
		if len(rest) == 0 {
			if len(args) > 0 && args[len(args)-1] == "--" && len(pos) == 2 {
				return nil, nil, x.fail("lease: no COMMAND after -- (see sluice lease --help)"), false
			}
			break
		}
		if afterDashes := len(args) > len(rest) && args[len(args)-len(rest)-1] == "--"; !afterDashes {
			pos, args = append(pos, rest[0]), rest[1:]
			continue
		}
		for len(pos) < 2 && len(rest) > 0 && (len(pos) == 0 || rest[0] != "--") {
			pos, rest = append(pos, rest[0]), rest[1:]
		}
		if len(pos) == 2 && len(rest) > 0 && rest[0] == "--" {
			rest = rest[1:] // lease -- KEY LIMIT -- COMMAND
		}
		if len(pos) < 2 || len(rest) == 0 {
			if len(rest) == 0 && len(pos) == 2 {
				return nil, nil, x.fail("lease: no COMMAND after -- (see sluice lease --help)"), false
			}
			return usage()
		}
		return pos, rest, exitOK, true
	}
	if len(pos) != 2 {
		return usage()
	}
	return pos, nil, exitOK, true
}

// takeLease asks for a slot, again every leasePoll for up to wait while
// every slot is held.
func (x *cli) takeLease(c *sluice.Client, l sluice.Limit, key string, wait time.Duration) (sluice.Lease, error) {
	deadline := time.Now().Add(wait)
	for {
		cx, cancel := x.callContext()
		ls, err := c.Lease(cx, l, key)
		cancel()
		if err != nil || ls.Allowed {
			return ls, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return ls, nil
		}
		pause := min(leasePoll, left)
		if ls.RetryAfter > 0 {
			pause = min(pause, ls.RetryAfter)
		}
		time.Sleep(pause)
	}
}

// formatLease is a lease's decision for people, its id after the verdict:
//
//	allowed lease=9046203127455128141 remaining=1 limit=2 reset_after=1h0m0s
func formatLease(ls sluice.Lease) string {
	s := formatDecision(ls.Decision)
	if ls.ID == 0 {
		return s
	}
	verdict, rest, _ := strings.Cut(s, " ")
	return verdict + " lease=" + strconv.FormatUint(ls.ID, 10) + " " + rest
}

// jsonLease is lease --json: the decision and the lease id (0 if denied).
type jsonLease struct {
	jsonDecision
	Lease uint64 `json:"lease"`
}

func jsonDecisionOf(d sluice.Decision) jsonDecision {
	return jsonDecision{
		Allowed: d.Allowed, Remaining: d.Remaining, Limit: d.Limit,
		RetryAfterNs: int64(d.RetryAfter), ResetAfterNs: int64(d.ResetAfter), DelayNs: int64(d.Delay),
	}
}

// holdLease prints the lease and, if it was granted, holds it for hold (0:
// until a signal comes), then releases it.
func (x *cli) holdLease(ls sluice.Lease, hold time.Duration, asJSON bool) int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, holdSignals...) // before the lease is printed: a signal may follow at once
	defer signal.Stop(sigs)
	var err error
	if asJSON {
		err = json.NewEncoder(x.stdout).Encode(jsonLease{jsonDecisionOf(ls.Decision), ls.ID})
	} else {
		_, err = fmt.Fprintln(x.stdout, formatLease(ls))
	}
	if err != nil {
		return x.failCmd("lease", err)
	}
	if !ls.Allowed {
		return exitDenied
	}
	var timeout <-chan time.Time
	if hold > 0 {
		t := time.NewTimer(hold)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-sigs:
	case <-timeout:
	}
	x.release(ls, "the hold ended")
	return exitOK
}

// runLeased runs command holding ls, passing the signals that would end
// sluice on to it, and returns its exit status (128+N if signal N ended
// it, as a shell reports it).
func (x *cli) runLeased(ls sluice.Lease, l sluice.Limit, command []string) int {
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, x.stdout, x.stderr
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, holdSignals...) // sluice outlives the command: its slot is held until it ends
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		x.release(ls, "")
		return x.fail("lease: %v", err)
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				cmd.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	err := cmd.Wait()
	close(done)
	x.release(ls, command[0]+" ended")
	var exit *exec.ExitError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &exit):
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return exit.ExitCode()
	}
	return x.fail("lease: %s: %v", command[0], err)
}

// release gives ls back once its work is done (when is what ended, for
// the warning; "" for none). A lease the sidecar no longer held expired
// (or was released by someone else) before the work ended: the limit did
// not cover all of it, and sluice says so on stderr. A release that fails
// is not reported: the sidecar gives the lease back when sluice exits.
func (x *cli) release(ls sluice.Lease, when string) {
	released, err := ls.Release()
	if err == nil && !released && when != "" {
		fmt.Fprintf(x.stderr, "sluice: lease: the lease was no longer held when %s: it expired (the limit's lease time passed) or was released by another process\n", when)
	}
}

func runRelease(x *cli, args []string) int {
	fs := x.flags("release")
	asJSON := jsonFlag(fs)
	pos, l, code, ok := x.parseBucket("release", fs, args, 3)
	if !ok {
		return code
	}
	id, err := strconv.ParseUint(pos[2], 10, 64)
	if err != nil || id == 0 {
		return x.fail("release: ID %q: want the lease id that lease printed, a whole number above 0", pos[2])
	}
	c, code, ok := x.dial("release")
	if !ok {
		return code
	}
	defer c.Close()
	cx, cancel := x.callContext()
	defer cancel()
	released, err := c.Release(cx, l, pos[0], id)
	if err != nil {
		return x.failCmd("release", err)
	}
	d, err := c.Peek(cx, l, pos[0]) // the slots as they stand now
	if err != nil {
		return x.failCmd("release", err)
	}
	if *asJSON {
		err = json.NewEncoder(x.stdout).Encode(struct {
			Released bool `json:"released"`
			jsonDecision
		}{released, jsonDecisionOf(d)})
	} else {
		verdict := "released"
		if !released {
			verdict = "not_held"
		}
		_, slots, _ := strings.Cut(formatDecision(d), " ")
		_, err = fmt.Fprintln(x.stdout, verdict+" "+slots)
	}
	if err != nil {
		return x.failCmd("release", err)
	}
	if !released {
		return exitDenied
	}
	return exitOK
}
