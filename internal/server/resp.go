package server

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/bucket"
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
	req    rlRequest // the rate-limit command being run
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
			c := lookupCommand(args[0])
			if rc.tx != nil && (c == nil || c.tx != txNow) {
				rc.queue(c, args)
				continue
			}
			rc.command(c, args)
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

// command runs one command, c (nil if Sluice has no such command): a
// rate-limit command parses its arguments and is decided; any other is
// checked against its arity and subcommands, then done.
func (rc *respConn) command(c *respCommand, args [][]byte) {
	if rc.s.rec != nil && rc.n.ops&sampleMask == 0 {
		defer rc.s.requestDone(time.Now())
	}
	if c == nil {
		rc.unknown(args)
		return
	}
	rc.last = c.name
	if c.parse != nil {
		req := &rc.req
		*req = rlRequest{}
		if msg := c.parse(rc, req, args); msg != "" {
			rc.out = resp.AppendError(rc.out, msg)
			return
		}
		rc.run(req)
		return
	}
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
	c.do(rc, args)
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
