package server

import (
	"errors"
	"net"
	"os"
	"time"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/proto"
)

const (
	initialBuffer = 64 << 10 // read and write buffer of a new connection
	keepBuffer    = 256 << 10
)

// conn is one client connection. Its goroutine reads every complete frame
// in its buffer, answers them in order into one output buffer, and writes
// that once: pipelined requests cost one read and one write per batch.
type conn struct {
	s   *server
	c   *net.UnixConn
	in  []byte // bytes read and not yet handled: at most one partial frame after handling
	out []byte

	// scratch reused across operations, so serving allocates nothing
	op     proto.Op
	lim    limitCache
	multi  multiScratch
	closed bool // close after writing out

	now int64        // the server clock, read once per batch of frames
	n   connCounters // statistics of the batch being handled

	frameStart int // where the response frame being built starts in out
	opsLeft    int // operations of the frame still to answer after this one
}

// maxResult bounds the size of any result but SCAN's: an error with the
// longest message (MULTI's, STATS' and HELLO's are smaller).
const maxResult = 4 + proto.MaxMessageLen

// room is how many bytes a SCAN result may add to the response frame being
// built in b: a response obeys proto.MaxFrameLen like a request, with room
// kept for the results of the frame's later operations.
func (c *conn) room(b []byte) int {
	return proto.MaxFrameLen + 4 - (len(b) - c.frameStart) - (c.opsLeft+1)*maxResult
}

// serve runs the connection until the client leaves, breaks the protocol,
// idles out, or the server shuts down.
func (c *conn) serve() {
	defer c.c.Close()
	c.in = make([]byte, 0, initialBuffer)
	c.out = make([]byte, 0, initialBuffer)
	for !c.closed {
		if c.s.draining.Load() && len(c.in) == 0 {
			return
		}
		// An idle connection may wait IdleTimeout for its next frame; a
		// frame that has started must arrive within FrameTimeout.
		wait := c.s.cfg.IdleTimeout
		if len(c.in) > 0 {
			wait = c.s.cfg.FrameTimeout
		}
		c.c.SetReadDeadline(time.Now().Add(wait))
		if c.s.draining.Load() {
			c.c.SetReadDeadline(time.Now()) // shutdown began: take only what has arrived
		}
		n, err := c.c.Read(c.in[len(c.in):cap(c.in)])
		c.in = c.in[:len(c.in)+n]
		if n > 0 {
			c.handle()
			if !c.flush() {
				return
			}
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && len(c.in) > 0 && !c.s.draining.Load() {
				c.s.stats.timeouts.Add(1)
			}
			return
		}
	}
}

// handle answers every complete frame in c.in and keeps the remainder (a
// partial frame) at the front of the buffer, growing the buffer if that
// frame will not fit.
//
// The frames of one read are handled at one instant: the server clock is
// read once for all of them (reading it costs about as much as a decision).
func (c *conn) handle() {
	c.now = c.s.now()
	defer c.s.stats.add(&c.n)
	rest := c.in
	for !c.closed {
		frame, r, h, err := proto.SplitFrame(rest)
		if err != nil {
			c.frameError(h.ID, err)
			return
		}
		if frame == nil {
			break
		}
		c.frame(frame, h)
		rest = r
	}
	n := copy(c.in, rest)
	c.in = c.in[:n]
	if n == cap(c.in) || (n >= proto.HeaderLen && headerLen(c.in) > cap(c.in)) {
		grown := make([]byte, n, max(2*cap(c.in), headerLen(c.in)))
		copy(grown, c.in)
		c.in = grown
	} else if n == 0 && cap(c.in) > keepBuffer {
		c.in = make([]byte, 0, initialBuffer)
	}
}

// headerLen is the full size of the frame whose header starts b: SplitFrame
// has already checked it against proto.MaxFrameLen.
func headerLen(b []byte) int {
	h, err := proto.ParseHeader(b)
	if err != nil {
		return 0
	}
	return int(h.Length) + 4
}

// flush writes the answers, with a deadline so that a client that never
// reads cannot hold the connection. It reports whether the connection is
// still usable.
func (c *conn) flush() bool {
	if len(c.out) == 0 {
		return !c.closed
	}
	c.c.SetWriteDeadline(time.Now().Add(c.s.cfg.WriteTimeout))
	_, err := c.c.Write(c.out)
	if cap(c.out) > keepBuffer {
		c.out = make([]byte, 0, initialBuffer)
	} else {
		c.out = c.out[:0]
	}
	return err == nil && !c.closed
}

// frameError answers a frame that cannot be split or parsed with one error
// result and closes the connection: its byte stream cannot be trusted.
func (c *conn) frameError(id uint32, err error) {
	c.n.malformed++
	b, start := proto.BeginFrame(c.out, proto.KindResponse, id)
	b = proto.AppendError(b, 0, proto.StatusOf(err), err.Error())
	c.out = proto.EndFrame(b, start, 1)
	c.closed = true
}

// frame answers one request frame: one result per operation, in order. An
// operation that cannot be decoded ends the frame (the rest cannot be
// located): it and every later one are answered with its error, and the
// connection closes after the answer is written.
func (c *conn) frame(frame []byte, h proto.Header) {
	c.n.frames++
	if h.Kind != proto.KindRequest {
		c.frameError(h.ID, errNotRequest)
		return
	}
	b, start := proto.BeginFrame(c.out, proto.KindResponse, h.ID)
	c.frameStart = start
	body := frame[proto.HeaderLen:]
	for i := 0; i < int(h.Count); i++ {
		c.opsLeft = int(h.Count) - i - 1
		rest, err := proto.DecodeOp(body, &c.op)
		if err != nil {
			c.n.malformed++
			code := proto.Opcode(0)
			if len(body) > 0 {
				code = proto.Opcode(body[0])
			}
			for ; i < int(h.Count); i++ {
				b = proto.AppendError(b, code, proto.StatusOf(err), err.Error())
			}
			c.closed = true
			break
		}
		b = c.s.do(b, &c.op, c)
		body = rest
	}
	if len(body) != 0 && !c.closed {
		c.n.malformed++
		c.closed = true // bytes after the last operation: the framing is off
	}
	c.out = proto.EndFrame(b, start, int(h.Count))
}

// limitCache remembers the last limit a connection used: clients usually
// send the same limit again and again, and validating it costs more than
// comparing 25 bytes.
type limitCache struct {
	wire proto.Limit
	l    engine.Limit
	ok   bool
}

// multiScratch holds a MULTI's items and decisions between requests.
type multiScratch struct {
	items  [proto.MaxMulti]engine.Item
	limits [proto.MaxMulti]engine.Limit
	ds     []bucket.Decision
	wire   [proto.MaxMulti]proto.Decision
}
