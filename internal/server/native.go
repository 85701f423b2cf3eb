package server

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/errtext"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/proto"
)

var errNotRequest = fmt.Errorf("%w: a client may only send request frames", proto.ErrMalformed)

// conn is a connection speaking the native protocol.
type conn struct {
	stream

	// scratch reused across operations, so serving allocates nothing
	op    proto.Op
	lim   limitCache[proto.Limit]
	multi multiScratch
	list  listScratch
	req   engine.Request
	res   engine.Result
	call  globalCall // req's Remote, for an operation on a global limit

	leaseCache leaseCache // the leased limit and lease used last (globalCall.local)

	globalMulti globalMultiScratch

	frameStart int           // where the response frame being built starts in out
	version    uint8         // the protocol version of the frame being answered
	opIndex    int           // the operation of the frame being answered
	frameNo    int           // the frame being answered, counted from the first of this handle
	opsLeft    int           // operations of the frame still to answer after this one
	globals    *frameGlobals // the frames' global operations, decided first (nil until one)
	arrived    time.Time     // when the frames being handled were read (with global limits only)
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
	if c.s.global != nil && c.s.named().global {
		// A global limit's answer is due a time after its frame arrived,
		// not after the frames before it were answered (global.go).
		c.arrived = time.Now()
		c.clock = c.arrived
		c.decideGlobals(c.in)
	} else {
		c.arrived = time.Time{} // not an earlier batch's (handleBatch cleared the clock)
	}
	rest := c.in
	for c.frameNo = 0; !c.closed; c.frameNo++ {
		if len(c.out) >= maxPending && !c.globals.pending() { // the decisions made must be answered
			c.more = true
			break
		}
		frame, r, h, err := proto.SplitFrame(rest)
		if err != nil {
			c.frameError(h, err)
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
// result, in the frame's version if it is one this side speaks (else the
// oldest, which every client reads), and closes the connection: its byte
// stream cannot be trusted.
func (c *conn) frameError(h proto.Header, err error) {
	c.n.malformed++
	c.s.protocolError(metrics.Native)
	v := h.Version
	if v < proto.MinVersion || v > proto.Version {
		v = proto.MinVersion
	}
	b, start := proto.BeginFrameVersion(c.out, v, proto.KindResponse, h.ID)
	st := proto.StatusOf(err)
	b = proto.AppendError(b, 0, st, wireMessage(st, err))
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
		c.frameError(h, errNotRequest)
		return
	}
	// The answer is in the request's version: a client of an older one
	// reads it.
	var began time.Time
	if c.s.rec != nil && c.n.frames&sampleMask == 0 {
		began = time.Now()
	}
	b, start := proto.BeginFrameVersion(c.out, h.Version, proto.KindResponse, h.ID)
	c.frameStart, c.version = start, h.Version
	body := frame[proto.HeaderLen:]
	scanned := c.globals.scanned(c.frameNo)
	if scanned {
		// decideGlobals decoded the frame's operations, and found it whole.
		for i := 0; i < int(h.Count); i++ {
			c.opIndex, c.opsLeft = i, int(h.Count)-i-1
			c.globals.load(&c.op)
			b = c.s.do(b, &c.op, c)
		}
		body = nil
	}
	for i := 0; !scanned && i < int(h.Count); i++ {
		c.opIndex = i
		c.opsLeft = int(h.Count) - i - 1
		rest, err := proto.DecodeOpVersion(body, h.Version, &c.op)
		if err != nil {
			c.n.malformed++
			c.s.protocolError(metrics.Native)
			code := proto.Opcode(0)
			if len(body) > 0 {
				code = proto.Opcode(body[0])
			}
			for ; i < int(h.Count); i++ {
				b = proto.AppendError(b, code, proto.StatusOf(err), wireMessage(proto.StatusOf(err), err))
			}
			c.closed = true
			break
		}
		b = c.s.do(b, &c.op, c)
		body = rest
	}
	if len(body) != 0 && !c.closed {
		c.n.malformed++
		c.s.protocolError(metrics.Native)
		c.closed = true // bytes after the last operation: the framing is off
	}
	c.out = proto.EndFrame(b, start, int(h.Count))
	if !began.IsZero() {
		c.s.rec.Request(metrics.Native, time.Since(began))
	}
}

// multiScratch holds a MULTI's items and decisions between requests.
type multiScratch struct {
	items  [proto.MaxMulti]engine.Item
	limits [proto.MaxMulti]engine.Limit
	ds     []bucket.Decision
	wire   [proto.MaxMulti]proto.Decision
}

// scanSpan bounds the slots one SCAN examines, so a scan that matches little
// still answers quickly; the client continues from the cursor it returns.
const scanSpan = 4096

// do answers one operation, appending its result to b.
func (s *server) do(b []byte, op *proto.Op, c *conn) []byte {
	c.n.ops++
	switch op.Code {
	case proto.OpPing:
		return proto.AppendPong(b)
	case proto.OpHello:
		return proto.AppendHelloResult(b, &s.hello)
	case proto.OpStats:
		return s.appendStats(b)
	case proto.OpScan:
		return s.scan(b, op, c.room(b), c.version, c.at(c.now))
	case proto.OpMulti:
		return s.multi(b, op, c)
	case proto.OpRegGet, proto.OpRegSet, proto.OpRegCAS, proto.OpRegDel:
		return s.register(b, op, c)
	}
	l, nl, err := c.limit(op.Limit, op.Name, op.Key)
	if err != nil {
		return c.fail(b, op.Code, err)
	}
	remote := nl != nil && nl.cfg.Scope == config.Global
	if remote && s.global == nil {
		return c.fail(b, op.Code, errNoGlobal)
	}
	req := &c.req
	c.request(req, op, l, nl)
	if nl.globalOne() {
		return s.globalOp(b, op, nl, c, req)
	}
	var start time.Time
	if s.rec != nil && c.n.ops&sampleMask == 0 {
		start = time.Now() // durations are sampled: a clock read costs more than a decision's counters
	}
	if nl != nil && len(nl.parts) > 1 {
		return s.listOp(b, op, nl, c, req, start)
	}
	switch op.Code {
	case proto.OpLease:
		return s.leaseOp(b, op, c, req, nl, start)
	case proto.OpRelease:
		return s.releaseOp(b, op, c, req)
	}
	res := &c.res
	if err := s.engine.Do(req, res); err != nil {
		if op.Code != proto.OpReset { // a RESET is no decision
			s.recordError(nl, l, err)
		}
		return c.fail(b, op.Code, err)
	}
	if op.Code == proto.OpReset {
		return proto.AppendReset(b, res.Existed)
	}
	return c.answer(b, op, nl, l.Bucket().Algorithm, &res.Decision, res.Shadowed, start)
}

// request decodes op, an operation on l (of nl, if named), into *req as
// engine.Do takes it.
func (c *conn) request(req *engine.Request, op *proto.Op, l *engine.Limit, nl *namedLimit) {
	*req = engine.Request{Limit: l, Time: c.at(c.now)}
	req.Wire(op.Code, op.Key, op.N, op.Flags, op.At)
	req.Shadow = req.Shadow || nl != nil && nl.cfg.Shadow
	// A global limit's request waits for no lock here (its Remote decides
	// it, the deadline in hand): its lock wait is not worth a clock read.
	if op.Flags&proto.FlagDeadline != 0 && !nl.globalOne() {
		req.Time.Wait = c.waitUntil(op.Deadline)
	}
}

// answer appends a decision's result (shadowed: a shadow limit's denial
// answered as allowed) and counts it.
func (c *conn) answer(b []byte, op *proto.Op, nl *namedLimit, alg bucket.Algorithm, d *bucket.Decision, shadowed bool, start time.Time) []byte {
	switch {
	case shadowed:
		c.n.shadowDenied++
		c.s.shadowDenied(nl)
	case d.Allowed:
		c.n.allowed++
	default:
		c.n.denied++
	}
	c.s.record(nl, alg, d.Allowed, shadowed, start)
	if shadowed {
		return proto.AppendShadowDecision(b, op.Code, d)
	}
	return proto.AppendDecision(b, op.Code, d)
}

// multi answers a MULTI: all of its items or none.
func (s *server) multi(b []byte, op *proto.Op, c *conn) []byte {
	if nls := c.globalMulti.nls[:op.NItems]; s.globalItems(op, nls) {
		return s.globalMulti(b, op, c, nls)
	}
	m := &c.multi
	for i := range op.NItems {
		it := &op.Items[i]
		if it.Name != nil {
			nl, err := s.lookup(it.Name)
			if err == nil {
				nl = nl.forKey(it.Key)
			}
			switch {
			case err != nil:
			case nl.cfg.Scope == config.Global: // a reload made it global since globalItems
				err = errMultiMixed
			case len(nl.parts) > 1:
				err = errListMulti
			}
			if err != nil {
				return c.fail(b, op.Code, fmt.Errorf("item %d: %w", i, err))
			}
			m.limits[i] = nl.cfg.Engine
		} else {
			l, err := engine.FromProto(it.Limit)
			if err != nil {
				return c.fail(b, op.Code, fmt.Errorf("item %d: %w", i, err))
			}
			m.limits[i] = l
		}
		m.items[i] = engine.Item{Key: it.Key, Limit: &m.limits[i], Cost: it.Cost, Flags: engine.FlagsFromProto(it.Flags)}
	}
	t := c.at(c.now)
	t.Wire(op.Flags, op.At)
	ds, allowed, err := s.engine.Multi(m.ds[:0], m.items[:op.NItems], t)
	m.ds = ds
	return c.multiResult(b, op, ds, allowed, err)
}

// multiResult appends a MULTI's result: its decisions ds and whether all
// were allowed, or its error; and counts it.
func (c *conn) multiResult(b []byte, op *proto.Op, ds []bucket.Decision, allowed bool, err error) []byte {
	if err != nil {
		return c.fail(b, op.Code, err)
	}
	if allowed {
		c.n.allowed++
	} else {
		c.n.denied++
	}
	return proto.AppendMultiResult(b, allowed, ds)
}

// register answers a register operation (version 6), on the server's
// clock.
func (s *server) register(b []byte, op *proto.Op, c *conn) []byte {
	t := c.at(c.now)
	var r engine.Register
	var err error
	switch op.Code {
	case proto.OpRegGet:
		r, err = s.engine.RegGet(op.Key, t)
	case proto.OpRegSet:
		r, err = s.engine.RegSet(op.Key, op.N, op.TTL, t)
	case proto.OpRegCAS:
		r, err = s.engine.RegCAS(op.Key, op.Old, op.N, op.TTL, t)
	case proto.OpRegDel:
		r, err = s.engine.RegDel(op.Key, t)
	}
	if err != nil {
		return c.fail(b, op.Code, err)
	}
	return proto.AppendRegisterResult(b, op.Code, &proto.Register{OK: r.OK, Value: r.Value, TTL: r.TTL, Now: t.Now})
}

// scan lists live buckets whose inline key starts with the prefix, adding at
// most room bytes to b; the cursor it returns resumes where it stopped. A
// frame of version v lists only the algorithms v defines. t holds the
// scan's lock waits.
func (s *server) scan(b []byte, op *proto.Op, room int, v uint8, t engine.Time) []byte {
	b, start := proto.BeginScanResult(b, 0)
	limit := len(b) + room
	n, full, resume := 0, false, uint64(0)
	next, err := s.engine.Scan(op.Cursor, scanSpan, t, func(e *engine.Entry) bool {
		if !bytes.HasPrefix(e.Key, op.Prefix) || !e.Algorithm.ValidIn(v) {
			return true
		}
		if len(b)+scanEntryLen(e.Key) > limit {
			full, resume = true, e.Index // the next SCAN starts with this bucket
			return false
		}
		b = proto.AppendScanEntry(b, e.Algorithm, e.FreshAt, e.Key)
		n++
		return n < int(op.Count)
	})
	switch {
	case errors.Is(err, engine.ErrNoInlineKeys):
		return proto.AppendError(b[:start], op.Code, proto.StatusUnsupported, wireMessage(proto.StatusUnsupported, err))
	case err != nil:
		return proto.AppendError(b[:start], op.Code, statusFor(err), wireMessage(statusFor(err), err))
	case full && n == 0:
		return proto.AppendError(b[:start], op.Code, proto.StatusMalformed,
			"no room for a SCAN result in this response frame: send SCAN in a smaller batch")
	case full:
		next = resume
	}
	return proto.EndScanResult(b, start, next, n)
}

// scanEntryLen is the encoded size of a SCAN entry for key.
func scanEntryLen(k []byte) int { return 1 + 8 + 2 + len(k) }

// fail appends an error result for err, classified into a status.
func (c *conn) fail(b []byte, code proto.Opcode, err error) []byte {
	st := statusFor(err)
	c.n.errors++
	return proto.AppendError(b, code, st, wireMessage(st, err))
}

// wireMessage is the message of an error result of status st: err in
// words, without what the status already says (a client shows the status
// first: "invalid key: ACQUIRE key of 0 bytes", not "invalid key: invalid
// key: ...").
func wireMessage(st proto.Status, err error) string {
	return strings.TrimPrefix(errtext.String(err), errtext.String(st.Err())+": ")
}

// statusFor maps the errors of the layers below to wire status codes: the
// server's own, then the engine's (engine.Status).
func statusFor(err error) proto.Status {
	switch {
	case errors.Is(err, errUnknownName), errors.Is(err, errMultiMixed), errors.Is(err, errMultiSlots),
		errors.Is(err, errListLease), errors.Is(err, errListMulti):
		return proto.StatusInvalidLimit
	case errors.Is(err, errNoGlobal):
		return proto.StatusUnsupported
	}
	return engine.Status(err)
}

// appendStats answers STATS: the rows of metrics.Counters it lists.
func (s *server) appendStats(b []byte) []byte {
	b, start := proto.BeginStatsResult(b)
	n := 0
	snap := s.snapshot(true)
	snap.Stats(func(name string, v uint64) { b = proto.AppendStat(b, name, v); n++ })
	return proto.EndStatsResult(b, start, n)
}
