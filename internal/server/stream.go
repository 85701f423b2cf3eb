package server

import (
	"errors"
	mrand "math/rand/v2"
	"net"
	"os"
	"time"

	"github.com/sluicehq/sluice/internal/engine"
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
	closed bool // close after writing out
	// leases are the concurrency leases taken on this connection and not
	// given back: given back when it closes (leases.go)
	leases []heldLease
	// ids draws the ids of the leases taken on this connection: nil until
	// the first (leases.go)
	ids *mrand.ChaCha8
	// peer is the connection's peer, who may release its leases (leases.go)
	peer peer
	// leasedUntil is when the latest lease taken on this connection
	// expires: while it holds leases, it does not idle out before then
	leasedUntil time.Time
	now         int64 // the server clock, read once per batch
	// started is when the first byte of the partial request at the front of
	// in arrived (or, once a batch was handled, when the read that left it
	// there did)
	started time.Time
	n       connCounters // statistics of the batch being handled
	// batchFrames is how many requests the last batch answered (frames of
	// the native protocol, commands of RESP)
	batchFrames int64
	// more is set by a handler that stopped at maxPending with complete
	// requests left in in: they are handled after out is written, before
	// anything more is read.
	more      bool
	accounted int // bytes of buffers counted in the server's buffered_bytes
	// blocking is the engine.Time.Blocking of the connection's requests
	// (st.lockWait, set by begin), and handOff, if set, what an event loop
	// does when one of them is about to wait for a lock: it hands its other
	// connections over to a new goroutine.
	blocking, handOff func()
	// clock is the host's clock for the batch being handled (wall): read
	// once, when a request first needs it, and again after a request of the
	// batch waited (for a lock, on Redis); zero until read.
	clock time.Time
}

// serve runs the connection until the client leaves, breaks the protocol,
// idles out, or the server shuts down. handle answers the complete requests
// at the front of st.in, appending to st.out, and leaves the rest (a
// partial request) at the front of st.in, growing it if needed.
func (st *stream) serve(handle func()) {
	st.begin()
	st.run(handle)
}

// run is serve on a connection that has its buffers already (serve).
func (st *stream) run(handle func()) {
	defer st.c.Close()
	defer func() { st.s.stats.buffered.Add(-int64(st.accounted)); st.accounted = 0 }()
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
			st.c.SetReadDeadline(st.idleDeadline(time.Now()))
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

// begin gives a new connection its buffers.
func (st *stream) begin() {
	st.blocking = st.lockWait
	st.in = make([]byte, 0, initialBuffer)
	st.out = make([]byte, 0, initialBuffer)
	st.account()
}

// handleBatch answers the complete requests at the front of st.in, up to
// maxPending bytes of answers.
func (st *stream) handleBatch(handle func()) {
	// The requests of one batch are handled at one instant: reading the
	// clock costs about as much as a decision.
	st.now = st.s.now()
	st.clock = time.Time{} // read when a request needs it (wall)
	before := len(st.in)
	handle()
	if len(st.in) > 0 && len(st.in) < before && !st.more {
		// Requests were answered and a new one has begun: its time runs
		// from this batch.
		st.started = time.Now()
	}
	st.batchFrames = st.n.frames
	if st.batchFrames == 0 {
		st.batchFrames = st.n.ops // RESP counts commands only
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
	st.written()
	return err == nil && !st.closed
}

// written empties out once it has been written, replacing a large buffer
// with a new one of the initial size.
func (st *stream) written() {
	if cap(st.out) > keepBuffer {
		st.out = make([]byte, 0, initialBuffer)
		st.account()
	} else {
		st.out = st.out[:0]
	}
}

// waitUntil is the lock wait of a request whose client stops waiting at
// deadline (Unix ns, the host's clock): Config.LockWait, or until the
// deadline if that comes first (at least a moment: a lock about to be
// freed is still taken), counted from the batch's clock (wall): only such
// requests read it, once per batch.
func (st *stream) waitUntil(deadline int64) time.Duration {
	return min(st.s.cfg.LockWait, max(time.Duration(deadline-st.wall().UnixNano()), time.Nanosecond))
}

// wall returns the host's clock for the request being handled: the time
// the batch was handled from, read once for its requests (a decision
// costs about what a clock read does), until one of them waits
// (leaveLoop). A request is then decided as of a moment at most its
// batch's handling (microseconds) before its own; after a wait, as of the
// wait's end.
func (st *stream) wall() time.Time {
	if st.clock.IsZero() {
		st.clock = time.Now()
	}
	return st.clock
}

// lockWait is called when a request of the connection is about to wait for
// a lock another holder keeps (past a short spin): it counts the wait
// (lock_waits), and an event loop hands itself over.
func (st *stream) lockWait() {
	st.s.stats.lockWaits.Add(1)
	st.leaveLoop()
}

// leaveLoop is called, on the goroutine that handles the connection's
// batch, before a request of it waits (on Redis, or for a lock): if an event
// loop serves the connection, the loop is handed over to a new goroutine
// and this one answers the rest of the batch (loop.handOff). It does
// nothing on a goroutine of the connection's own, and for the later
// requests of a batch that has left its loop.
func (st *stream) leaveLoop() {
	st.clock = time.Time{} // the batch's later requests are decided later
	if st.handOff != nil {
		st.handOff()
	}
}

// at is the Time of a request decided at the server clock now, with the
// server's lock wait and the connection's way of waiting.
func (st *stream) at(now int64) engine.Time {
	return engine.Time{Now: now, At: now, Wait: st.s.cfg.LockWait, Blocking: st.blocking}
}

// limitCache remembers the last limit a connection used: clients send the
// same limit again and again, and validating it costs more than comparing
// its parameters. K is the limit as the connection's protocol carries it.
type limitCache[K comparable] struct {
	key K
	l   engine.Limit
	ok  bool
}

// get returns the validated engine limit for k, building it with build only
// when k differs from the connection's previous limit.
func (lc *limitCache[K]) get(k K, build func(K) (engine.Limit, error)) (*engine.Limit, error) {
	if !lc.ok || lc.key != k {
		l, err := build(k)
		if err != nil {
			return nil, err
		}
		lc.key, lc.l, lc.ok = k, l, true
	}
	return &lc.l, nil
}
