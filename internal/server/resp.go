package server

import (
	"bytes"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/proto"
	"github.com/sluicehq/sluice/proto/resp"
)

// maxRESPBuffer bounds the read buffer of a Redis-protocol connection: the
// largest command resp.Parse accepts, with room for its framing.
const maxRESPBuffer = resp.MaxArgs*(resp.MaxBulkLen+16) + 32

// respConn is a connection speaking the Redis protocol: RESP2, or RESP3
// once the client said HELLO 3.
type respConn struct {
	stream
	args   [][]byte
	limits limitCache[bucket.Limit]
	id     int64 // CLIENT ID
	resp3  bool  // HELLO 3 was accepted: replies use RESP3's types
	born   time.Time
	name   string    // CLIENT SETNAME
	lib    [2]string // CLIENT SETINFO LIB-NAME and LIB-VER
	last   string    // the last command's name, lower case, for CLIENT INFO
	tx     *respTx   // the transaction being queued, nil outside MULTI
	txs    respTx    // tx's storage, kept between transactions
}

// respIDs numbers the Redis-protocol connections of the process, from 1.
var respIDs atomic.Int64

func openRESP(s *server, c net.Conn) (*stream, func()) {
	rc := &respConn{stream: stream{s: s, c: c}, args: make([][]byte, 0, resp.MaxArgs),
		id: respIDs.Add(1), born: time.Now()}
	return &rc.stream, rc.handle
}

// serveRESP runs a Redis-protocol connection on its own goroutine.
func serveRESP(s *server, c net.Conn) {
	st, handle := openRESP(s, c)
	st.serve(handle)
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
			rc.s.protocolError(metrics.RESP)
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
			if rc.tx != nil && !txImmediate(args[0]) {
				rc.queue(args)
				continue
			}
			rc.command(args)
		}
	}
	if !rc.more && len(rest) == cap(rc.in) && cap(rc.in) >= maxRESPBuffer {
		rc.n.malformed++
		rc.s.protocolError(metrics.RESP)
		rc.out = resp.AppendError(rc.out, "ERR Protocol error: request too large")
		rc.closed = true
		return
	}
	rc.keep(rest, 0)
}

// command runs one command.
func (rc *respConn) command(args [][]byte) {
	if rc.s.rec != nil && rc.n.ops&sampleMask == 0 {
		defer rc.s.requestDone(time.Now())
	}
	name := args[0]
	switch {
	case is(name, "rl.reduce"):
		rc.last = "rl.reduce"
		rc.rateLimit(args, "rl.reduce", false, false)
	case is(name, "rl.preduce"):
		rc.last = "rl.preduce"
		rc.rateLimit(args, "rl.preduce", true, false)
	case is(name, "rl.get"):
		rc.last = "rl.get"
		rc.rateLimit(args, "rl.get", false, true)
	case is(name, "rl.pget"):
		rc.last = "rl.pget"
		rc.rateLimit(args, "rl.pget", true, true)
	case is(name, "cl.throttle"):
		rc.last = "cl.throttle"
		rc.throttle(args)
	default:
		rc.other(args)
	}
}

// other runs the commands that are not rate limits.
func (rc *respConn) other(args [][]byte) {
	name := args[0]
	c := lookupCommand(name)
	if c == nil {
		rc.unknown(args)
		return
	}
	rc.last = c.name
	if msg := c.refusal(args); msg != "" {
		switch {
		case c.name == "exec":
			// Redis ends the transaction if there is one, saying why.
			rc.out = resp.AppendError(rc.out, "EXECABORT Transaction discarded because of: "+strings.TrimPrefix(msg, "ERR "))
			rc.tx = nil
		case rc.tx != nil:
			rc.out = resp.AppendError(rc.out, msg)
			rc.tx.abort = true // MULTI x, DISCARD x...: refused, as while queueing
		default:
			rc.out = resp.AppendError(rc.out, msg)
		}
		return
	}
	switch c.name {
	case "ping":
		switch len(args) {
		case 1:
			rc.out = resp.AppendSimple(rc.out, "PONG")
		case 2:
			rc.out = resp.AppendBulk(rc.out, args[1])
		default: // checked when it runs, as Redis does: PING a b is queued
			rc.arity(name)
		}
	case "echo":
		rc.out = resp.AppendBulk(rc.out, args[1])
	case "quit":
		rc.out = resp.AppendSimple(rc.out, "OK")
		rc.closed = true
	case "select":
		// One database, as a Redis configured with "databases 1".
		if v, ok := parseInt(args[1], 64); !ok {
			rc.out = resp.AppendError(rc.out, "ERR value is not an integer or out of range")
		} else if v != 0 {
			rc.out = resp.AppendError(rc.out, "ERR DB index is out of range")
		} else {
			rc.out = resp.AppendSimple(rc.out, "OK")
		}
	case "hello":
		rc.hello(args)
	case "auth":
		rc.auth(args)
	case "client":
		rc.client(args)
	case "config":
		rc.config(args)
	case "command":
		rc.commandInfo(args)
	case "info":
		rc.text(rc.s.info(args[1:], rc.at(rc.now)))
	case "dbsize":
		if n, err := rc.s.liveBuckets(rc.at(rc.now)); err != nil {
			rc.fail(err)
		} else {
			rc.out = resp.AppendInt(rc.out, n)
		}
	case "multi":
		rc.multi()
	case "exec":
		rc.exec()
	case "discard":
		rc.discard()
	case "watch":
		rc.watch()
	case "unwatch":
		rc.out = resp.AppendSimple(rc.out, "OK") // nothing is ever watched
	}
}

// null appends the protocol's null.
func (rc *respConn) null() {
	if rc.resp3 {
		rc.out = resp.AppendNull3(rc.out)
	} else {
		rc.out = resp.AppendNull(rc.out)
	}
}

// mapLen appends the header of a map of n pairs: a RESP3 map, or in RESP2
// a flat array of keys and values, as Redis sends it.
func (rc *respConn) mapLen(n int) {
	if rc.resp3 {
		rc.out = resp.AppendMap(rc.out, n)
	} else {
		rc.out = resp.AppendArray(rc.out, 2*n)
	}
}

// text appends a human-readable report (INFO, CLIENT INFO): a verbatim
// string in RESP3, a bulk string in RESP2.
func (rc *respConn) text(s string) {
	if rc.resp3 {
		rc.out = resp.AppendVerbatim(rc.out, "txt", s)
	} else {
		rc.out = resp.AppendBulkString(rc.out, s)
	}
}

// is reports whether a command or option name is s, ignoring case.
func is(b []byte, s string) bool { return len(b) == len(s) && bytes.EqualFold(b, []byte(s)) }

// arity answers a command with the wrong number of arguments.
func (rc *respConn) arity(name []byte) {
	rc.out = resp.AppendError(rc.out, fmt.Sprintf("ERR wrong number of arguments for '%s' command", strings.ToLower(printable(name))))
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

// info is INFO's report, in Redis's "# Section" / "field:value" form: the
// sections named in args (any case), or every one if none is named (or
// "default", "all", "everything"). An unknown section adds nothing.
func (s *server) info(args [][]byte, now engine.Time) string {
	want := func(section string) bool {
		if len(args) == 0 {
			return true
		}
		for _, a := range args {
			if is(a, section) || is(a, "default") || is(a, "all") || is(a, "everything") {
				return true
			}
		}
		return false
	}
	snap := s.snapshot(false)
	var b strings.Builder
	w := func(k string, v any) { fmt.Fprintf(&b, "%s:%v\r\n", k, v) }
	section := func(name string) bool {
		if !want(name) {
			return false
		}
		if b.Len() > 0 {
			b.WriteString("\r\n")
		}
		b.WriteString("# " + strings.ToUpper(name[:1]) + name[1:] + "\r\n")
		return true
	}
	if section("server") {
		w("redis_version", redisVersion)
		w("sluice_protocol_version", proto.Version)
		w("redis_mode", "standalone")
		w("process_id", pid)
	}
	for _, name := range []string{"clients", "memory", "stats"} {
		if section(name) {
			snap.Info(name, func(k string, v uint64) { w(k, v) })
		}
	}
	if section("keyspace") {
		// As DBSIZE; Redis lists no empty database (nor a count that gave
		// up waiting for a lock).
		if n, err := s.liveBuckets(now); err == nil && n > 0 {
			w("db0", "keys="+strconv.FormatInt(n, 10)+",expires=0,avg_ttl=0")
		}
	}
	return b.String()
}

// liveBuckets counts the buckets that hold information at t.Now: live and
// not yet back to their fresh state (what DBSIZE reports).
func (s *server) liveBuckets(t engine.Time) (int64, error) {
	n, err := s.engine.Live(t)
	return int64(n), err
}
