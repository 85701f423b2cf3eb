package server

import (
	"bytes"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/proto"
	"github.com/sluicehq/sluice/proto/resp"
)

// maxRESPBuffer bounds the read buffer of a Redis-protocol connection: the
// largest command resp.Parse accepts, with room for its framing.
const maxRESPBuffer = resp.MaxArgs*(resp.MaxBulkLen+16) + 32

// respConn is a connection speaking the Redis protocol (RESP2).
type respConn struct {
	stream
	args   [][]byte
	limits limitCache[bucket.Limit]
}

func serveRESP(s *server, c net.Conn) {
	rc := &respConn{stream: stream{s: s, c: c}, args: make([][]byte, 0, resp.MaxArgs)}
	rc.serve(rc.handle)
}

// refuseRESP is an error reply.
func refuseRESP(_ proto.Status, msg string) []byte {
	return resp.AppendError(nil, "ERR "+msg)
}

// handle answers every complete command in rc.in. Malformed input is
// answered with a protocol error and closes the connection, as Redis does.
func (rc *respConn) handle() {
	rest := rc.in
	for !rc.closed {
		if len(rc.out) >= maxPending {
			rc.more = true
			break
		}
		args, n, err := resp.Parse(rest, rc.args)
		rc.args = args
		if err != nil {
			rc.n.malformed++
			rc.out = resp.AppendError(rc.out, err.Error())
			rc.closed = true
			return
		}
		if n == 0 {
			break
		}
		rest = rest[n:]
		if len(args) > 0 {
			rc.n.ops++
			rc.command(args)
		}
	}
	if !rc.more && len(rest) == cap(rc.in) && cap(rc.in) >= maxRESPBuffer {
		rc.n.malformed++
		rc.out = resp.AppendError(rc.out, "ERR Protocol error: request too large")
		rc.closed = true
		return
	}
	rc.keep(rest, 0)
}

// command runs one command.
func (rc *respConn) command(args [][]byte) {
	name := args[0]
	switch {
	case is(name, "rl.reduce"):
		rc.rateLimit(args, "rl.reduce", false, false)
	case is(name, "rl.preduce"):
		rc.rateLimit(args, "rl.preduce", true, false)
	case is(name, "rl.get"):
		rc.rateLimit(args, "rl.get", false, true)
	case is(name, "rl.pget"):
		rc.rateLimit(args, "rl.pget", true, true)
	case is(name, "cl.throttle"):
		rc.throttle(args)
	case is(name, "ping"):
		switch len(args) {
		case 1:
			rc.out = resp.AppendSimple(rc.out, "PONG")
		case 2:
			rc.out = resp.AppendBulk(rc.out, args[1])
		default:
			rc.arity(name)
		}
	case is(name, "echo"):
		if len(args) != 2 {
			rc.arity(name)
			return
		}
		rc.out = resp.AppendBulk(rc.out, args[1])
	case is(name, "quit"):
		rc.out = resp.AppendSimple(rc.out, "OK")
		rc.closed = true
	case is(name, "select"):
		if len(args) != 2 {
			rc.arity(name)
		} else if string(args[1]) == "0" {
			rc.out = resp.AppendSimple(rc.out, "OK")
		} else {
			rc.out = resp.AppendError(rc.out, "ERR DB index is out of range")
		}
	case is(name, "hello"):
		rc.hello(args)
	case is(name, "client"):
		rc.client(args)
	case is(name, "command"):
		rc.commandInfo(args)
	case is(name, "info"):
		rc.out = resp.AppendBulkString(rc.out, rc.s.info())
	default:
		rc.unknown(args)
	}
}

// is reports whether a command or option name is s, ignoring case.
func is(b []byte, s string) bool { return len(b) == len(s) && bytes.EqualFold(b, []byte(s)) }

func (rc *respConn) arity(name []byte) {
	rc.out = resp.AppendError(rc.out, fmt.Sprintf("ERR wrong number of arguments for '%s' command", strings.ToLower(string(name))))
}

// unknown answers a command Sluice does not have, as Redis words it.
func (rc *respConn) unknown(args [][]byte) {
	var b strings.Builder
	fmt.Fprintf(&b, "ERR unknown command '%s', with args beginning with: ", printable(args[0]))
	for _, a := range args[1:min(len(args), 4)] {
		fmt.Fprintf(&b, "'%s' ", printable(a))
	}
	rc.out = resp.AppendError(rc.out, b.String())
}

// printable shortens and sanitises an argument for an error message.
func printable(b []byte) string {
	if len(b) > 128 {
		b = b[:128]
	}
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return '?'
		}
		return r
	}, string(b))
}

// hello answers the RESP3 handshake of modern clients: Sluice speaks RESP2
// only, so HELLO 3 gets the error that makes go-redis and redis-py fall back
// to RESP2; HELLO or HELLO 2 gets the server's description.
func (rc *respConn) hello(args [][]byte) {
	if len(args) > 1 && string(args[1]) != "2" {
		rc.out = resp.AppendError(rc.out, "NOPROTO sorry, this protocol version is not supported")
		return
	}
	rc.out = resp.AppendArray(rc.out, 14)
	for _, kv := range [][2]string{{"server", "sluice"}, {"version", redisVersion}, {"proto", ""},
		{"id", ""}, {"mode", "standalone"}, {"role", "master"}, {"modules", ""}} {
		rc.out = resp.AppendBulkString(rc.out, kv[0])
		switch kv[0] {
		case "proto":
			rc.out = resp.AppendInt(rc.out, 2)
		case "id":
			rc.out = resp.AppendInt(rc.out, rc.s.stats.connsTotal.Load())
		case "modules":
			rc.out = resp.AppendArray(rc.out, 0)
		default:
			rc.out = resp.AppendBulkString(rc.out, kv[1])
		}
	}
}

// client accepts the CLIENT subcommands clients send on connecting.
func (rc *respConn) client(args [][]byte) {
	if len(args) < 2 {
		rc.arity(args[0])
		return
	}
	switch sub := args[1]; {
	case is(sub, "setname"), is(sub, "setinfo"):
		rc.out = resp.AppendSimple(rc.out, "OK")
	case is(sub, "getname"):
		rc.out = resp.AppendNull(rc.out)
	case is(sub, "id"):
		rc.out = resp.AppendInt(rc.out, rc.s.stats.connsTotal.Load())
	default:
		rc.out = resp.AppendError(rc.out, fmt.Sprintf("ERR unknown subcommand '%s'. Try CLIENT HELP.", printable(sub)))
	}
}

// redisVersion is the Redis version Sluice reports, for tools that parse it
// (7.0 is the RESP2 command set Sluice answers).
const redisVersion = "7.0.0"

// respCommands describes the commands for COMMAND: name, arity (negative:
// at least), flags, first key, last key, key step.
var respCommands = []struct {
	name  string
	arity int
	flags []string
	key   int
}{
	{"rl.reduce", -4, []string{"write", "fast"}, 1},
	{"rl.preduce", -4, []string{"write", "fast"}, 1},
	{"rl.get", -4, []string{"readonly", "fast"}, 1},
	{"rl.pget", -4, []string{"readonly", "fast"}, 1},
	{"cl.throttle", -5, []string{"write", "fast"}, 1},
	{"ping", -1, []string{"fast"}, 0},
	{"echo", 2, []string{"fast"}, 0},
	{"quit", -1, []string{"fast"}, 0},
	{"select", 2, []string{"fast"}, 0},
	{"hello", -1, []string{"fast"}, 0},
	{"client", -2, []string{"fast"}, 0},
	{"command", -1, []string{"fast"}, 0},
	{"info", -1, []string{}, 0},
}

// commandInfo answers COMMAND, COMMAND COUNT, COMMAND INFO and COMMAND DOCS:
// enough for redis-cli's hints and clients that inspect the server.
func (rc *respConn) commandInfo(args [][]byte) {
	entry := func(i int) {
		c := respCommands[i]
		rc.out = resp.AppendArray(rc.out, 6)
		rc.out = resp.AppendBulkString(rc.out, c.name)
		rc.out = resp.AppendInt(rc.out, int64(c.arity))
		rc.out = resp.AppendArray(rc.out, len(c.flags))
		for _, f := range c.flags {
			rc.out = resp.AppendSimple(rc.out, f)
		}
		rc.out = resp.AppendInt(rc.out, int64(c.key))
		rc.out = resp.AppendInt(rc.out, int64(c.key))
		rc.out = resp.AppendInt(rc.out, int64(c.key))
	}
	switch {
	case len(args) == 1:
		rc.out = resp.AppendArray(rc.out, len(respCommands))
		for i := range respCommands {
			entry(i)
		}
	case is(args[1], "count"):
		rc.out = resp.AppendInt(rc.out, int64(len(respCommands)))
	case is(args[1], "docs"):
		rc.out = resp.AppendArray(rc.out, 0) // no documentation: clients show none
	case is(args[1], "info"):
		rc.out = resp.AppendArray(rc.out, len(args)-2)
		for _, name := range args[2:] {
			found := false
			for i, c := range respCommands {
				if is(name, c.name) {
					entry(i)
					found = true
					break
				}
			}
			if !found {
				rc.out = resp.AppendNull(rc.out)
			}
		}
	default:
		rc.out = resp.AppendError(rc.out, fmt.Sprintf("ERR unknown subcommand '%s'. Try COMMAND HELP.", printable(args[1])))
	}
}

// info is INFO's report, in Redis's "# Section" / "field:value" form.
func (s *server) info() string {
	st, g := s.engine.Stats(), s.engine.Geometry()
	c := &s.stats
	var b strings.Builder
	w := func(k string, v any) { fmt.Fprintf(&b, "%s:%v\r\n", k, v) }
	b.WriteString("# Server\r\n")
	w("redis_version", redisVersion)
	w("sluice_protocol_version", proto.Version)
	w("redis_mode", "standalone")
	w("process_id", pid)
	b.WriteString("\r\n# Clients\r\n")
	w("connected_clients", c.conns.Load())
	w("rejected_connections", c.connsRejected.Load())
	b.WriteString("\r\n# Memory\r\n")
	w("used_memory", g.FileSize)
	w("slot_size", g.SlotSize)
	w("slot_count", g.Slots)
	b.WriteString("\r\n# Stats\r\n")
	w("total_connections_received", c.connsTotal.Load())
	w("total_commands_processed", c.ops.Load())
	w("allowed", c.allowed.Load())
	w("denied", c.denied.Load())
	w("errors", c.errors.Load())
	w("table_full", st.TableFull)
	w("torn_slots", st.Torn)
	w("syncs", st.Syncs)
	w("sync_errors", st.SyncErrors)
	b.WriteString("\r\n# Keyspace\r\n")
	w("db0", "keys="+strconv.FormatUint(st.Used, 10)+",expires=0,avg_ttl=0")
	return b.String()
}
