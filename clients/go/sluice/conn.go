package sluice

import (
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/proto"
)

const (
	readBuffer   = 64 << 10         // a connection's read buffer
	keepBuffer   = 256 << 10        // buffers that grew past this are not kept
	writeTimeout = 10 * time.Second // the longest a write may wait for room in the socket
	writeSlack   = time.Second      // a write may have writeTimeout-writeSlack
)

// conn is one connection to the sidecar, shared by every caller.
//
// Two roles move the bytes: writing (taking everything queued, giving each
// frame an id, writing it in one write) and reading (reading responses,
// which come in request order, and completing the calls in FIFO order
// after checking the echoed id). Callers take the roles themselves when
// they are free: a caller finding nothing queued or in flight and nobody
// writing or reading takes both and does its round trip itself, writing
// the calls queued behind it too and completing those answered before its
// own; one finding the writing role free while another reads writes what
// is queued and then waits. No other goroutine needs to be scheduled,
// which is most of a round trip's cost when client and sidecar are
// separate processes: each goroutine woken when the process was idle is a
// thread woken. A caller that takes a role while other callers run first
// yields, so that those ready to run queue their requests into the same
// write. The writer and reader goroutines take a role only when it is
// handed over: calls queued while a caller writes, answers still due when
// a caller's own has come. The first error fails the connection and every
// call on it.
type conn struct {
	cl  *Client
	nc  net.Conn
	raw *rawIO // nc's reads and writes, where it has a descriptor; nil: nc's own

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
	writing  bool  // someone holds the writing role
	writeErr error // a caller's failed write, handed to the writer goroutine with the writing role
	reading  bool  // someone holds the reading role
	err      error // why the connection failed; set once

	wbuf    []byte    // the writing role's batch
	writeBy time.Time // the write deadline set; the writing role's

	// The reading role's buffer: rbuf[r:w] is read and not yet handled.
	rbuf []byte
	r, w int
	res  proto.Result // scratch for frame-level errors
}

func newConn(cl *Client, nc net.Conn) *conn {
	cn := &conn{cl: cl, nc: nc, raw: newRawIO(nc), wake: make(chan struct{}, 1), readWake: make(chan struct{}, 1),
		done: make(chan struct{}), rbuf: make([]byte, readBuffer)}
	cn.wg.Add(2)
	go cn.writeLoop()
	go cn.readLoop()
	return cn
}

// The roles enqueue gives the caller.
type role uint8

const (
	roleNone   role = iota // the calls are queued: the writer goroutine, or whoever writes, sends them
	roleDirect             // both roles: the caller calls roundTripDirect
	roleWrite              // the writing role: the caller calls writeAsCaller, then waits
)

// enqueue queues calls (nil entries skipped) to be written together. It
// fails, queueing none, if the connection has failed. If take is set, the
// caller takes the roles that are free rather than wake the goroutines
// that hold them otherwise: both, if nothing else is queued or in flight
// (roleDirect: the caller must call roundTripDirect with the last of
// them), or the writing role while someone else reads (roleWrite: the
// caller must call writeAsCaller). Each goroutine woken is a thread woken
// when the process was idle, which costs more than the round trip.
func (cn *conn) enqueue(take bool, calls ...*call) (role, error) {
	cn.mu.Lock()
	if cn.err != nil {
		err := cn.err
		cn.mu.Unlock()
		return roleNone, err
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
		return roleNone, nil
	case cn.writing:
		cn.mu.Unlock() // the writer takes it
		return roleNone, nil
	case take && !cn.reading && len(cn.queued) == added && cn.inflight.empty():
		cn.writing, cn.reading = true, true
		cn.mu.Unlock()
		return roleDirect, nil
	case take:
		cn.writing = true
		cn.mu.Unlock()
		return roleWrite, nil
	}
	cn.writing = true
	cn.mu.Unlock()
	cn.wake <- struct{}{} // never blocks: only the role's taker sends
	return roleNone, nil
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

// releaseReading ends a direct round trip's reading: it gives up the
// reading role, to the reader goroutine if answers are still due.
func (cn *conn) releaseReading() {
	cn.mu.Lock()
	more := (!cn.inflight.empty() || cn.r < cn.w) && cn.err == nil
	cn.reading = more
	cn.mu.Unlock()
	if more {
		cn.readWake <- struct{}{}
	}
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
		if cl.complete(err) {
			putCall(cl)
		}
	}
	for _, cl := range queued {
		if cl.complete(err) {
			putCall(cl)
		}
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
