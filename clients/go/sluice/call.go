package sluice

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/proto"
)

// The states of a call.
const (
	waiting   = iota // its caller waits for it
	completed        // done was signalled; the caller takes it back
	abandoned        // its caller left (context or timeout); whoever finishes it puts it back
	detached         // it never had a caller (the RELEASE of an orphaned lease); whoever finishes it puts it back
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
	limit proto.Limit  // a LEASE's limit
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
	cl.limit = proto.Limit{}
	callPool.Put(cl)
}

// complete finishes cl with err (nil: its result is in cl.res): it wakes
// its caller and returns false or, if the caller left (or there was none),
// returns true: cl is then the completer's, to put back in the pool.
func (cl *call) complete(err error) (orphan bool) {
	cl.err = err
	if cl.state.CompareAndSwap(waiting, completed) {
		cl.done <- struct{}{}
		return false
	}
	return true
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
