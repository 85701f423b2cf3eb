package sluice

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/sluicehq/sluice/proto"
)

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
					// A deadline a direct round trip left behind.
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
			return garbled(err)
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
	var n int
	var err error
	if cn.raw != nil {
		n, err = cn.raw.read(cn.rbuf[cn.w:])
	} else {
		n, err = cn.nc.Read(cn.rbuf[cn.w:])
	}
	cn.w += n
	if err != nil && n == 0 {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
		if errors.Is(err, io.EOF) {
			return unavailable("it closed the connection", nil)
		}
		return unavailable("cannot read its answer", err)
	}
	return nil
}

// response handles one response frame: it completes the oldest call in
// flight, or returns the error that fails the connection.
func (cn *conn) response(frame []byte, h proto.Header, scratch *proto.Result) error {
	body := frame[proto.HeaderLen:]
	if h.Kind != proto.KindResponse {
		return garbled(fmt.Errorf("a %v frame instead of a response: %w", h.Kind, ErrMalformed))
	}
	if len(body) > 0 && body[0] == 0 {
		// A frame-level error (Busy, Denied, BadVersion, ...): the sidecar
		// closes the connection after it; so does the client.
		if _, err := proto.DecodeResult(body, scratch); err != nil {
			return garbled(err)
		}
		st := scratch.Status
		if st == proto.StatusOK {
			st = proto.StatusMalformed
		}
		if refusal(st) {
			return statusError(0, st, scratch.Message)
		}
		return unavailable("", statusError(0, st, scratch.Message))
	}
	cn.mu.Lock()
	cl := cn.inflight.pop()
	cn.mu.Unlock()
	if cl == nil {
		return garbled(fmt.Errorf("an answer (id %d) to no request: %w", h.ID, ErrMalformed))
	}
	err := cn.check(cl, frame, h)
	if cl.complete(err) {
		if err == nil && cl.op == proto.OpLease && cl.res.Status == proto.StatusOK && cl.res.Lease != 0 {
			cn.releaseOrphan(cl)
		}
		putCall(cl)
	}
	return err
}

// releaseOrphan gives back the lease that cl, a LEASE whose caller left
// before its answer came (cancelled, or past its timeout), was granted:
// nobody knows its id, so it would hold its slot until it expires. The
// RELEASE goes on this connection, its answer dropped; should the
// connection fail first, the sidecar gives back the leases of a closed
// connection anyway.
func (cn *conn) releaseOrphan(cl *call) {
	rc := getCall(proto.OpRelease)
	rc.state.Store(detached)
	rc.key = append(rc.key[:0], cl.key...)
	b, start := proto.BeginFrameVersion(rc.req[:0], proto.ItemVersion(proto.OpRelease, 0, &cl.limit), proto.KindRequest, 0)
	b = proto.AppendRelease(b, 0, cl.limit, cl.res.Lease, rc.key)
	rc.req = proto.EndFrame(b, start, 1)
	if _, err := cn.enqueue(false, rc); err != nil {
		putCall(rc)
	}
}

// check copies the response frame into cl and decodes its result there,
// checking that it answers cl's request.
func (cn *conn) check(cl *call, frame []byte, h proto.Header) error {
	if h.ID != cl.id || h.Count != 1 {
		return garbled(fmt.Errorf("an answer of id %d with %d results to request %d: %w",
			h.ID, h.Count, cl.id, ErrMalformed))
	}
	cl.resp = append(cl.resp[:0], frame...)
	rest, err := proto.DecodeResult(cl.resp[proto.HeaderLen:], &cl.res)
	switch {
	case err != nil:
		return garbled(err)
	case len(rest) != 0:
		return garbled(fmt.Errorf("%d bytes after the result: %w", len(rest), ErrMalformed))
	case cl.res.Status == proto.StatusOK && cl.res.Code != cl.op:
		return garbled(fmt.Errorf("a %v result to a %v request: %w", cl.res.Code, cl.op, ErrMalformed))
	}
	if !cn.answered.Load() {
		cn.answered.Store(true)
		cn.cl.answered.Store(true)
	}
	return nil
}

// garbled is the error of an answer the client cannot decode: the stream
// cannot be trusted, and the connection fails.
func garbled(cause error) error { return unavailable("its answer cannot be decoded", cause) }
