package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clients/go/sluice"
	"github.com/sluicehq/sluice/proto"
)

// A sidecar of protocol version 4 learns each named request's deadline:
// the client asks its version once per connection (HELLO), then sends
// requests on named limits in version 4 with DEADLINE (in version 7, with
// ALL too, to a sidecar of version 7, as this one says it is), the call's
// deadline in the at field; a spec limit's request goes as before. A
// decision the sidecar marks as its outage policy's says so in
// Decision.Outage.
func TestClient_deadline(t *testing.T) {
	type seen struct {
		version  uint8
		flags    proto.Flags
		deadline int64
	}
	frames := make(chan seen, 16)
	path := version4Sidecar(t, func(h proto.Header, op *proto.Op, b []byte) []byte {
		frames <- seen{h.Version, op.Flags, op.Deadline}
		d := proto.Decision{Limit: 10, RetryAfter: int64(5 * time.Millisecond)}
		b = proto.AppendDecision(b, op.Code, &d)
		if op.Flags&proto.FlagDeadline != 0 {
			b = proto.MarkOutage(b, proto.OutageClosed)
		}
		return b
	})
	const timeout = testTimeout
	c := dial(t, path, sluice.WithFailurePolicy(sluice.FailError))
	for i := range 2 {
		start := time.Now()
		d, err := c.Acquire(context.Background(), sluice.Limit{Name: "login"}, "k", 1)
		end := time.Now()
		if err != nil || d.Allowed || d.Outage != "closed" || d.RetryAfter != 5*time.Millisecond {
			t.Fatalf("request %d: %+v, %v; want the closed policy's denial", i, d, err)
		}
		s := <-frames
		if s.version != proto.ListVersion || s.flags&proto.FlagDeadline == 0 || s.flags&proto.FlagAll == 0 || s.deadline < start.Add(timeout).UnixNano() || s.deadline > end.Add(timeout).UnixNano() {
			t.Errorf("request %d: version %d, flags %v, deadline %v after the call began; want version 7, DEADLINE and ALL, %v",
				i, s.version, s.flags, time.Duration(s.deadline-start.UnixNano()), timeout)
		}
	}
	spec, _ := sluice.ParseLimit("token_bucket:max=10,refill_time=1s")
	if d, err := c.Acquire(ctx(t), spec, "k", 1); err != nil || d.Outage != "" { // with a deadline
		t.Fatalf("a spec limit: %+v, %v", d, err)
	}
	if s := <-frames; s.version != 1 || s.flags != 0 {
		t.Errorf("a spec limit's request: version %d, flags %v; want version 1 without a deadline", s.version, s.flags)
	}
	// Without a timeout or a deadline, a named request still goes in
	// version 4, so that its answer can say whether the limit fails closed.
	c0 := dial(t, path, sluice.WithTimeout(0))
	if _, err := c0.Acquire(context.Background(), sluice.Limit{Name: "login"}, "k", 1); err != nil {
		t.Fatal(err)
	}
	if s := <-frames; s.version != proto.ListVersion || s.flags != proto.FlagAll|proto.FlagNamed {
		t.Errorf("a named request without a deadline: version %d, flags %v; want version 7 with ALL, without DEADLINE", s.version, s.flags)
	}
}

// The modes of failsClosedSidecar.
const (
	answerClosed int32 = iota // decisions say the limit fails closed
	answerPlain               // decisions say nothing of it
	answerError               // every decision fails with Internal
	answerNone                // requests are read and never answered
)

// failsClosedSidecar returns the socket of a fake sidecar of protocol
// version 4 that answers each ACQUIRE and PEEK as mode says when it reads
// it: allowed, marked as failing closed or not, an Internal error, or not
// at all.
func failsClosedSidecar(t *testing.T, mode *atomic.Int32) string {
	return version4Sidecar(t, func(h proto.Header, op *proto.Op, b []byte) []byte {
		switch mode.Load() {
		case answerNone:
			return nil
		case answerError:
			return proto.AppendError(b, op.Code, proto.StatusInternal, "fake")
		}
		d := proto.Decision{Allowed: true, Remaining: 5, Limit: 10, RetryAfter: -1}
		b = proto.AppendDecision(b, op.Code, &d)
		if mode.Load() == answerClosed && h.Version >= 4 {
			b = proto.MarkFailsClosed(b)
		}
		return b
	})
}

// version4Sidecar returns the socket of a fake sidecar of protocol version
// 4: it answers HELLO, and each other request (one operation a frame) with
// the result answer appends to b, or not at all if answer returns nil.
func version4Sidecar(t *testing.T, answer func(h proto.Header, op *proto.Op, b []byte) []byte) string {
	return fakeSidecar(t, func(fc *fakeConn) {
		var op proto.Op
		for {
			h, frame, ok := fc.next()
			if !ok {
				return
			}
			if _, err := proto.DecodeOpVersion(frame[proto.HeaderLen:], h.Version, &op); err != nil {
				t.Error(err)
				return
			}
			b, start := proto.BeginFrameVersion(nil, h.Version, proto.KindResponse, h.ID)
			if op.Code == proto.OpHello {
				b = proto.AppendHelloResult(b, &proto.Hello{Version: proto.Version,
					MaxFrame: proto.MaxFrameLen, MaxBatch: proto.MaxBatch, MaxKey: proto.MaxKeyLen, MaxMulti: proto.MaxMulti})
			} else if b = answer(h, &op, b); b == nil {
				continue
			}
			fc.nc.Write(proto.EndFrame(b, start, 1))
		}
	})
}

// A client that has heard that a limit fails closed denies the limit's
// requests the sidecar does not answer, whatever its failure policy would
// do: in Acquire, Peek, a Pipeline and the middleware, each denial
// Degraded and marked Outage "closed"; other limits' requests still fail
// open, and FailError still returns the error. A decision without the mark
// makes it forget. (The sidecar's silence is what is tested: the client's
// timeout is short, and the decisions it learns from are asked until one
// is answered in time.)
func TestClient_failsClosed(t *testing.T) {
	var mode atomic.Int32
	path := failsClosedSidecar(t, &mode)
	c := dial(t, path, sluice.WithTimeout(100*time.Millisecond))
	cErr := dial(t, path, sluice.WithTimeout(100*time.Millisecond), sluice.WithFailurePolicy(sluice.FailError))
	cx := ctx(t)
	login, other := sluice.Limit{Name: "login"}, sluice.Limit{Name: "other"}
	learn := func(c *sluice.Client, closed bool) {
		t.Helper()
		eventually(t, func() error {
			d, err := c.Acquire(cx, login, "k", 1)
			if err != nil || d.Degraded || d.FailsClosed != closed {
				return fmt.Errorf("%+v, %v; want the sidecar's decision, fails closed %v", d, err, closed)
			}
			return nil
		})
	}
	closedDenial := func(what string, d sluice.Decision, err error) {
		t.Helper()
		if err != nil || d.Allowed || !d.Degraded || d.Outage != "closed" || !d.FailsClosed || d.RetryAfter <= 0 {
			t.Errorf("%s: %+v, %v; want a degraded denial marked closed", what, d, err)
		}
	}
	openAdmission := func(what string, d sluice.Decision, err error) {
		t.Helper()
		if err != nil || !d.Allowed || !d.Degraded || d.Outage != "" || d.FailsClosed {
			t.Errorf("%s: %+v, %v; want the fail-open admission", what, d, err)
		}
	}

	learn(c, true)
	learn(cErr, true)
	cPipe := dial(t, path, sluice.WithTimeout(100*time.Millisecond))
	eventually(t, func() error { // a pipeline's decisions teach too
		p := cPipe.Pipeline()
		p.Peek(login, "k")
		rs, err := p.Exec(cx)
		if err != nil || rs[0].Decision.Degraded || !rs[0].Decision.FailsClosed {
			return fmt.Errorf("%+v, %v; want the sidecar's decision, failing closed", rs[0], err)
		}
		return nil
	})
	mode.Store(answerNone)
	d, err := cPipe.Acquire(cx, login, "k", 1)
	closedDenial("acquire after a pipeline's decision", d, err)
	for i := range 5 { // timeouts, then the open breaker
		d, err := c.Acquire(cx, login, "k", 1)
		closedDenial(fmt.Sprint("acquire ", i), d, err)
	}
	d, err = c.Peek(cx, login, "k")
	closedDenial("peek", d, err)
	d, err = c.Acquire(cx, other, "k", 1)
	openAdmission("another limit", d, err)
	p := c.Pipeline()
	p.Acquire(login, "k", 1)
	p.Peek(login, "k")
	p.Acquire(other, "k", 1)
	rs, _ := p.Exec(cx)
	closedDenial("pipelined acquire", rs[0].Decision, rs[0].Err)
	closedDenial("pipelined peek", rs[1].Decision, rs[1].Err)
	openAdmission("pipelined acquire of another limit", rs[2].Decision, rs[2].Err)
	var served atomic.Int64
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served.Add(1) })
	if res := serve(sluice.Middleware(c, login, byPath)(handler), "/m"); res.StatusCode != http.StatusTooManyRequests {
		t.Errorf("the middleware: %d, want 429", res.StatusCode)
	}
	if res := serve(sluice.Middleware(c, other, byPath)(handler), "/m"); res.StatusCode != http.StatusOK {
		t.Errorf("the middleware of another limit: %d, want 200", res.StatusCode)
	}
	if _, err := cErr.Acquire(cx, login, "k", 1); !errors.Is(err, sluice.ErrUnavailable) {
		t.Errorf("FailError: %v, want ErrUnavailable", err)
	}

	// A sidecar that cannot decide (an internal error): the middleware's
	// failure policy decides, and denies too.
	mode.Store(answerPlain)
	learn(c, false) // the breaker closes
	mode.Store(answerClosed)
	learn(c, true)
	mode.Store(answerError)
	if res := serve(sluice.Middleware(c, login, byPath)(handler), "/m"); res.StatusCode != http.StatusTooManyRequests {
		t.Errorf("the middleware, an internal error: %d, want 429", res.StatusCode)
	}
	if served.Load() != 1 {
		t.Errorf("the handler served %d requests, want only the other limit's", served.Load())
	}

	// A decision without the mark: the client forgets.
	mode.Store(answerPlain)
	learn(c, false)
	mode.Store(answerNone)
	d, err = c.Acquire(cx, login, "k", 1)
	openAdmission("after a decision without the mark", d, err)
}

// A Multi's decisions carry the outage marks of a sidecar of protocol
// version 7, and teach the client which of its named items' limits fail
// closed, as an Acquire's decision does: while the sidecar does not
// answer, a Multi with such an item and an Acquire on it are denied,
// marked closed, and a Multi without one fails open.
func TestClient_multiFailsClosed(t *testing.T) {
	var silent atomic.Bool
	path := version4Sidecar(t, func(h proto.Header, op *proto.Op, b []byte) []byte {
		if silent.Load() {
			return nil
		}
		if op.Code != proto.OpMulti {
			t.Errorf("opcode %v, want MULTI", op.Code)
			return nil
		}
		ds := make([]proto.Decision, op.NItems)
		for i := range ds {
			ds[i] = proto.Decision{Limit: 5, RetryAfter: int64(time.Millisecond)}
		}
		b = proto.AppendMultiResult(b, false, ds)
		for i := range ds {
			if h.Version >= proto.ListVersion {
				b = proto.MarkMulti(b, len(ds), i, proto.Marks{Outage: proto.OutageClosed, FailsClosed: string(op.Items[i].Name) == "login"})
			}
		}
		return b
	})
	c := dial(t, path, sluice.WithTimeout(100*time.Millisecond))
	cx := ctx(t)
	login, other := sluice.Limit{Name: "login"}, sluice.Limit{Name: "other"}
	items := []sluice.Item{{Limit: other, Key: "{k}:a", Cost: 1}, {Limit: login, Key: "{k}:b", Cost: 1}}
	eventually(t, func() error {
		ok, ds, err := c.Multi(cx, items)
		if err != nil || ok || len(ds) != 2 || ds[0].Degraded || ds[0].Outage != "closed" || ds[0].FailsClosed ||
			ds[1].Outage != "closed" || !ds[1].FailsClosed {
			return fmt.Errorf("%v %+v, %v; want the sidecar's marked decisions", ok, ds, err)
		}
		return nil
	})
	silent.Store(true)
	ok, ds, err := c.Multi(cx, items)
	if err != nil || ok || len(ds) != 2 || !ds[0].Degraded || ds[0].Outage != "closed" || !ds[1].FailsClosed {
		t.Errorf("a Multi with an item that fails closed, no answer: %v %+v, %v; want a degraded denial marked closed", ok, ds, err)
	}
	d, err := c.Acquire(cx, login, "{k}:b", 1)
	if err != nil || d.Allowed || !d.Degraded || d.Outage != "closed" {
		t.Errorf("an Acquire on the item's limit, no answer: %+v, %v; want a degraded denial marked closed", d, err)
	}
	ok, ds, err = c.Multi(cx, items[:1])
	if err != nil || !ok || !ds[0].Degraded || ds[0].Outage != "" {
		t.Errorf("a Multi without such an item, no answer: %v %+v, %v; want the fail-open admission", ok, ds, err)
	}
}
