package server

import (
	"bytes"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/proto"
	"github.com/sluicehq/sluice/shm"
)

var errNotRequest = fmt.Errorf("%w: a client may only send request frames", proto.ErrMalformed)

// counters are the server's statistics, reported by STATS.
type counters struct {
	conns, connsTotal, connsRejected    atomic.Int64
	peersDenied                         atomic.Int64
	frames, ops, malformed, timeouts    atomic.Int64
	denied, allowed, errors, tableFulls atomic.Int64
	buffered                            atomic.Int64 // bytes of connection buffers
}

// connCounters are a connection's share of counters, kept without atomics
// while it handles a batch and added to the server's once per batch.
type connCounters struct {
	frames, ops, malformed, denied, allowed, errors, tableFulls int64
}

// add moves n into the server's counters and zeroes it.
func (c *counters) add(n *connCounters) {
	addNonZero(&c.frames, n.frames)
	addNonZero(&c.ops, n.ops)
	addNonZero(&c.malformed, n.malformed)
	addNonZero(&c.denied, n.denied)
	addNonZero(&c.allowed, n.allowed)
	addNonZero(&c.errors, n.errors)
	addNonZero(&c.tableFulls, n.tableFulls)
	*n = connCounters{}
}

func addNonZero(dst *atomic.Int64, v int64) {
	if v != 0 {
		dst.Add(v)
	}
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
		return s.scan(b, op, c.room(b))
	case proto.OpMulti:
		return s.multi(b, op, c)
	}
	bl, err := bucketLimit(op.Limit)
	if err != nil {
		return c.fail(b, op.Code, err)
	}
	l, err := c.lim.get(bl)
	if err != nil {
		return c.fail(b, op.Code, err)
	}
	when := c.when(op.Flags, op.At)
	var d bucket.Decision
	switch op.Code {
	case proto.OpAcquire:
		err = s.engine.Acquire(&d, op.Key, l, op.N, when, bucketFlags(op.Flags))
	case proto.OpPeek:
		err = s.engine.Peek(&d, op.Key, l, when)
	case proto.OpRefund:
		err = s.engine.Refund(&d, op.Key, l, op.N, when, 0)
	case proto.OpReset:
		existed, err := s.engine.Reset(op.Key, l)
		if err != nil {
			return c.fail(b, op.Code, err)
		}
		return proto.AppendReset(b, existed)
	default:
		return c.fail(b, op.Code, fmt.Errorf("%w: %d", proto.ErrUnknownOpcode, op.Code))
	}
	if err != nil {
		return c.fail(b, op.Code, err)
	}
	if d.Allowed {
		c.n.allowed++
	} else {
		c.n.denied++
	}
	w := proto.Decision(d)
	return proto.AppendDecision(b, op.Code, &w)
}

// when is the Time of a request with flags f: the batch's server clock,
// and the request's own time if it carries one.
func (st *stream) when(f proto.Flags, at int64) engine.Time {
	t := engine.At(st.now)
	if f&proto.FlagAt != 0 {
		t.At = at
	}
	return t
}

// multi answers a MULTI: all of its items or none.
func (s *server) multi(b []byte, op *proto.Op, c *conn) []byte {
	m := &c.multi
	for i := range op.NItems {
		it := &op.Items[i]
		l, err := limitOf(it.Limit)
		if err != nil {
			return c.fail(b, op.Code, fmt.Errorf("item %d: %w", i, err))
		}
		m.limits[i] = l
		m.items[i] = engine.Item{Key: it.Key, Limit: &m.limits[i], Cost: it.Cost, Flags: bucketFlags(it.Flags)}
	}
	ds, allowed, err := s.engine.Multi(m.ds[:0], m.items[:op.NItems], c.when(op.Flags, op.At))
	m.ds = ds
	if err != nil {
		return c.fail(b, op.Code, err)
	}
	for i, d := range ds {
		m.wire[i] = proto.Decision(d)
	}
	if allowed {
		c.n.allowed++
	} else {
		c.n.denied++
	}
	return proto.AppendMultiResult(b, allowed, m.wire[:len(ds)])
}

// scan lists live buckets whose inline key starts with the prefix, adding at
// most room bytes to b; the cursor it returns resumes where it stopped.
func (s *server) scan(b []byte, op *proto.Op, room int) []byte {
	t := s.engine.Table()
	if !t.InlineKeys() {
		return proto.AppendError(b, op.Code, proto.StatusUnsupported,
			"scan needs key bytes kept inline: create the state file with --slot-size 128 or 256")
	}
	b, start := proto.BeginScanResult(b, 0)
	limit := len(b) + room
	n, full, resume := 0, false, uint64(0)
	next := t.Scan(op.Cursor, scanSpan, func(e *shm.Entry) bool {
		k := e.Key
		if k == nil || !bytes.HasPrefix(k, op.Prefix) {
			return true
		}
		if len(b)+scanEntryLen(k) > limit {
			full, resume = true, e.Index // the next SCAN starts with this bucket
			return false
		}
		b = proto.AppendScanEntry(b, proto.Algorithm(e.Kind), e.FreshAt, k)
		n++
		return n < int(op.Count)
	})
	if full {
		if n == 0 {
			return proto.AppendError(b[:start], op.Code, proto.StatusMalformed,
				"no room for a SCAN result in this response frame: send SCAN in a smaller batch")
		}
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
	if st == proto.StatusTableFull {
		c.n.tableFulls++
	}
	return proto.AppendError(b, code, st, err.Error())
}

// statusFor maps the errors of the layers below to wire status codes.
func statusFor(err error) proto.Status {
	var be bucketError
	switch {
	case errors.Is(err, shm.ErrTableFull):
		return proto.StatusTableFull
	case errors.Is(err, shm.ErrEmptyKey), errors.Is(err, shm.ErrKeyTooLong):
		return proto.StatusInvalidKey
	case errors.Is(err, engine.ErrNegativeCost):
		return proto.StatusInvalidCost
	case errors.Is(err, engine.ErrTooManyItems):
		return proto.StatusTooManyItems
	case errors.Is(err, engine.ErrContended):
		return proto.StatusContended
	case errors.Is(err, engine.ErrTime):
		return proto.StatusMalformed
	case errors.Is(err, engine.ErrInvalidLimit), errors.As(err, &be):
		return proto.StatusInvalidLimit
	}
	if st := proto.StatusOf(err); st != proto.StatusOK {
		return st
	}
	return proto.StatusInternal
}

// bucketError marks an error from validating a limit.
type bucketError struct{ err error }

func (e bucketError) Error() string { return e.err.Error() }
func (e bucketError) Unwrap() error { return e.err }

// bucketFlags converts request flags to algorithm flags.
func bucketFlags(f proto.Flags) bucket.Flags {
	var b bucket.Flags
	if f&proto.FlagStrict != 0 {
		b |= bucket.Strict
	}
	if f&proto.FlagSmyte != 0 {
		b |= bucket.Smyte
	}
	return b
}

// bucketLimit converts a wire limit to the algorithm's parameters. The wire
// carries three parameters in each algorithm's order (see proto/doc.go).
func bucketLimit(w proto.Limit) (bucket.Limit, error) {
	p := w.P
	switch w.Algorithm {
	case proto.TokenBucket:
		return bucket.Limit{Algorithm: bucket.TokenBucket, Max: p[0], RefillTime: p[1], RefillAmount: p[2]}, nil
	case proto.GCRA:
		return bucket.Limit{Algorithm: bucket.GCRA, Burst: p[0], Count: p[1], Period: p[2]}, nil
	case proto.FixedWindow, proto.SlidingWindow:
		if p[2] != 0 {
			return bucket.Limit{}, bucketError{fmt.Errorf("%v takes two parameters, got a third: %d", w.Algorithm, p[2])}
		}
		alg := bucket.FixedWindow
		if w.Algorithm == proto.SlidingWindow {
			alg = bucket.SlidingWindow
		}
		return bucket.Limit{Algorithm: alg, Max: p[0], Window: p[1]}, nil
	case proto.Pacer:
		return bucket.Limit{Algorithm: bucket.Pacer, Count: p[0], Period: p[1], MaxDelay: p[2]}, nil
	}
	return bucket.Limit{}, bucketError{fmt.Errorf("unknown algorithm %d", w.Algorithm)}
}

// limitOf converts a wire limit to a validated engine limit.
func limitOf(w proto.Limit) (engine.Limit, error) {
	b, err := bucketLimit(w)
	if err != nil {
		return engine.Limit{}, err
	}
	l, err := engine.NewLimit(b)
	if err != nil {
		return engine.Limit{}, bucketError{err}
	}
	return l, nil
}

// get returns the validated engine limit for b, validating it only when it
// differs from the connection's previous one.
func (lc *limitCache) get(b bucket.Limit) (*engine.Limit, error) {
	if !lc.ok || lc.key != b {
		l, err := engine.NewLimit(b)
		if err != nil {
			return nil, bucketError{err}
		}
		lc.key, lc.l, lc.ok = b, l, true
	}
	return &lc.l, nil
}

// appendStats answers STATS: the table's counters and the server's.
func (s *server) appendStats(b []byte) []byte {
	st := s.engine.Table().Stats()
	g := s.engine.Table().Geometry()
	b, start := proto.BeginStatsResult(b)
	n := 0
	add := func(name string, v uint64) { b = proto.AppendStat(b, name, v); n++ }
	add("slot_count", st.SlotCount)
	add("slot_size", uint64(g.SlotSize))
	add("used_slots", st.Used)
	add("inserts", st.Inserts)
	add("reclaims", st.Reclaims)
	add("table_full", st.TableFull)
	add("torn_slots", st.Torn)
	add("locked_on_open", st.LockedOnOpen)
	add("syncs", st.Syncs)
	add("sync_errors", st.SyncErrors)
	c := &s.stats
	for _, kv := range []struct {
		name string
		v    *atomic.Int64
	}{
		{"connections", &c.conns}, {"connections_total", &c.connsTotal}, {"connections_rejected", &c.connsRejected},
		{"peers_denied", &c.peersDenied},
		{"frames", &c.frames}, {"ops", &c.ops}, {"allowed", &c.allowed}, {"denied", &c.denied},
		{"errors", &c.errors}, {"malformed", &c.malformed}, {"timeouts", &c.timeouts},
		{"buffered_bytes", &c.buffered},
	} {
		add(kv.name, uint64(kv.v.Load()))
	}
	return proto.EndStatsResult(b, start, n)
}
