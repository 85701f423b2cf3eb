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
	// maxPending bounds the answers a connection builds before writing
	// them: once this many bytes wait, the rest of what was read is left
	// unread until they are written. With the read buffer (at most one
	// request of proto.MaxFrameLen, or a RESP command) and one request's
	// answers past the bound, a connection holds at most about 3 MiB,
	// whatever its client sends and however slowly it reads.
	maxPending = 1 << 20
)

// stream is the loop every connection runs, whatever its protocol: read
// what has arrived, answer every complete request in it into one output
// buffer, write that once. Pipelined requests cost one read and one write
// per batch.
type stream struct {
	s      *server
	c      net.Conn
	in     []byte // bytes read and not yet handled: at most one partial request
	out    []byte
	closed bool  // close after writing out
	now    int64 // the server clock, read once per batch
	// started is when the first byte of the partial request at the front of
	// in arrived (or, once a batch was handled, when the read that left it
	// there did)
	started time.Time
	n       connCounters // statistics of the batch being handled
	// more is set by a handler that stopped at maxPending with complete
	// requests left in in: they are handled after out is written, before
	// anything more is read.
	more      bool
	accounted int // bytes of buffers counted in the server's buffered_bytes
}

// serve runs the connection until the client leaves, breaks the protocol,
// idles out, or the server shuts down. handle answers the complete requests
// at the front of st.in, appending to st.out, and leaves the rest (a
// partial request) at the front of st.in, growing it if needed.
func (st *stream) serve(handle func()) {
	defer st.c.Close()
	st.in = make([]byte, 0, initialBuffer)
	st.out = make([]byte, 0, initialBuffer)
	st.account()
	defer st.s.stats.buffered.Add(-int64(st.accounted))
	for !st.closed {
		if st.more {
			// Answers were written; handle the requests left behind.
			st.more = false
			st.handleBatch(handle)
			if !st.flush() {
				return
			}
			continue
		}
		if st.s.draining.Load() && len(st.in) == 0 {
			return
		}
		// An idle connection may wait IdleTimeout for its next request; a
		// request that has started must be complete FrameTimeout after its
		// first byte came, however slowly the rest trickles in.
		if len(st.in) == 0 {
			st.c.SetReadDeadline(time.Now().Add(st.s.cfg.IdleTimeout))
		} else {
			st.c.SetReadDeadline(st.started.Add(st.s.cfg.FrameTimeout))
		}
		if st.s.draining.Load() {
			st.c.SetReadDeadline(time.Now()) // shutdown began: take only what has arrived
		}
		n, err := st.c.Read(st.in[len(st.in):cap(st.in)])
		if n > 0 && len(st.in) == 0 {
			st.started = time.Now()
		}
		st.in = st.in[:len(st.in)+n]
		if n > 0 {
			st.handleBatch(handle)
			if !st.flush() {
				return
			}
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && len(st.in) > 0 && !st.s.draining.Load() {
				st.s.stats.timeouts.Add(1)
			}
			return
		}
	}
}

// handleBatch answers the complete requests at the front of st.in, up to
// maxPending bytes of answers.
func (st *stream) handleBatch(handle func()) {
	// The requests of one batch are handled at one instant: reading the
	// clock costs about as much as a decision.
	st.now = st.s.now()
	before := len(st.in)
	handle()
	if len(st.in) > 0 && len(st.in) < before && !st.more {
		// Requests were answered and a new one has begun: its time runs
		// from this batch.
		st.started = time.Now()
	}
	st.s.stats.add(&st.n)
	st.account()
}

// account brings the server's count of buffered bytes up to date with this
// connection's buffers.
func (st *stream) account() {
	if n := cap(st.in) + cap(st.out); n != st.accounted {
		st.s.stats.buffered.Add(int64(n - st.accounted))
		st.accounted = n
	}
}

// keep moves the unhandled rest of st.in to its front, growing the buffer
// to hold need bytes (at least one more than it holds when it is full), or
// shrinking a large one that is empty.
func (st *stream) keep(rest []byte, need int) {
	n := copy(st.in, rest)
	st.in = st.in[:n]
	if n == cap(st.in) || need > cap(st.in) {
		grown := make([]byte, n, max(2*cap(st.in), need))
		copy(grown, st.in)
		st.in = grown
	} else if n == 0 && cap(st.in) > keepBuffer {
		st.in = make([]byte, 0, initialBuffer)
	}
}

// flush writes the answers, with a deadline so that a client that never
// reads cannot hold the connection. It reports whether the connection is
// still usable.
func (st *stream) flush() bool {
	if len(st.out) == 0 {
		return !st.closed
	}
	st.c.SetWriteDeadline(time.Now().Add(st.s.cfg.WriteTimeout))
	_, err := st.c.Write(st.out)
	if cap(st.out) > keepBuffer {
		st.out = make([]byte, 0, initialBuffer)
		st.account()
	} else {
		st.out = st.out[:0]
	}
	return err == nil && !st.closed
}

// conn is a connection speaking the native protocol.
type conn struct {
	stream

	// scratch reused across operations, so serving allocates nothing
	op    proto.Op
	lim   limitCache
	multi multiScratch

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

// handle answers the complete frames at the front of c.in, until
// maxPending bytes of answers wait.
func (c *conn) handle() {
	rest := c.in
	for !c.closed {
		if len(c.out) >= maxPending {
			c.more = true
			break
		}
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
	need := 0
	if len(rest) >= proto.HeaderLen {
		if h, err := proto.ParseHeader(rest); err == nil {
			need = int(h.Length) + 4 // checked against MaxFrameLen by SplitFrame
		}
	}
	c.keep(rest, need)
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

// limitCache remembers the last limit a connection used, on either
// protocol: clients send the same limit again and again, and validating it
// costs more than comparing its parameters.
type limitCache struct {
	key bucket.Limit
	l   engine.Limit
	ok  bool
}

// multiScratch holds a MULTI's items and decisions between requests.
type multiScratch struct {
	items  [proto.MaxMulti]engine.Item
	limits [proto.MaxMulti]engine.Limit
	ds     []bucket.Decision
	wire   [proto.MaxMulti]proto.Decision
}
