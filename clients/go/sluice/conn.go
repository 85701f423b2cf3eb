package sluice

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/proto"
)

const (
	readBuffer   = 64 << 10  // a connection's read buffer
	keepBuffer   = 256 << 10 // buffers that grew past this are not kept
	writeTimeout = 10 * time.Second
)

// conn is one connection to the sidecar, shared by every caller.
//
// Two roles move the bytes: writing (taking everything queued, giving each
// frame an id, writing it in one write) and reading (reading responses,
// which come in request order, and completing the calls in FIFO order
// after checking the echoed id). A lone caller, finding nothing queued or
// in flight and nobody writing or reading, takes both roles and does its
// round trip itself: no other goroutine needs to be scheduled, which is
// most of a round trip's cost when client and sidecar are separate
// processes. Calls that overlap are queued instead and the writer and
// reader goroutines take the roles: the writer batches everything queued
// into one write. The first error fails the connection and every call on
// it.
type conn struct {
	cl *Client
	nc net.Conn

	wake     chan struct{} // the writer goroutine takes the writing role; capacity 1
	readWake chan struct{} // the reader goroutine takes the reading role; capacity 1
	done     chan struct{} // closed when the connection fails
	failed   atomic.Bool   // set when the connection fails
	answered atomic.Bool   // a valid response arrived
	wg       sync.WaitGroup

	mu       sync.Mutex
	queued   []*call // waiting for the writer
	spare    []*call // the writer's other queue, swapped with queued
	inflight fifo    // written, waiting for their responses in this order
	nextID   uint32
	writing  bool   // someone holds the writing role
	reading  bool   // someone holds the reading role
	directs  uint64 // direct round trips ended: a late cancellation checks it
	err      error  // why the connection failed; set once

	wbuf []byte // the writing role's batch

	// The reading role's buffer: rbuf[r:w] is read and not yet handled.
	rbuf []byte
	r, w int
	res  proto.Result // scratch for frame-level errors
}

func newConn(cl *Client, nc net.Conn) *conn {
	cn := &conn{cl: cl, nc: nc, wake: make(chan struct{}, 1), readWake: make(chan struct{}, 1),
		done: make(chan struct{}), rbuf: make([]byte, readBuffer)}
	cn.wg.Add(2)
	go cn.writeLoop()
	go cn.readLoop()
	return cn
}

// enqueue queues calls (nil entries skipped) to be written together. It
// fails, queueing none, if the connection has failed. If direct is set
// and the conditions for a direct round trip hold (nothing else queued or
// in flight, both roles free), it gives the caller both roles and the
// calls their ids and returns true: the caller must then call
// roundTripDirect with the last of them.
func (cn *conn) enqueue(direct bool, calls ...*call) (bool, error) {
	cn.mu.Lock()
	if cn.err != nil {
		err := cn.err
		cn.mu.Unlock()
		return false, err
	}
	added := 0
	for _, cl := range calls {
		if cl != nil {
			cn.queued = append(cn.queued, cl)
			added++
		}
	}
	switch {
	case added == 0:
		cn.mu.Unlock()
		return false, nil
	case cn.writing:
		cn.mu.Unlock() // the writer takes it
		return false, nil
	case direct && !cn.reading && len(cn.queued) == added && cn.inflight.empty():
		cn.writing, cn.reading = true, true
		cn.wbuf = cn.takeLocked(cn.wbuf[:0])
		cn.mu.Unlock()
		return true, nil
	}
	cn.writing = true
	cn.mu.Unlock()
	cn.wake <- struct{}{} // never blocks: only the role's taker sends
	return false, nil
}

// takeLocked gives every queued call an id, moves it in flight and appends
// their frames to b. The caller holds mu and the writing role.
func (cn *conn) takeLocked(b []byte) []byte {
	batch := cn.queued
	cn.queued = cn.spare[:0]
	for i, cl := range batch {
		batch[i] = nil
		if cl.state.Load() == abandoned {
			putCall(cl) // its caller left before it was sent
			continue
		}
		cn.nextID++
		cl.id = cn.nextID
		binary.LittleEndian.PutUint32(cl.req[8:12], cl.id) // the header's id field
		cn.inflight.push(cl)
		// Copied under the lock: once the call is in flight, a failing
		// connection may hand it back to the pool.
		b = append(b, cl.req...)
	}
	cn.spare = batch[:0]
	return b
}

// write writes b; on failure it fails the connection and returns false.
// The caller holds the writing role.
func (cn *conn) write(b []byte) bool {
	cn.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := cn.nc.Write(b); err != nil {
		cn.fail(fmt.Errorf("%w: write: %w", ErrUnavailable, err))
		return false
	}
	return true
}

// keepWbuf keeps the written batch's buffer for the next one, unless it
// grew too large to keep. The caller holds the writing role.
func (cn *conn) keepWbuf(b []byte) {
	if cap(b) > keepBuffer {
		b = nil
	}
	cn.wbuf = b[:0]
}

// releaseWriting gives up the writing role, to the writer goroutine if
// calls queued meanwhile.
func (cn *conn) releaseWriting() {
	cn.mu.Lock()
	more := len(cn.queued) > 0 && cn.err == nil
	cn.writing = more
	cn.mu.Unlock()
	if more {
		cn.wake <- struct{}{}
	}
}

// releaseReading ends a direct round trip's reading: it gives up the
// reading role, to the reader goroutine if answers are still due, and
// counts the round trip ended, so that its cancellation, should it run
// late, leaves the reads that follow alone.
func (cn *conn) releaseReading() {
	cn.mu.Lock()
	cn.directs++
	more := (!cn.inflight.empty() || cn.r < cn.w) && cn.err == nil
	cn.reading = more
	cn.mu.Unlock()
	if more {
		cn.readWake <- struct{}{}
	}
}

// roundTripDirect writes what enqueue took, cl last, and reads until cl's
// answer arrives (the answers before it arrive first), the context ends
// or timeout passes (0: no limit). The caller holds both roles; it gives
// them up before returning. The result is cl's wait's.
func (cn *conn) roundTripDirect(ctx context.Context, cl *call, timeout time.Duration) error {
	ok := cn.write(cn.wbuf)
	cn.keepWbuf(cn.wbuf) // still the writing role's: safe without the lock
	if !ok {
		return cl.wait(ctx, 0) // the connection failed, and cl with it
	}
	cn.releaseWriting()

	deadline, hasDeadline := ctx.Deadline()
	ctxDeadline := hasDeadline
	if !hasDeadline && timeout > 0 {
		deadline, hasDeadline = time.Now().Add(timeout), true
	}
	if hasDeadline {
		cn.nc.SetReadDeadline(deadline)
	} else {
		cn.nc.SetReadDeadline(time.Time{})
	}
	if ctx.Done() != nil {
		// Cancellation interrupts the read, unless this round trip is
		// already over when it comes.
		cn.mu.Lock()
		gen := cn.directs
		cn.mu.Unlock()
		stop := context.AfterFunc(ctx, func() {
			cn.mu.Lock()
			if cn.directs == gen && cn.reading {
				cn.nc.SetReadDeadline(time.Now())
			}
			cn.mu.Unlock()
		})
		defer stop()
	}
	for cl.state.Load() == waiting {
		err := cn.readSome()
		if err == nil {
			continue
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			cn.fail(err)
			return cl.wait(ctx, 0)
		}
		// Out of time: the answer will come on a connection that is still
		// good; the reader goroutine takes it and discards it.
		cn.releaseReading()
		switch {
		case ctx.Err() != nil:
			err = ctx.Err()
		case ctxDeadline: // the read's deadline was the context's, whose own timer may lag
			err = context.DeadlineExceeded
		default:
			err = fmt.Errorf("%w: no answer to %v within %v: %w", ErrUnavailable, cl.op, timeout, context.DeadlineExceeded)
		}
		if cl.state.CompareAndSwap(waiting, abandoned) {
			return err // whoever completes it puts it back
		}
		<-cl.done // the answer came as we gave up: take it after all
		return cl.finish()
	}
	cn.releaseReading()
	<-cl.done
	return cl.finish()
}

// writeLoop takes the writing role when a caller hands it over and writes
// until nothing is queued, until the connection fails.
func (cn *conn) writeLoop() {
	defer cn.wg.Done()
	for {
		select {
		case <-cn.wake:
		case <-cn.done:
			return
		}
		// Let the callers that are ready to run queue their requests first:
		// the reader has just woken them, and they would otherwise be
		// written one frame per write.
		runtime.Gosched()
		for {
			cn.mu.Lock()
			if cn.err != nil {
				cn.mu.Unlock()
				return
			}
			if len(cn.queued) == 0 {
				cn.writing = false
				cn.mu.Unlock()
				break
			}
			b := cn.takeLocked(cn.wbuf[:0])
			startReader := !cn.reading && !cn.inflight.empty()
			if startReader {
				cn.reading = true
			}
			cn.mu.Unlock()
			if startReader {
				cn.readWake <- struct{}{} // never blocks: only the role's taker sends
			}
			if len(b) > 0 && !cn.write(b) {
				return
			}
			cn.keepWbuf(b)
		}
	}
}

// readLoop takes the reading role when it is handed over and reads until
// no answer is due, until the connection fails.
func (cn *conn) readLoop() {
	defer cn.wg.Done()
	for {
		select {
		case <-cn.readWake:
		case <-cn.done:
			return
		}
		cn.nc.SetReadDeadline(time.Time{}) // a direct round trip's is not ours
		for {
			cn.mu.Lock()
			if cn.err != nil {
				cn.mu.Unlock()
				return
			}
			if cn.inflight.empty() && cn.r == cn.w {
				cn.reading = false
				cn.mu.Unlock()
				break
			}
			cn.mu.Unlock()
			if err := cn.readSome(); err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					// A direct round trip's cancellation that ran late.
					cn.nc.SetReadDeadline(time.Time{})
					continue
				}
				cn.fail(err)
				return
			}
		}
	}
}

// readSome handles every complete frame in the buffer or, if there is
// none, reads once. An error it returns (other than a read deadline's)
// must fail the connection. The caller holds the reading role.
func (cn *conn) readSome() error {
	handled := false
	for {
		frame, _, h, err := proto.SplitFrame(cn.rbuf[cn.r:cn.w])
		if err != nil {
			return fmt.Errorf("%w: bad response frame: %w", ErrUnavailable, err)
		}
		if frame == nil {
			break
		}
		cn.r += len(frame)
		if err := cn.response(frame, h, &cn.res); err != nil {
			return err
		}
		handled = true
	}
	if cn.r == cn.w {
		cn.r, cn.w = 0, 0
	}
	if handled {
		return nil // let the caller look at what completed
	}
	// Need more bytes: move the partial frame to the front, make room for
	// all of it (its length is checked against MaxFrameLen), and read.
	cn.w = copy(cn.rbuf, cn.rbuf[cn.r:cn.w])
	cn.r = 0
	need := proto.HeaderLen
	if cn.w >= proto.HeaderLen {
		if h, err := proto.ParseHeader(cn.rbuf[:cn.w]); err == nil {
			need = 4 + int(h.Length)
		}
	}
	switch {
	case need > len(cn.rbuf):
		grown := make([]byte, need)
		copy(grown, cn.rbuf[:cn.w])
		cn.rbuf = grown
	case cn.w == 0 && len(cn.rbuf) > keepBuffer: // a large frame is done
		cn.rbuf = make([]byte, readBuffer)
	}
	n, err := cn.nc.Read(cn.rbuf[cn.w:])
	cn.w += n
	if err != nil && n == 0 {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
		if errors.Is(err, io.EOF) {
			err = errors.New("connection closed by the sidecar")
		}
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil
}

// response handles one response frame: it completes the oldest call in
// flight, or returns the error that fails the connection.
func (cn *conn) response(frame []byte, h proto.Header, scratch *proto.Result) error {
	body := frame[proto.HeaderLen:]
	if h.Kind != proto.KindResponse {
		return fmt.Errorf("%w: the sidecar sent a %v frame: %w", ErrUnavailable, h.Kind, ErrMalformed)
	}
	if len(body) > 0 && body[0] == 0 {
		// A frame-level error (Busy, Denied, BadVersion, ...): the sidecar
		// closes the connection after it; so does the client.
		if _, err := proto.DecodeResult(body, scratch); err != nil {
			return fmt.Errorf("%w: bad frame-level error: %w", ErrUnavailable, err)
		}
		st := scratch.Status
		if st == proto.StatusOK {
			st = proto.StatusMalformed
		}
		return fmt.Errorf("%w: %w", ErrUnavailable, statusError(0, st, scratch.Message))
	}
	cn.mu.Lock()
	cl := cn.inflight.pop()
	cn.mu.Unlock()
	if cl == nil {
		return fmt.Errorf("%w: unsolicited response frame (id %d): %w", ErrUnavailable, h.ID, ErrMalformed)
	}
	err := cn.check(cl, frame, h)
	cl.complete(err)
	return err
}

// check copies the response frame into cl and decodes its result there,
// checking that it answers cl's request.
func (cn *conn) check(cl *call, frame []byte, h proto.Header) error {
	if h.ID != cl.id || h.Count != 1 {
		return fmt.Errorf("%w: response id %d with %d results, want id %d with 1: %w",
			ErrUnavailable, h.ID, h.Count, cl.id, ErrMalformed)
	}
	cl.resp = append(cl.resp[:0], frame...)
	rest, err := proto.DecodeResult(cl.resp[proto.HeaderLen:], &cl.res)
	switch {
	case err != nil:
		return fmt.Errorf("%w: bad %v result: %w", ErrUnavailable, cl.op, err)
	case len(rest) != 0:
		return fmt.Errorf("%w: %d bytes after the %v result: %w", ErrUnavailable, len(rest), cl.op, ErrMalformed)
	case cl.res.Status == proto.StatusOK && cl.res.Code != cl.op:
		return fmt.Errorf("%w: a %v result answers a %v request: %w", ErrUnavailable, cl.res.Code, cl.op, ErrMalformed)
	}
	cn.answered.Store(true)
	return nil
}

// fail marks the connection failed with err (once), closes it, fails every
// call queued or in flight, and tells the client.
func (cn *conn) fail(err error) {
	cn.mu.Lock()
	if cn.err != nil {
		cn.mu.Unlock()
		return
	}
	cn.err = err
	cn.failed.Store(true)
	queued := cn.queued
	cn.queued = nil
	var inflight []*call
	for cl := cn.inflight.pop(); cl != nil; cl = cn.inflight.pop() {
		inflight = append(inflight, cl)
	}
	cn.mu.Unlock()
	close(cn.done)
	cn.nc.Close()
	for _, cl := range inflight {
		cl.complete(err)
	}
	for _, cl := range queued {
		cl.complete(err)
	}
	cn.cl.dropped(cn)
}

// wait waits for the connection's goroutines to exit after it failed.
func (cn *conn) wait() { cn.wg.Wait() }

// fifo is a queue of calls.
type fifo struct {
	q    []*call
	head int
}

func (f *fifo) push(cl *call) {
	if f.head > 64 && f.head > len(f.q)/2 { // reclaim the popped front
		n := copy(f.q, f.q[f.head:])
		clear(f.q[n:])
		f.q, f.head = f.q[:n], 0
	}
	f.q = append(f.q, cl)
}

func (f *fifo) empty() bool { return f.head == len(f.q) }

// pop returns the oldest call, or nil if there is none.
func (f *fifo) pop() *call {
	if f.head == len(f.q) {
		return nil
	}
	cl := f.q[f.head]
	f.q[f.head] = nil
	f.head++
	if f.head == len(f.q) {
		f.q, f.head = f.q[:0], 0
	}
	return cl
}

// The states of a call.
const (
	waiting   = iota // its caller waits for it
	completed        // done was signalled; the caller takes it back
	abandoned        // its caller left (context or timeout); whoever finishes it puts it back
)

// call is one request and, once completed, its response. Calls are pooled:
// a caller takes one, encodes its frame into req, hands it to the
// connection and waits on done. Exactly one party owns a call at a time:
// the caller until it queues it, then the connection until it completes
// it, then the caller again, unless the caller abandoned it, in which case
// the party that would have completed it puts it back in the pool.
type call struct {
	req   []byte       // the request frame; the writer sets its id
	op    proto.Opcode // the request's operation, which the result must echo
	id    uint32       // the frame id, set by the writer
	key   []byte       // scratch for key bytes
	items [proto.MaxMulti]proto.MultiItem

	state atomic.Int32
	done  chan struct{} // capacity 1: signalled once when completed
	timer *time.Timer
	err   error
	resp  []byte       // the response frame
	res   proto.Result // its decoded result; its slices alias resp
}

var callPool = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &call{done: make(chan struct{}, 1), timer: t}
}}

// getCall returns a call ready to be filled, its req an empty buffer.
func getCall(op proto.Opcode) *call {
	cl := callPool.Get().(*call)
	cl.state.Store(waiting)
	cl.op, cl.err = op, nil
	return cl
}

// putCall puts cl back in the pool.
func putCall(cl *call) {
	if cap(cl.resp) > keepBuffer {
		cl.resp = nil
	}
	if cap(cl.key) > keepBuffer {
		cl.key = nil
	}
	for i := range cl.items {
		cl.items[i].Key = nil
	}
	cl.res.Message, cl.res.Entries, cl.res.Stats = nil, nil, nil
	callPool.Put(cl)
}

// complete finishes cl with err (nil: its result is in cl.res): it wakes
// its caller or, if the caller left, puts cl back in the pool.
func (cl *call) complete(err error) {
	cl.err = err
	if cl.state.CompareAndSwap(waiting, completed) {
		cl.done <- struct{}{}
		return
	}
	putCall(cl)
}

// wait waits until cl completes, ctx ends, or, if ctx has no deadline,
// timeout passes. On success cl is the caller's again, its result in
// cl.res; on error it is not.
func (cl *call) wait(ctx context.Context, timeout time.Duration) error {
	var expired <-chan time.Time
	if _, ok := ctx.Deadline(); !ok && timeout > 0 {
		cl.timer.Reset(timeout)
		expired = cl.timer.C
		defer cl.timer.Stop()
	}
	var err error
	select {
	case <-cl.done:
		return cl.finish()
	case <-ctx.Done():
		err = ctx.Err()
	case <-expired:
		err = fmt.Errorf("%w: no answer to %v within %v: %w", ErrUnavailable, cl.op, timeout, context.DeadlineExceeded)
	}
	if cl.state.CompareAndSwap(waiting, abandoned) {
		return err // whoever completes it puts it back
	}
	<-cl.done // the answer came as we gave up: take it after all
	return cl.finish()
}

// poll returns cl's outcome if it has completed, and otherwise abandons
// it and returns false.
func (cl *call) poll() (done bool, err error) {
	select {
	case <-cl.done:
		return true, cl.finish()
	default:
	}
	if cl.state.CompareAndSwap(waiting, abandoned) {
		return false, nil // whoever completes it puts it back
	}
	<-cl.done
	return true, cl.finish()
}

// finish returns the error of a completed call, putting the call back in
// the pool if there is one.
func (cl *call) finish() error {
	if err := cl.err; err != nil {
		putCall(cl)
		return err
	}
	return nil
}
