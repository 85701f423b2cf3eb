package server

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/proto"
)

// The register operations over the wire: version 6 frames, the server's
// clock, the statuses of bad input, and version 5 frames refusing them.
func TestServer_registers(t *testing.T) {
	sc := start(t, Config{})
	c := dial(t, sc)
	reg := func(code proto.Opcode, old, value, ttl int64, key string) proto.Result {
		t.Helper()
		_, rs := c.sendVersion(6, 1, func(b []byte) []byte { return proto.AppendRegister(b, code, old, value, ttl, []byte(key)) })
		if len(rs) != 1 || rs[0].Code != code {
			t.Fatalf("%v: %+v", code, rs)
		}
		return rs[0]
	}
	r := reg(proto.OpRegGet, 0, 0, 0, "tat")
	if r.Status != proto.StatusOK || r.Register.OK || r.Register.TTL != -1 || r.Register.Now <= 0 {
		t.Fatalf("REGGET of nothing: %+v", r)
	}
	hour := int64(time.Hour)
	if r = reg(proto.OpRegSet, 0, 41, hour, "tat"); !r.Register.OK || r.Register.Value != 41 || r.Register.TTL != hour {
		t.Fatalf("REGSET: %+v", r)
	}
	if r = reg(proto.OpRegSet, 0, 5, hour, "tat"); r.Register.OK || r.Register.Value != 41 {
		t.Fatalf("REGSET of a register that exists: %+v", r)
	}
	if r = reg(proto.OpRegCAS, 40, 42, hour, "tat"); r.Register.OK || r.Register.Value != 41 {
		t.Fatalf("REGCAS of another value: %+v", r)
	}
	if r = reg(proto.OpRegCAS, 41, 42, hour, "tat"); !r.Register.OK || r.Register.Value != 42 {
		t.Fatalf("REGCAS: %+v", r)
	}
	if r = reg(proto.OpRegGet, 0, 0, 0, "tat"); !r.Register.OK || r.Register.Value != 42 || r.Register.TTL <= 0 || r.Register.TTL > hour {
		t.Fatalf("REGGET: %+v", r)
	}
	if r = reg(proto.OpRegDel, 0, 0, 0, "tat"); !r.Register.OK {
		t.Fatalf("REGDEL: %+v", r)
	}
	for _, tc := range []struct {
		name string
		res  proto.Result
		want proto.Status
		msg  string
	}{
		{"ttl 0", reg(proto.OpRegSet, 0, 1, 0, "tat"), proto.StatusInvalidCost, "ttl must be at least 1ns"},
		{"ttl negative", reg(proto.OpRegCAS, 1, 2, -1, "tat"), proto.StatusInvalidCost, "ttl must be at least 1ns"},
	} {
		if tc.res.Status != tc.want || !strings.Contains(string(tc.res.Message), tc.msg) {
			t.Errorf("%s: %v %q, want %v with %q", tc.name, tc.res.Status, tc.res.Message, tc.want, tc.msg)
		}
	}
	// A key too long is refused by the codec: the connection closes.
	_, rs := c.sendVersion(6, 1, func(b []byte) []byte {
		return proto.AppendRegister(b, proto.OpRegGet, 0, 0, 0, []byte(strings.Repeat("k", proto.MaxKeyLen+1)))
	})
	if len(rs) != 1 || rs[0].Status != proto.StatusInvalidKey || !c.closed() {
		t.Errorf("a key of %d bytes: %+v", proto.MaxKeyLen+1, rs)
	}
	// Before version 6 the opcodes are unknown.
	old := dial(t, sc)
	h, rs := old.sendVersion(5, 1, func(b []byte) []byte { return proto.AppendRegister(b, proto.OpRegGet, 0, 0, 0, []byte("tat")) })
	if h.Version != 5 || len(rs) != 1 || rs[0].Status != proto.StatusUnknownOpcode {
		t.Errorf("REGGET in version 5: version %d, %+v", h.Version, rs)
	}
}
