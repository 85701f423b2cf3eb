package sluice_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clients/go/sluice"
	"github.com/sluicehq/sluice/proto"
)

// A sidecar of protocol version 4 learns each named request's deadline:
// the client asks its version once per connection (HELLO), then sends
// requests on named limits in version 4 with DEADLINE, the call's
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
	path := fakeSidecar(t, func(fc *fakeConn) {
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
				fc.nc.Write(proto.EndFrame(proto.AppendHelloResult(b, &proto.Hello{Version: proto.Version,
					MaxFrame: proto.MaxFrameLen, MaxBatch: proto.MaxBatch, MaxKey: proto.MaxKeyLen, MaxMulti: proto.MaxMulti}), start, 1))
				continue
			}
			frames <- seen{h.Version, op.Flags, op.Deadline}
			d := proto.Decision{Limit: 10, RetryAfter: int64(5 * time.Millisecond)}
			b = proto.AppendDecision(b, op.Code, &d)
			if op.Flags&proto.FlagDeadline != 0 {
				b = proto.MarkOutage(b, proto.OutageClosed)
			}
			fc.nc.Write(proto.EndFrame(b, start, 1))
		}
	})
	const timeout = 200 * time.Millisecond
	c, err := sluice.Dial(path, sluice.WithTimeout(timeout), sluice.WithFailurePolicy(sluice.FailError))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 2 {
		start := time.Now()
		d, err := c.Acquire(context.Background(), sluice.Limit{Name: "login"}, "k", 1)
		end := time.Now()
		if err != nil || d.Allowed || d.Outage != "closed" || d.RetryAfter != 5*time.Millisecond {
			t.Fatalf("request %d: %+v, %v; want the closed policy's denial", i, d, err)
		}
		s := <-frames
		if s.version != 4 || s.flags&proto.FlagDeadline == 0 || s.deadline < start.Add(timeout).UnixNano() || s.deadline > end.Add(timeout).UnixNano() {
			t.Errorf("request %d: version %d, flags %v, deadline %v after the call began; want version 4, DEADLINE, %v",
				i, s.version, s.flags, time.Duration(s.deadline-start.UnixNano()), timeout)
		}
	}
	spec, _ := sluice.ParseLimit("token_bucket:max=10,refill_time=1s")
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if d, err := c.Acquire(ctx, spec, "k", 1); err != nil || d.Outage != "" {
		t.Fatalf("a spec limit: %+v, %v", d, err)
	}
	if s := <-frames; s.version != 1 || s.flags != 0 {
		t.Errorf("a spec limit's request: version %d, flags %v; want version 1 without a deadline", s.version, s.flags)
	}
}
