package server

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/proto"
)

// sendVersion writes one request frame of protocol version v holding the
// operations ops appends, and returns the response's header and results.
func (c *client) sendVersion(v uint8, n int, ops func(b []byte) []byte) (proto.Header, []proto.Result) {
	c.t.Helper()
	c.next++
	b, start := proto.BeginFrameVersion(nil, v, proto.KindRequest, c.next)
	if _, err := c.c.Write(proto.EndFrame(ops(b), start, n)); err != nil {
		c.t.Fatal(err)
	}
	return c.recv()
}

// Each frame is answered in its version, every version from MinVersion on.
func TestServer_versions(t *testing.T) {
	sc := start(t, Config{})
	c := dial(t, sc)
	for v := uint8(proto.MinVersion); v <= proto.Version; v++ {
		h, rs := c.sendVersion(v, 2, func(b []byte) []byte {
			return proto.AppendItem(proto.AppendPing(b), proto.OpAcquire, 0, tb10, 1, 0, []byte("k"))
		})
		if h.Version != v || len(rs) != 2 || rs[0].Code != proto.OpPing || rs[1].Status != proto.StatusOK {
			t.Errorf("version %d: answered in version %d: %+v", v, h.Version, rs)
		}
	}
}

// In a frame of version 1 or 2, LEASE and RELEASE are unknown opcodes and
// the algorithms of version 3 unknown algorithms: the codec refuses them,
// and the connection closes.
func TestServer_version3InOlderFrames(t *testing.T) {
	sc := start(t, Config{})
	conc := proto.ConcurrencyLimit(10, 30*time.Second)
	for _, tc := range []struct {
		name string
		op   func(b []byte) []byte
		want proto.Status
	}{
		{"LEASE", func(b []byte) []byte { return proto.AppendLease(b, 0, conc, []byte("k")) }, proto.StatusUnknownOpcode},
		{"RELEASE", func(b []byte) []byte { return proto.AppendRelease(b, 0, conc, 1, []byte("k")) }, proto.StatusUnknownOpcode},
		{"sliding_log", func(b []byte) []byte {
			return proto.AppendItem(b, proto.OpAcquire, 0, proto.SlidingLogLimit(5, time.Second), 1, 0, []byte("k"))
		}, proto.StatusInvalidLimit},
	} {
		for _, v := range []uint8{1, 2} {
			c := dial(t, sc)
			h, rs := c.sendVersion(v, 1, tc.op)
			if h.Version != v || len(rs) != 1 || rs[0].Status != tc.want {
				t.Errorf("%s in version %d: version %d, %+v", tc.name, v, h.Version, rs)
			}
			if !c.closed() {
				t.Errorf("%s in version %d: connection left open", tc.name, v)
			}
		}
	}
}

// This server does not serve concurrency leases yet: LEASE and RELEASE
// (version 3) get an Unsupported error, and the connection goes on.
func TestServer_leaseUnsupported(t *testing.T) {
	sc := start(t, Config{})
	c := dial(t, sc)
	conc := proto.ConcurrencyLimit(10, 30*time.Second)
	for _, op := range []func(b []byte) []byte{
		func(b []byte) []byte { return proto.AppendLease(b, 0, conc, []byte("k")) },
		func(b []byte) []byte { return proto.AppendRelease(b, 0, conc, 7, []byte("k")) },
	} {
		h, rs := c.sendVersion(3, 1, op)
		if h.Version != 3 || len(rs) != 1 || rs[0].Status != proto.StatusUnsupported ||
			!strings.Contains(string(rs[0].Message), "LEASE") {
			t.Errorf("answered %+v", rs)
		}
	}
	if r := c.acquire("k", tb10, 1, 0); r.Status != proto.StatusOK {
		t.Errorf("after LEASE and RELEASE: %+v", r)
	}
}
