package server

import (
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/proto/resp"
)

// respCommand is one command of the Redis protocol: what COMMAND reports
// of it, how it runs, and what a transaction does with it.
type respCommand struct {
	name  string
	arity int // as COMMAND reports it: n exactly, -n at least n (the name included)
	flags []string
	key   int       // position of the key, 0 for none
	subs  []respSub // subcommands, which Redis 7 checks like commands

	// parse, for a rate-limit command, reads its arguments into a request
	// (decided by rc.run) or returns the error reply. Like a module's
	// command in Redis, such a command checks its own arguments when it
	// runs, with its own error texts, even in a transaction.
	parse func(rc *respConn, req *rlRequest, args [][]byte) string
	// do runs any other command, whose arguments fit its arity and subs.
	do func(rc *respConn, args [][]byte)
	tx txRole
}

// txRole is what a transaction (MULTI) does with a command.
type txRole uint8

const (
	// txQueue: queued, if its arity and subcommand are right, and run by
	// EXEC.
	txQueue txRole = iota
	// txNow: runs at once, inside MULTI too (MULTI, EXEC, DISCARD, WATCH,
	// QUIT).
	txNow
	// txTogether: queued unchecked (it has parse); EXEC decides it with
	// the transaction's other rate-limit commands at once.
	txTogether
)

// respSub is a subcommand and its arity (the command's name included).
type respSub struct {
	name  string
	arity int
}

// respCommands is every command of the Redis protocol, in the order
// COMMAND lists them: adding a command is adding its entry here (and its
// parse or do function beside those of its kind).
var respCommands []respCommand

func init() { // an init: the entries refer to functions that read respCommands
	rl := func(name string, millis, get bool) func(*respConn, *rlRequest, [][]byte) string {
		return func(rc *respConn, req *rlRequest, args [][]byte) string {
			return rc.parseRateLimit(req, args, name, millis, get)
		}
	}
	write, read := []string{"write", "fast"}, []string{"readonly", "fast"}
	fast, none := []string{"fast"}, []string{}
	respCommands = []respCommand{
		{name: "rl.reduce", arity: -4, flags: write, key: 1, parse: rl("rl.reduce", false, false), tx: txTogether},
		{name: "rl.preduce", arity: -4, flags: write, key: 1, parse: rl("rl.preduce", true, false), tx: txTogether},
		{name: "rl.get", arity: -4, flags: read, key: 1, parse: rl("rl.get", false, true), tx: txTogether},
		{name: "rl.pget", arity: -4, flags: read, key: 1, parse: rl("rl.pget", true, true), tx: txTogether},
		{name: "cl.throttle", arity: -5, flags: write, key: 1, parse: (*respConn).parseThrottle, tx: txTogether},
		{name: "ping", arity: -1, flags: fast, do: (*respConn).ping},
		{name: "echo", arity: 2, flags: fast, do: func(rc *respConn, args [][]byte) { rc.out = resp.AppendBulk(rc.out, args[1]) }},
		{name: "quit", arity: -1, flags: fast, do: (*respConn).quit, tx: txNow},
		{name: "select", arity: 2, flags: fast, do: (*respConn).selectDB},
		{name: "hello", arity: -1, flags: fast, do: (*respConn).hello},
		{name: "auth", arity: -2, flags: fast, do: (*respConn).auth},
		{name: "client", arity: -2, flags: none, do: (*respConn).client, subs: []respSub{{"id", 2}, {"info", 2}, {"list", -2},
			{"setname", 3}, {"getname", 2}, {"setinfo", 4}}},
		{name: "config", arity: -2, flags: none, do: (*respConn).config, subs: []respSub{{"get", -3}, {"set", -4}}},
		{name: "command", arity: -1, flags: none, do: (*respConn).commandInfo, subs: []respSub{{"count", 2}, {"info", -2}, {"docs", -2}}},
		{name: "info", arity: -1, flags: none, do: (*respConn).info},
		{name: "dbsize", arity: 1, flags: read, do: (*respConn).dbsize},
		{name: "multi", arity: 1, flags: fast, do: (*respConn).multi, tx: txNow},
		{name: "exec", arity: 1, flags: none, do: (*respConn).exec, tx: txNow},
		{name: "discard", arity: 1, flags: fast, do: (*respConn).discard, tx: txNow},
		{name: "watch", arity: -2, flags: fast, do: (*respConn).watch, tx: txNow},
		{name: "unwatch", arity: 1, flags: fast, do: func(rc *respConn, _ [][]byte) {
			rc.out = resp.AppendSimple(rc.out, "OK") // nothing is ever watched
		}},
	}
}

// lookupCommand returns the command named name (any case), or nil.
func lookupCommand(name []byte) *respCommand {
	for i := range respCommands {
		if is(name, respCommands[i].name) {
			return &respCommands[i]
		}
	}
	return nil
}

// arityOK reports whether n arguments (the name included) fit an arity:
// n exactly, or at least -n if negative.
func arityOK(arity, n int) bool {
	if arity < 0 {
		return n >= -arity
	}
	return n == arity
}

// refusal is the error Redis answers, before running or queueing it, to a
// command with the wrong number of arguments or an unknown subcommand, or
// "" if the command may run.
func (c *respCommand) refusal(args [][]byte) string {
	if !arityOK(c.arity, len(args)) {
		return fmt.Sprintf("ERR wrong number of arguments for '%s' command", c.name)
	}
	if c.subs == nil || len(args) < 2 {
		return ""
	}
	for _, sub := range c.subs {
		if is(args[1], sub.name) {
			if !arityOK(sub.arity, len(args)) {
				return fmt.Sprintf("ERR wrong number of arguments for '%s|%s' command", c.name, sub.name)
			}
			return ""
		}
	}
	return fmt.Sprintf("ERR unknown subcommand '%s'. Try %s HELP.", printable(args[1]), strings.ToUpper(c.name))
}
