package server

import (
	"net"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/proto"
)

// BenchmarkList measures serial round trips of an ACQUIRE of a named list
// of two limits with flag ALL (each limit's decision in the answer) beside
// the same without it (one decision, as before version 7), and beside a
// name that is one limit: what the list and the longer answer cost.
func BenchmarkList(b *testing.B) {
	set, err := config.Parse("sluice.yaml", []byte(`limits:
  login: ["gcra:burst=1000000,count=1000000,period=1s", "token_bucket:max=1000000000,refill_time=1s"]
  one: "gcra:burst=1000000,count=1000000,period=1s"
`))
	if err != nil {
		b.Fatal(err)
	}
	sc := start(b, Config{Limits: config.NewHolder(set), Now: func() int64 { return time.Now().UnixNano() }})
	for _, c := range []struct {
		name  string
		limit string
		flags proto.Flags
	}{{"list/all", "login", proto.FlagAll}, {"list/one-decision", "login", 0}, {"one-limit", "one", proto.FlagAll}} {
		b.Run(c.name, func(b *testing.B) {
			nc, err := net.Dial("unix", sc.cfg.SocketPath)
			if err != nil {
				b.Fatal(err)
			}
			defer nc.Close()
			req, start := proto.BeginFrame(nil, proto.KindRequest, 1)
			req = proto.EndFrame(proto.AppendItem(req, proto.OpAcquire, c.flags, proto.Named(c.limit), 1, 0, []byte("user:42")), start, 1)
			resp := make([]byte, proto.HeaderLen+proto.MaxFrameLen)
			var r proto.Result
			want := 0 // limits in the answer
			if c.flags != 0 && c.limit == "login" {
				want = 2
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := nc.Write(req); err != nil {
					b.Fatal(err)
				}
				if _, err := readFull(nc, resp[:proto.HeaderLen]); err != nil {
					b.Fatal(err)
				}
				h, err := proto.ParseHeader(resp)
				if err != nil {
					b.Fatal(err)
				}
				n := 4 + int(h.Length)
				if _, err := readFull(nc, resp[proto.HeaderLen:n]); err != nil {
					b.Fatal(err)
				}
				if _, err := proto.DecodeResult(resp[proto.HeaderLen:n], &r); err != nil || !r.Decision.Allowed || r.NLimits != want {
					b.Fatalf("%+v, %v", r.Decision, err)
				}
			}
		})
	}
}
