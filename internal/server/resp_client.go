package server

import (
	"fmt"
	"net"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/proto/resp"
)

// redisVersion is the Redis version Sluice reports, for tools that parse
// it: the Redis whose replies the commands below reproduce.
const redisVersion = "7.0.0"

// respCommand describes a command for COMMAND and for the arity check
// Redis makes before running or queueing a command.
type respCommand struct {
	name  string
	arity int // as COMMAND reports it: n exactly, -n at least n (the name included)
	flags []string
	key   int // position of the key, 0 for none
	// module: a rate-limit command of smyte/ratelimit or redis-cell. Like a
	// module's command in Redis, it checks its own arguments when it runs,
	// with its own error texts, even in a transaction.
	module bool
	subs   []respSub // subcommands, which Redis 7 checks like commands
}

// respSub is a subcommand and its arity (the command's name included).
type respSub struct {
	name  string
	arity int
}

var respCommands = []respCommand{
	{name: "rl.reduce", arity: -4, flags: []string{"write", "fast"}, key: 1, module: true},
	{name: "rl.preduce", arity: -4, flags: []string{"write", "fast"}, key: 1, module: true},
	{name: "rl.get", arity: -4, flags: []string{"readonly", "fast"}, key: 1, module: true},
	{name: "rl.pget", arity: -4, flags: []string{"readonly", "fast"}, key: 1, module: true},
	{name: "cl.throttle", arity: -5, flags: []string{"write", "fast"}, key: 1, module: true},
	{name: "ping", arity: -1, flags: []string{"fast"}},
	{name: "echo", arity: 2, flags: []string{"fast"}},
	{name: "quit", arity: -1, flags: []string{"fast"}},
	{name: "select", arity: 2, flags: []string{"fast"}},
	{name: "hello", arity: -1, flags: []string{"fast"}},
	{name: "auth", arity: -2, flags: []string{"fast"}},
	{name: "client", arity: -2, flags: []string{}, subs: []respSub{{"id", 2}, {"info", 2}, {"list", -2},
		{"setname", 3}, {"getname", 2}, {"setinfo", 4}}},
	{name: "config", arity: -2, flags: []string{}, subs: []respSub{{"get", -3}, {"set", -4}}},
	{name: "command", arity: -1, flags: []string{}, subs: []respSub{{"count", 2}, {"info", -2}, {"docs", -2}}},
	{name: "info", arity: -1, flags: []string{}},
	{name: "dbsize", arity: 1, flags: []string{"readonly", "fast"}},
	{name: "multi", arity: 1, flags: []string{"fast"}},
	{name: "exec", arity: 1, flags: []string{}},
	{name: "discard", arity: 1, flags: []string{"fast"}},
	{name: "watch", arity: -2, flags: []string{"fast"}},
	{name: "unwatch", arity: 1, flags: []string{"fast"}},
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

// hello answers HELLO [protover [AUTH username password] [SETNAME name]]
// as Redis 7 does: it authenticates, names the connection, switches it to
// RESP2 or RESP3 (nothing changes if any part is refused), then describes
// the server in the protocol now spoken.
func (rc *respConn) hello(args [][]byte) {
	ver := int64(0)
	j := 1
	if len(args) > 1 {
		v, ok := parseInt(args[1], 64)
		if !ok {
			rc.out = resp.AppendError(rc.out, "ERR Protocol version is not an integer or out of range")
			return
		}
		if v < 2 || v > 3 {
			rc.out = resp.AppendError(rc.out, "NOPROTO unsupported protocol version")
			return
		}
		ver, j = v, 2
	}
	var user, name []byte
	setName := false
	for ; j < len(args); j++ {
		more := len(args) - 1 - j
		switch opt := args[j]; {
		case is(opt, "auth") && more >= 2:
			user = args[j+1]
			j += 2
		case is(opt, "setname") && more >= 1:
			name, setName = args[j+1], true
			j++
		default:
			rc.out = resp.AppendError(rc.out, fmt.Sprintf("ERR Syntax error in HELLO option '%s'", printable(opt)))
			return
		}
	}
	if user != nil && !rc.authenticate(user) {
		return
	}
	if setName && !rc.setName(name) {
		return
	}
	if ver != 0 {
		rc.resp3 = ver == 3
	}
	proto := int64(2)
	if rc.resp3 {
		proto = 3
	}
	rc.mapLen(7)
	for _, kv := range [][2]string{{"server", "sluice"}, {"version", redisVersion}, {"proto", ""},
		{"id", ""}, {"mode", "standalone"}, {"role", "master"}, {"modules", ""}} {
		rc.out = resp.AppendBulkString(rc.out, kv[0])
		switch kv[0] {
		case "proto":
			rc.out = resp.AppendInt(rc.out, proto)
		case "id":
			rc.out = resp.AppendInt(rc.out, rc.id)
		case "modules":
			rc.out = resp.AppendArray(rc.out, 0)
		default:
			rc.out = resp.AppendBulkString(rc.out, kv[1])
		}
	}
}

// authenticate checks a username as a Redis without passwords does: its
// only user, "default", takes any password; any other name is refused.
// Access to Sluice is decided by the socket's permissions and the peer
// allow-list, not by passwords.
func (rc *respConn) authenticate(user []byte) bool {
	if string(user) == "default" {
		return true
	}
	rc.out = resp.AppendError(rc.out, "WRONGPASS invalid username-password pair or user is disabled.")
	return false
}

// auth answers AUTH [username] password as a Redis without passwords.
func (rc *respConn) auth(args [][]byte) {
	switch len(args) {
	case 2:
		rc.out = resp.AppendError(rc.out, "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
	case 3:
		if rc.authenticate(args[1]) {
			rc.out = resp.AppendSimple(rc.out, "OK")
		}
	default:
		rc.out = resp.AppendError(rc.out, "ERR syntax error")
	}
}

// validName reports whether s may name a client or library: printable
// ASCII without spaces, as Redis requires.
func validName(s []byte) bool {
	for _, c := range s {
		if c < '!' || c > '~' {
			return false
		}
	}
	return true
}

// setName names the connection ("" removes the name), or answers why not.
func (rc *respConn) setName(name []byte) bool {
	if !validName(name) {
		rc.out = resp.AppendError(rc.out, "ERR Client names cannot contain spaces, newlines or special characters.")
		return false
	}
	rc.name = string(name)
	return true
}

// client answers CLIENT ID, INFO, LIST, SETNAME, GETNAME and SETINFO (the
// subcommand and its arity were checked: see refusal). LIST reports this
// connection only: other clients are not a client's business.
func (rc *respConn) client(args [][]byte) {
	sub := args[1]
	switch {
	case is(sub, "id"), is(sub, "getname"), is(sub, "info"):
		switch {
		case is(sub, "id"):
			rc.out = resp.AppendInt(rc.out, rc.id)
		case is(sub, "getname"):
			if rc.name == "" {
				rc.null()
			} else {
				rc.out = resp.AppendBulkString(rc.out, rc.name)
			}
		default:
			rc.last = "client|info"
			rc.text(rc.describe())
		}
	case is(sub, "setname"):
		if rc.setName(args[2]) {
			rc.out = resp.AppendSimple(rc.out, "OK")
		}
	case is(sub, "setinfo"):
		i := 0
		switch {
		case is(args[2], "lib-name"):
		case is(args[2], "lib-ver"):
			i = 1
		default:
			rc.out = resp.AppendError(rc.out, fmt.Sprintf("ERR Unrecognized option '%s'", printable(args[2])))
			return
		}
		if !validName(args[3]) {
			rc.out = resp.AppendError(rc.out, fmt.Sprintf("ERR %s cannot contain spaces, newlines or special characters.", strings.ToLower(string(args[2]))))
			return
		}
		rc.lib[i] = string(args[3])
		rc.out = resp.AppendSimple(rc.out, "OK")
	default: // list
		rc.last = "client|list"
		rc.clientList(args[2:])
	}
}

// clientList answers CLIENT LIST [TYPE type] [ID id ...] with this
// connection's line if it matches the filters.
func (rc *respConn) clientList(opts [][]byte) {
	match := true
	for i := 0; i < len(opts); {
		more := len(opts) - 1 - i
		switch {
		case is(opts[i], "type") && more >= 1:
			switch t := opts[i+1]; {
			case is(t, "normal"):
			case is(t, "master"), is(t, "replica"), is(t, "slave"), is(t, "pubsub"):
				match = false
			default:
				rc.out = resp.AppendError(rc.out, fmt.Sprintf("ERR Unknown client type '%s'", printable(t)))
				return
			}
			i += 2
		case is(opts[i], "id") && more >= 1:
			found := false
			for i++; i < len(opts); i++ {
				id, ok := parseInt(opts[i], 64)
				if !ok || id <= 0 {
					rc.out = resp.AppendError(rc.out, "ERR Invalid client ID")
					return
				}
				found = found || id == rc.id
			}
			match = match && found
		default:
			rc.out = resp.AppendError(rc.out, "ERR syntax error")
			return
		}
	}
	if match {
		rc.text(rc.describe())
	} else {
		rc.text("")
	}
}

// describe is the connection's line of CLIENT INFO and CLIENT LIST, with
// the fields of Redis 7 that mean something here.
func (rc *respConn) describe() string {
	addr, laddr := rc.s.cfg.RESPSocket+":0", rc.s.cfg.RESPSocket+":0" // a Unix socket's client, as Redis shows it
	if _, tcp := rc.c.LocalAddr().(*net.TCPAddr); tcp {
		addr, laddr = rc.c.RemoteAddr().String(), rc.c.LocalAddr().String()
	}
	multi := -1
	if rc.tx != nil {
		multi = rc.tx.len()
	}
	proto := 2
	if rc.resp3 {
		proto = 3
	}
	flags := "N"
	if rc.tx != nil {
		flags = "x"
	}
	return fmt.Sprintf("id=%d addr=%s laddr=%s name=%s age=%d idle=0 flags=%s db=0 sub=0 psub=0 ssub=0 multi=%d cmd=%s user=default redir=-1 resp=%d lib-name=%s lib-ver=%s\n",
		rc.id, addr, laddr, rc.name, int64(time.Since(rc.born)/time.Second), flags, multi, rc.last, proto, rc.lib[0], rc.lib[1])
}

// configParams are the parameters CONFIG GET reports: what redis-benchmark
// and client libraries ask for, with the values that describe Sluice.
func (rc *respConn) configParams() [][2]string {
	c := &rc.s.cfg
	port, bind := "0", ""
	if c.RESPAddr != "" {
		if h, p, err := net.SplitHostPort(c.RESPAddr); err == nil {
			bind, port = h, p
		}
	}
	sock := c.RESPSocket
	if sock == "-" {
		sock = ""
	}
	return [][2]string{
		{"save", ""}, // decisions are in the mapped state file; there are no snapshots
		{"appendonly", "no"},
		{"databases", "1"},
		{"maxmemory", "0"},
		{"maxmemory-policy", "noeviction"},
		{"maxclients", strconv.Itoa(c.MaxConns)},
		{"timeout", strconv.FormatInt(int64(c.IdleTimeout/time.Second), 10)},
		{"port", port},
		{"bind", bind},
		{"unixsocket", sock},
		{"unixsocketperm", strconv.FormatUint(uint64(c.SocketMode.Perm()), 8)},
		{"cluster-enabled", "no"},
	}
}

// config answers CONFIG GET parameter [parameter ...] (glob patterns, as
// Redis matches them); CONFIG SET is refused, as Redis refuses a parameter
// it does not know: Sluice is configured by its flags.
func (rc *respConn) config(args [][]byte) {
	sub := args[1]
	switch {
	case is(sub, "get"):
		params := rc.configParams()
		var found [16]bool
		n := 0
		for _, pat := range args[2:] {
			p := strings.ToLower(string(pat))
			for i, kv := range params {
				if ok, _ := path.Match(p, kv[0]); ok && !found[i] {
					found[i] = true
					n++
				}
			}
		}
		rc.mapLen(n)
		for i, kv := range params {
			if found[i] {
				rc.out = resp.AppendBulkString(rc.out, kv[0])
				rc.out = resp.AppendBulkString(rc.out, kv[1])
			}
		}
	default: // set
		rc.out = resp.AppendError(rc.out, fmt.Sprintf("ERR Unknown option or number of arguments for CONFIG SET - '%s'", printable(args[2])))
	}
}

// commandInfo answers COMMAND, COMMAND COUNT, COMMAND INFO and COMMAND DOCS:
// enough for redis-cli's hints and clients that inspect the server.
func (rc *respConn) commandInfo(args [][]byte) {
	entry := func(c *respCommand) {
		rc.out = resp.AppendArray(rc.out, 6)
		rc.out = resp.AppendBulkString(rc.out, c.name)
		rc.out = resp.AppendInt(rc.out, int64(c.arity))
		if rc.resp3 {
			rc.out = resp.AppendSet(rc.out, len(c.flags))
		} else {
			rc.out = resp.AppendArray(rc.out, len(c.flags))
		}
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
			entry(&respCommands[i])
		}
	case is(args[1], "count"):
		rc.out = resp.AppendInt(rc.out, int64(len(respCommands)))
	case is(args[1], "docs"):
		rc.mapLen(0) // no documentation: clients show none
	case len(args) == 2: // COMMAND INFO with no names: every command
		rc.commandInfo(args[:1])
	default: // info
		rc.out = resp.AppendArray(rc.out, len(args)-2)
		for _, name := range args[2:] {
			if c := lookupCommand(name); c != nil {
				entry(c)
			} else {
				rc.null()
			}
		}
	}
}
