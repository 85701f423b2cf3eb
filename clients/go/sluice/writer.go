package sluice

import (
	"errors"
	"os"
	"runtime"
	"syscall"
	"time"
)

// refusalWait bounds how long a writer whose write found the connection
// closed waits for the sidecar's refusal to be read.
const refusalWait = time.Second

// write writes b and returns the write's error. The caller holds the
// writing role.
func (cn *conn) write(b []byte) error {
	// The deadline is moved when less than writeTimeout-writeSlack is left,
	// not for each write: moving it costs a timer's update, and then a
	// wake-up of the thread waiting in the poller.
	if now := time.Now(); cn.writeBy.Sub(now) < writeTimeout-writeSlack {
		cn.writeBy = now.Add(writeTimeout)
		cn.nc.SetWriteDeadline(cn.writeBy)
	}
	if cn.raw != nil {
		return cn.raw.write(b)
	}
	_, err := cn.nc.Write(b)
	return err
}

// closedByPeer reports whether a write failed because the sidecar closed
// the connection: it may have written why first (a refusal: Busy at its
// connection limit, Denied for a peer it does not allow), and that, not
// the write's "broken pipe", is the error to report.
func closedByPeer(err error) bool {
	return errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
}

// writeFailed is the error of a failed write.
func writeFailed(err error) error { return unavailable("cannot send the request", err) }

// writeDirect takes what is queued, the calls of a direct round trip and
// any queued meanwhile, and writes it; on failure it fails the connection
// and returns false. The caller holds both roles: if the sidecar closed
// the connection, it reads what the sidecar sent before closing, so that
// a refusal fails the connection with the refusal's error.
func (cn *conn) writeDirect() bool {
	cn.mu.Lock()
	if cn.err != nil {
		cn.mu.Unlock()
		return false
	}
	cn.wbuf = cn.takeLocked(cn.wbuf[:0])
	cn.mu.Unlock()
	err := cn.write(cn.wbuf)
	cn.keepWbuf(cn.wbuf)
	if err == nil {
		return true
	}
	if !closedByPeer(err) {
		cn.fail(writeFailed(err))
		return false
	}
	cn.nc.SetReadDeadline(time.Now().Add(refusalWait))
	for {
		rerr := cn.readSome()
		if rerr == nil {
			continue // answers that came before the close
		}
		if errors.Is(rerr, os.ErrDeadlineExceeded) {
			rerr = writeFailed(err)
		}
		cn.fail(rerr) // the refusal, or the connection closed by the sidecar
		return false
	}
}

// writeAsCaller writes what is queued, as the writer goroutine would, on
// the caller's goroutine, and gives up the writing role. The caller holds
// the writing role; with yield set (other callers are running), it first
// lets those that are ready queue their requests, to go in the same
// write. A failed write is handed to the writer goroutine, which fails the
// connection as for its own.
func (cn *conn) writeAsCaller(yield bool) {
	if yield {
		runtime.Gosched()
	}
	if err := cn.writeQueued(); err != nil && err != errConnFailed {
		cn.writeErr = err
		cn.wake <- struct{}{} // never blocks: only the role's taker sends
	}
}

// errConnFailed is writeQueued's report that the connection failed.
var errConnFailed = errors.New("the connection failed")

// writeQueued writes what is queued until nothing is, then gives up the
// writing role; it starts the reader goroutine if nobody reads. It returns
// errConnFailed if the connection failed, or the error of a failed write:
// the caller still holds the writing role then. The caller holds the
// writing role.
func (cn *conn) writeQueued() error {
	for {
		cn.mu.Lock()
		if cn.err != nil {
			cn.mu.Unlock()
			return errConnFailed
		}
		if len(cn.queued) == 0 {
			cn.writing = false
			cn.mu.Unlock()
			return nil
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
		if len(b) > 0 {
			if err := cn.write(b); err != nil {
				return err
			}
		}
		cn.keepWbuf(b)
	}
}

// keepWbuf keeps the written batch's buffer for the next one, unless it
// grew too large to keep. The caller holds the writing role.
func (cn *conn) keepWbuf(b []byte) {
	if cap(b) > keepBuffer {
		b = nil
	}
	cn.wbuf = b[:0]
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
		if err := cn.writeErr; err != nil { // a caller's write failed
			cn.writeLoopFailed(err)
			return
		}
		// Let the callers that are ready to run queue their requests first:
		// the reader has just woken them, and they would otherwise be
		// written one frame per write.
		runtime.Gosched()
		if err := cn.writeQueued(); err != nil {
			if err != errConnFailed {
				cn.writeLoopFailed(err)
			}
			return
		}
	}
}

// writeLoopFailed fails the connection after the writer goroutine's write
// failed. If the sidecar closed the connection, the reading role (held:
// the calls just written are in flight) reads what it sent before closing
// and fails the connection with that, a refusal's error say; the writer
// waits for it a while, keeping the writing role, so that nothing more is
// written.
func (cn *conn) writeLoopFailed(err error) {
	if closedByPeer(err) {
		t := time.NewTimer(refusalWait)
		defer t.Stop()
		select {
		case <-cn.done:
			return
		case <-t.C:
		}
	}
	cn.fail(writeFailed(err))
}
