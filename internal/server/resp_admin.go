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

// ping answers PING [message]. PING a b is refused when it runs, as Redis
// does (it is queued in a transaction).
func (rc *respConn) ping(args [][]byte) {
	switch len(args) {
	case 1:
		rc.out = resp.AppendSimple(rc.out, "PONG")
	case 2:
		rc.out = resp.AppendBulk(rc.out, args[1])
	default:
		rc.arity(args[0])
	}
}

// quit answers OK and closes the connection.
func (rc *respConn) quit([][]byte) {
	rc.out = resp.AppendSimple(rc.out, "OK")
	rc.closed = true
}

// selectDB answers SELECT index: one database, as a Redis configured with
// "databases 1".
func (rc *respConn) selectDB(args [][]byte) {
	if v, ok := parseInt(args[1], 64); !ok {
		rc.out = resp.AppendError(rc.out, "ERR value is not an integer or out of range")
	} else if v != 0 {
		rc.out = resp.AppendError(rc.out, "ERR DB index is out of range")
	} else {
		rc.out = resp.AppendSimple(rc.out, "OK")
	}
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
