package sluice

import (
	"context"
	"slices"

	"github.com/sluicehq/sluice/proto"
)

// A Pipeline queues acquires, peeks, refunds, leases and releases and
// sends them together: one write, one wait, for the whole batch, the way a
// Redis pipeline does. Each request is still decided on its own (unlike Multi, which is all or
// nothing). A Pipeline is not safe for concurrent use; it is reusable
// after Exec, and reusing it spares allocations.
//
//	p := c.Pipeline()
//	for _, ip := range ips {
//		p.Acquire(perIP, ip, 1)
//	}
//	results, err := p.Exec(ctx)
type Pipeline struct {
	c     *Client
	items []pipelineItem
	calls []*call
	res   []Result
}

type pipelineItem struct {
	op   proto.Opcode
	l    Limit
	key  string
	n    int64
	opts []RequestOption
}

// Result is one request's outcome in a Pipeline.
type Result struct {
	Decision Decision
	Err      error // as Acquire, Peek, Refund, Lease or Release would have returned it

	Lease    Lease // a Lease's lease (its Decision is Decision), to release
	Released bool  // a Release's: the sidecar held the lease
}

// Pipeline returns an empty pipeline on c.
func (c *Client) Pipeline() *Pipeline { return &Pipeline{c: c} }

// Acquire queues an Acquire (see Client.Acquire).
func (p *Pipeline) Acquire(l Limit, key string, cost int64, opts ...RequestOption) {
	p.items = append(p.items, pipelineItem{proto.OpAcquire, l, key, cost, opts})
}

// Peek queues a Peek (see Client.Peek).
func (p *Pipeline) Peek(l Limit, key string, opts ...RequestOption) {
	p.items = append(p.items, pipelineItem{proto.OpPeek, l, key, 0, opts})
}

// Refund queues a Refund (see Client.Refund).
func (p *Pipeline) Refund(l Limit, key string, amount int64, opts ...RequestOption) {
	p.items = append(p.items, pipelineItem{proto.OpRefund, l, key, amount, opts})
}

// Lease queues a Lease (see Client.Lease); its Result's Lease is the
// lease.
func (p *Pipeline) Lease(l Limit, key string) {
	p.items = append(p.items, pipelineItem{proto.OpLease, l, key, 1, nil})
}

// Release queues a Release (see Client.Release); its Result's Released
// says whether the sidecar held the lease. id 0 is not sent: its result
// is not released, without error.
func (p *Pipeline) Release(l Limit, key string, id uint64) {
	p.items = append(p.items, pipelineItem{proto.OpRelease, l, key, int64(id), nil})
}

// Len is the number of queued requests.
func (p *Pipeline) Len() int { return len(p.items) }

// Exec sends the queued requests in one write, waits for every answer and
// empties the pipeline. The results are in queue order, each what the
// single call would have returned, failure policy included; the slice is
// the pipeline's and valid until its next Exec. The error is the first
// result's error, for callers that only need to know whether all went
// well.
//
// A request the client itself refuses (an empty key, an invalid limit)
// gets its error without being sent. If the context ends or the client's
// timeout passes first, the requests whose answers have not arrived get
// the error; the sidecar may still have decided them.
func (p *Pipeline) Exec(ctx context.Context) ([]Result, error) {
	c := p.c
	p.res = slices.Grow(p.res[:0], len(p.items))[:len(p.items)]
	clear(p.res)
	p.calls = p.calls[:0]
	for i := range p.items {
		it := &p.items[i]
		var cl *call
		var err error
		if it.op != proto.OpRelease || it.n != 0 { // lease 0 holds nothing
			deadline, minV := c.deadlineFor(ctx, it.op, &it.l)
			cl, err = c.encode(it.op, it.l, it.key, it.n, it.opts, deadline, minV)
		}
		if err != nil {
			p.res[i].Err = err
		}
		p.calls = append(p.calls, cl) // nil for a refused request
	}
	cn, direct, probe, err := c.roundTripAll(ctx, p.calls)
	if err != nil {
		for i, cl := range p.calls {
			if cl != nil {
				p.failed(i, err)
				p.calls[i] = nil
			}
		}
	}
	last := -1
	for i, cl := range p.calls {
		if cl != nil {
			last = i
		}
	}
	if last < 0 {
		return p.finish()
	}
	// Answers come in request order: wait for the last, and the others
	// are there when it is, without a wake-up each.
	var lastErr error
	if direct {
		lastErr = cn.roundTripDirect(ctx, p.calls[last], c.opt.timeout, false)
	} else {
		lastErr = p.calls[last].wait(ctx, c.opt.timeout)
	}
	c.brk.done(probe, outcome(lastErr))
	p.settle(last, lastErr)
	for i, cl := range p.calls[:last] {
		if cl == nil {
			continue
		}
		var err error
		if lastErr == nil {
			err = cl.wait(ctx, c.opt.timeout) // answered already, but a failure may still be on its way
		} else if done, e := cl.poll(); done {
			err = e
		} else {
			err = lastErr // given up with the last
		}
		p.settle(i, err)
	}
	return p.finish()
}

// settle records item i's outcome: err, or the decision its call holds
// (then the call goes back to the pool).
func (p *Pipeline) settle(i int, err error) {
	cl := p.calls[i]
	p.calls[i] = nil
	if err != nil {
		p.failed(i, err)
		return
	}
	it, r := &p.items[i], &p.res[i]
	if err := statusError(it.op, cl.res.Status, cl.res.Message); err != nil {
		r.Err = err
	} else {
		r.Decision = p.c.decided(cl, it.l.Name)
		switch it.op {
		case proto.OpLease:
			r.Lease = Lease{Decision: r.Decision, ID: cl.res.Lease, c: p.c, l: it.l, key: it.key}
		case proto.OpRelease:
			r.Released = cl.res.Released
		}
	}
	putCall(cl)
}

// failed records item i's failure with err: the failure policy's decision
// for the operations it applies to (Acquire, Peek, Lease), else err.
func (p *Pipeline) failed(i int, err error) {
	r := &p.res[i]
	switch op := p.items[i].op; op {
	case proto.OpAcquire, proto.OpPeek, proto.OpLease:
		r.Decision, r.Err = p.c.degraded(err, p.items[i].l.Name)
		if op == proto.OpLease {
			r.Lease.Decision = r.Decision
		}
	default:
		r.Err = err
	}
}

// finish empties the pipeline and returns the results and the first error.
func (p *Pipeline) finish() ([]Result, error) {
	clear(p.items) // drop the keys and options
	p.items = p.items[:0]
	for _, r := range p.res {
		if r.Err != nil {
			return p.res, r.Err
		}
	}
	return p.res, nil
}
