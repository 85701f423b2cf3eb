package sluice

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
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

// conn is one connection to the sidecar, shared by every caller. Callers
// queue calls (each holding one encoded request frame) and wait; the writer
// goroutine takes everything queued and writes it in one write, giving each
// frame an id; the reader goroutine reads the responses, which come in
// request order, and completes the calls in FIFO order after checking the
// echoed id. The first error fails the connection and every call on it.
type conn struct {
	cl *Client
	nc net.Conn

	wake     chan struct{} // a call was queued; capacity 1
	done     chan struct{} // closed when the connection fails
	failed   atomic.Bool   // set when the connection fails
	answered atomic.Bool   // a valid response arrived
	wg       sync.WaitGroup

	mu       sync.Mutex
	queued   []*call // waiting for the writer
	spare    []*call // the writer's other queue, swapped with queued
	inflight fifo    // written, waiting for their responses in this order
	nextID   uint32
	err      error // why the connection failed; set once

	wbuf []byte // the writer's batch
}

func newConn(cl *Client, nc net.Conn) *conn {
	cn := &conn{cl: cl, nc: nc, wake: make(chan struct{}, 1), done: make(chan struct{})}
	cn.wg.Add(2)
	go cn.writeLoop()
	go cn.readLoop()
	return cn
}

// enqueue hands cl to the writer. It fails if the connection has failed.
func (cn *conn) enqueue(cl *call) error {
	cn.mu.Lock()
	if cn.err != nil {
		err := cn.err
		cn.mu.Unlock()
		return err
	}
	cn.queued = append(cn.queued, cl)
	cn.mu.Unlock()
	select {
	case cn.wake <- struct{}{}:
	default: // the writer is already awake
	}
	return nil
}

// writeLoop writes queued calls, everything queued at once, until the
// connection fails.
func (cn *conn) writeLoop() {
	defer cn.wg.Done()
	for {
		select {
		case <-cn.wake:
		case <-cn.done:
			return
		}
		// Let the callers that are ready to run queue their requests first:
		// the goroutine that woke the writer made it the next to run on its
		// P, ahead of the callers the reader has just woken, which would
		// otherwise be written one frame per write.
		runtime.Gosched()
		cn.mu.Lock()
		if cn.err != nil {
			cn.mu.Unlock()
			return
		}
		batch := cn.queued
		cn.queued = cn.spare[:0]
		b := cn.wbuf[:0]
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
		cn.mu.Unlock()
		if len(b) == 0 {
			continue
		}
		cn.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err := cn.nc.Write(b); err != nil {
			cn.fail(fmt.Errorf("%w: write: %w", ErrUnavailable, err))
			return
		}
		if cap(b) > keepBuffer {
			b = nil
		}
		cn.wbuf = b
	}
}

// readLoop reads responses and completes their calls until the connection
// fails.
func (cn *conn) readLoop() {
	defer cn.wg.Done()
	buf := make([]byte, readBuffer)
	r, w := 0, 0         // buf[r:w] is read and not yet handled
	var res proto.Result // scratch for frame-level errors
	for {
		frame, _, h, err := proto.SplitFrame(buf[r:w])
		if err != nil {
			cn.fail(fmt.Errorf("%w: bad response frame: %w", ErrUnavailable, err))
			return
		}
		if frame != nil {
			r += len(frame)
			if err := cn.response(frame, h, &res); err != nil {
				cn.fail(err)
				return
			}
			continue
		}
		// Need more bytes: move the partial frame to the front, make room
		// for all of it (its length is checked against MaxFrameLen), and
		// read.
		w = copy(buf, buf[r:w])
		r = 0
		need := proto.HeaderLen
		if w >= proto.HeaderLen {
			need = 4 + int(h.Length)
		}
		switch {
		case need > len(buf):
			grown := make([]byte, need)
			copy(grown, buf[:w])
			buf = grown
		case w == 0 && len(buf) > keepBuffer: // a large frame is done
			buf = make([]byte, readBuffer)
		}
		n, err := cn.nc.Read(buf[w:])
		w += n
		if err != nil && n == 0 {
			if errors.Is(err, io.EOF) {
				err = errors.New("connection closed by the sidecar")
			}
			cn.fail(fmt.Errorf("%w: %w", ErrUnavailable, err))
			return
		}
	}
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

// finish returns the error of a completed call, putting the call back in
// the pool if there is one.
func (cl *call) finish() error {
	if err := cl.err; err != nil {
		putCall(cl)
		return err
	}
	return nil
}
