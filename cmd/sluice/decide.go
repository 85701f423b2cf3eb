package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/clients/go/sluice"
)

// The commands that act on one bucket: acquire, peek, refund, reset.

func runAcquire(x *cli, args []string) int {
	fs := x.flags("acquire")
	cost := fs.Int64("cost", 1, "the request's cost, `N` tokens; 0 peeks without creating the bucket")
	at := atFlag(fs)
	strict := fs.Bool("strict", false, "token_bucket: a request that empties the bucket, or is denied, restarts its refill clock")
	shadow := fs.Bool("shadow", false, "a shadow request: decided and consumed as usual, a denial answered as allowed and shown as shadow_denied (as a limit spec's shadow=true)")
	asJSON := jsonFlag(fs)
	pos, l, code, ok := x.parseBucket("acquire", fs, args, 2)
	if !ok {
		return code
	}
	opts := at.options()
	if *shadow {
		opts = append(opts, sluice.Shadow())
	}
	if *strict {
		opts = append(opts, sluice.Strict())
	}
	return x.decision("acquire", *asJSON, func(c bucketClient) (sluice.Decision, error) {
		cx, cancel := x.callContext()
		defer cancel()
		return c.Acquire(cx, l, pos[0], *cost, opts...)
	})
}

func runPeek(x *cli, args []string) int {
	fs := x.flags("peek")
	at := atFlag(fs)
	asJSON := jsonFlag(fs)
	pos, l, code, ok := x.parseBucket("peek", fs, args, 2)
	if !ok {
		return code
	}
	return x.decision("peek", *asJSON, func(c bucketClient) (sluice.Decision, error) {
		cx, cancel := x.callContext()
		defer cancel()
		return c.Peek(cx, l, pos[0], at.options()...)
	})
}

func runRefund(x *cli, args []string) int {
	fs := x.flags("refund")
	asJSON := jsonFlag(fs)
	pos, l, code, ok := x.parseBucket("refund", fs, args, 3)
	if !ok {
		return code
	}
	amount, err := strconv.ParseInt(pos[2], 10, 64)
	if err != nil {
		return x.fail("refund: AMOUNT %q: want a whole number of tokens", pos[2])
	}
	return x.decision("refund", *asJSON, func(c bucketClient) (sluice.Decision, error) {
		cx, cancel := x.callContext()
		defer cancel()
		return c.Refund(cx, l, pos[0], amount)
	})
}

func runReset(x *cli, args []string) int {
	fs := x.flags("reset")
	pos, l, code, ok := x.parseBucket("reset", fs, args, 2)
	if !ok {
		return code
	}
	c, code, ok := x.open("reset")
	if !ok {
		return code
	}
	defer c.Close()
	cx, cancel := x.callContext()
	defer cancel()
	existed, err := c.Reset(cx, l, pos[0])
	if err != nil {
		return x.failCmd("reset", err)
	}
	if existed {
		fmt.Fprintln(x.stdout, "reset: the bucket existed")
	} else {
		fmt.Fprintln(x.stdout, "reset: no such bucket")
	}
	return exitOK
}

// parseBucket parses the arguments of a command on one bucket: n
// positional arguments, KEY and LIMIT first; LIMIT is a limit spec, or the
// name of a limit of the sidecar's config file.
func (x *cli) parseBucket(cmd string, fs *flag.FlagSet, args []string, n int) ([]string, sluice.Limit, int, bool) {
	pos, code, ok := x.parse(cmd, fs, args, n, n)
	if !ok {
		return nil, sluice.Limit{}, code, false
	}
	l, err := sluice.ParseLimit(pos[1])
	if err != nil {
		return nil, l, x.failCmd(cmd, err), false
	}
	if l.Name != "" && x.direct {
		return nil, l, x.fail("%s: %q is a named limit, which only the sidecar knows (its config file): use a spec with --direct", cmd, l.Name), false
	}
	return pos, l, exitOK, true
}

// decision runs a command that returns a decision: it connects, calls
// decide, prints the decision, and returns exitOK if it allows, exitDenied
// if not.
func (x *cli) decision(cmd string, asJSON bool, decide func(bucketClient) (sluice.Decision, error)) int {
	c, code, ok := x.open(cmd)
	if !ok {
		return code
	}
	defer c.Close()
	d, err := decide(c)
	if err != nil {
		return x.failCmd(cmd, err)
	}
	if asJSON {
		j := jsonDecisionOf(d)
		j.ShadowDenied, j.Policy = d.ShadowDenied, d.Outage
		if len(d.Limits) > 0 {
			j.Bound = &d.Bound
			for _, l := range d.Limits {
				j.Limits = append(j.Limits, jsonDecisionOf(l))
			}
		}
		err = json.NewEncoder(x.stdout).Encode(j)
	} else {
		_, err = fmt.Fprintln(x.stdout, formatDecision(d))
	}
	if err != nil {
		return x.failCmd(cmd, err)
	}
	if !d.Allowed {
		return exitDenied
	}
	return exitOK
}

// jsonDecision is the --json form of a decision: durations in nanoseconds,
// -1 where not applicable, as on the wire.
type jsonDecision struct {
	Allowed      bool  `json:"allowed"`
	Remaining    int64 `json:"remaining"`
	Limit        int64 `json:"limit"`
	RetryAfterNs int64 `json:"retry_after_ns"`
	ResetAfterNs int64 `json:"reset_after_ns"`
	DelayNs      int64 `json:"delay_ns"`
	ShadowDenied bool  `json:"shadow_denied,omitempty"`
	// Policy is the global limit's outage policy that decided, Redis not
	// answering in time: "local", "open" or "closed".
	Policy string `json:"policy,omitempty"`
	// Limits is a named list's: each limit's decision, in the list's
	// order, and Bound the index of the one that binds.
	Limits []jsonDecision `json:"limits,omitempty"`
	Bound  *int           `json:"bound,omitempty"`
}

// formatDecision returns a decision as one line for people:
//
//	allowed remaining=9 limit=10 reset_after=6m0s
//	denied remaining=0 limit=10 retry_after=6m0s reset_after=1h0m0s
//	allowed shadow_denied remaining=0 limit=10 reset_after=1h0m0s
//	denied policy=closed remaining=0 limit=1000 retry_after=5ms reset_after=0s
//
// Durations are rounded (human). retry_after appears for a denial ("never" if no wait helps), delay for a
// paced request, shadow_denied for a shadow request that was allowed only
// because it is one, policy for a global limit's decision that its outage
// policy made because Redis did not answer in time (retry_after is then
// when the sidecar asks Redis again). A named list's decision is followed
// by one line per limit of the list, in its order, the one that binds
// marked:
//
//	denied remaining=0 limit=2 retry_after=1h46m40s reset_after=1h46m40s
//	  1 of 2: allowed remaining=3 limit=5 reset_after=24m0s
//	  2 of 2, binds: denied remaining=0 limit=2 retry_after=1h46m40s reset_after=1h46m40s
func formatDecision(d sluice.Decision) string {
	s := formatOne(d)
	for i, l := range d.Limits {
		binds := ""
		if i == d.Bound {
			binds = ", binds"
		}
		s += fmt.Sprintf("\n  %d of %d%s: %s", i+1, len(d.Limits), binds, formatOne(l))
	}
	return s
}

// formatOne is formatDecision without the limits of a list.
func formatOne(d sluice.Decision) string {
	var b strings.Builder
	if d.Allowed {
		b.WriteString("allowed")
		if d.ShadowDenied {
			b.WriteString(" shadow_denied")
		}
	} else {
		b.WriteString("denied")
	}
	if d.Outage != "" {
		b.WriteString(" policy=" + d.Outage)
	}
	fmt.Fprintf(&b, " remaining=%d limit=%d", d.Remaining, d.Limit)
	if !d.Allowed {
		if d.RetryAfter < 0 {
			b.WriteString(" retry_after=never")
		} else {
			fmt.Fprintf(&b, " retry_after=%s", human(d.RetryAfter))
		}
	}
	fmt.Fprintf(&b, " reset_after=%s", human(d.ResetAfter))
	if d.Delay > 0 {
		fmt.Fprintf(&b, " delay=%s", human(d.Delay))
	}
	return b.String()
}

// human returns d for people: to the millisecond (2h56m57.19s, not
// 2h56m57.189776841s), or to the microsecond below one (250µs). --json
// gives the nanoseconds.
func human(d time.Duration) string {
	if d.Abs() < time.Millisecond {
		return d.Round(time.Microsecond).String()
	}
	return d.Round(time.Millisecond).String()
}

func jsonFlag(fs *flag.FlagSet) *bool {
	return fs.Bool("json", false, "print the decision as a JSON object")
}

// atValue is the --at flag: a request time in Unix nanoseconds.
type atValue struct {
	ns  int64
	set bool
}

func atFlag(fs *flag.FlagSet) *atValue {
	a := new(atValue)
	fs.Func("at", "decide as of `UNIX_NANOS` instead of the sidecar's clock", func(s string) error {
		ns, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return errors.New("want Unix nanoseconds")
		}
		a.ns, a.set = ns, true
		return nil
	})
	return a
}

func (a *atValue) options() []sluice.RequestOption {
	if !a.set {
		return nil
	}
	return []sluice.RequestOption{sluice.At(time.Unix(0, a.ns))}
}
