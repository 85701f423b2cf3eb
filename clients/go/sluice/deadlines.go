package sluice

import (
	"context"
	"errors"
	"os"
	"runtime"
	"time"
)

// cancelPoll is how often a direct round trip whose context can be
// cancelled looks at it while it waits for its answer. The read's deadline
// is the call's; a cancellation without a deadline is seen within
// cancelPoll. Watching the context instead (context.AfterFunc) would cost
// allocations on every call.
const cancelPoll = 2 * time.Millisecond

// callDeadline returns when a call started now gives up: at the client's
// timeout (0: none) or the context's deadline, whichever is earlier, and
// whether that is the context's.
func callDeadline(ctx context.Context, now time.Time, timeout time.Duration) (deadline time.Time, set, fromCtx bool) {
	if timeout > 0 {
		deadline, set = now.Add(timeout), true
	}
	if d, ok := ctx.Deadline(); ok && (!set || d.Before(deadline)) {
		deadline, set, fromCtx = d, true, true
	}
	return deadline, set, fromCtx
}

// timedOut is the error of a call that got no answer within the client's
// timeout.
func timedOut(cl *call, timeout time.Duration) error {
	return unavailable("no answer to "+opName(cl)+" within "+timeout.String(), context.DeadlineExceeded)
}

// opName is the operation's name for people: "acquire", "peek", ...
func opName(cl *call) string {
	b := []byte(cl.op.String())
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return "the " + string(b)
}

// roundTripDirect writes what enqueue took, cl last, and reads until cl's
// answer arrives (the answers before it arrive first), the context ends
// or timeout passes (0: no limit). The caller holds both roles; it gives
// them up before returning. The result is cl's wait's.
func (cn *conn) roundTripDirect(ctx context.Context, cl *call, timeout time.Duration, yield bool) error {
	if yield {
		// Other callers are running: let those that are ready queue their
		// requests, to go in the same write and be answered in the same
		// read.
		runtime.Gosched()
	}
	if !cn.writeDirect() {
		return cl.wait(ctx, 0) // the connection failed, and cl with it
	}
	// Write what queued meanwhile too, and give up the writing role.
	if err := cn.writeQueued(); err != nil && err != errConnFailed {
		cn.writeErr = err
		cn.wake <- struct{}{} // the writer goroutine fails the connection
	}

	now := time.Now()
	deadline, hasDeadline, ctxDeadline := callDeadline(ctx, now, timeout)
	poll := ctx.Done() != nil
	cn.setReadDeadline(now, deadline, hasDeadline, poll)
	for cl.state.Load() == waiting {
		err := cn.readSome()
		if err == nil {
			continue
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			cn.fail(err)
			return cl.wait(ctx, 0)
		}
		now = time.Now()
		if ctx.Err() == nil && (!hasDeadline || now.Before(deadline)) {
			cn.setReadDeadline(now, deadline, hasDeadline, poll) // a poll of the context: go on
			continue
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
			err = timedOut(cl, timeout)
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

// setReadDeadline sets the read deadline of a direct round trip: the
// call's deadline, or sooner if the context is to be polled.
func (cn *conn) setReadDeadline(now, deadline time.Time, hasDeadline, poll bool) {
	if poll {
		if p := now.Add(cancelPoll); !hasDeadline || p.Before(deadline) {
			deadline, hasDeadline = p, true
		}
	}
	if !hasDeadline {
		deadline = time.Time{}
	}
	cn.nc.SetReadDeadline(deadline)
}

// wait waits until cl completes, ctx ends, or timeout (0: none) passes.
// On success cl is the caller's again, its result in cl.res; on error it
// is not.
func (cl *call) wait(ctx context.Context, timeout time.Duration) error {
	var expired <-chan time.Time
	if timeout > 0 {
		if d, ok := ctx.Deadline(); !ok || time.Until(d) > timeout {
			cl.timer.Reset(timeout)
			expired = cl.timer.C
			defer cl.timer.Stop()
		}
	}
	var err error
	select {
	case <-cl.done:
		return cl.finish()
	case <-ctx.Done():
		err = ctx.Err()
	case <-expired:
		err = timedOut(cl, timeout)
	}
	if cl.state.CompareAndSwap(waiting, abandoned) {
		return err // whoever completes it puts it back
	}
	<-cl.done // the answer came as we gave up: take it after all
	return cl.finish()
}
