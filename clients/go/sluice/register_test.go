package sluice_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clients/go/sluice"
	"github.com/sluicehq/sluice/proto"
)

// The register operations, on the sidecar's clock: set if absent,
// compare-and-swap, expiry, delete.
func TestClient_registers(t *testing.T) {
	sc := startSidecar(t)
	c := dial(t, sc.cfg.SocketPath)
	cx := ctx(t)
	check := func(what string, r sluice.Register, err error, ok, exists bool, value int64, ttl time.Duration) {
		t.Helper()
		if err != nil || r.OK != ok || r.Exists != exists || r.Value != value || r.TTL != ttl || r.Now.UnixNano() != sc.clock.Load() {
			t.Fatalf("%s: %+v, %v; want ok %v, exists %v, value %d, ttl %v at the sidecar's clock", what, r, err, ok, exists, value, ttl)
		}
	}
	r, err := c.GetRegister(cx, "tat")
	check("get of nothing", r, err, false, false, 0, 0)
	r, err = c.SetRegister(cx, "tat", 5, time.Minute)
	check("set", r, err, true, true, 5, time.Minute)
	sc.clock.Add(int64(10 * time.Second))
	r, err = c.SetRegister(cx, "tat", 6, time.Minute)
	check("set of one that exists", r, err, false, true, 5, 50*time.Second)
	r, err = c.CompareAndSwapRegister(cx, "tat", 4, 6, time.Minute)
	check("swap from another value", r, err, false, true, 5, 50*time.Second)
	r, err = c.CompareAndSwapRegister(cx, "tat", 5, 6, time.Minute)
	check("swap", r, err, true, true, 6, time.Minute)
	sc.clock.Add(int64(time.Minute))
	r, err = c.GetRegister(cx, "tat")
	check("get after its expiry", r, err, false, false, 0, 0)
	r, err = c.CompareAndSwapRegister(cx, "tat", 6, 7, time.Minute)
	check("swap after its expiry", r, err, false, false, 0, 0)
	r, err = c.SetRegister(cx, "tat", 8, time.Hour)
	check("set after its expiry", r, err, true, true, 8, time.Hour)
	r, err = c.DeleteRegister(cx, "tat")
	check("delete", r, err, true, false, 0, 0)
	r, err = c.GetRegister(cx, "tat")
	check("get after delete", r, err, false, false, 0, 0)
}

// Bad input is refused before it is sent, with what is wrong, and the
// connection stays up.
func TestClient_registerBadInput(t *testing.T) {
	sc := startSidecar(t)
	c := dial(t, sc.cfg.SocketPath)
	cx := ctx(t)
	for _, tc := range []struct {
		name string
		call func() (sluice.Register, error)
		want error
		msg  string
	}{
		{"ttl 0", func() (sluice.Register, error) { return c.SetRegister(cx, "k", 1, 0) }, sluice.ErrInvalidCost, "ttl is 1ns to"},
		{"ttl negative", func() (sluice.Register, error) { return c.CompareAndSwapRegister(cx, "k", 1, 2, -time.Second) }, sluice.ErrInvalidCost, "this one -1s"},
		{"ttl too long", func() (sluice.Register, error) { return c.SetRegister(cx, "k", 1, sluice.MaxRegisterTTL+1) }, sluice.ErrInvalidCost, "ttl is 1ns to"},
		{"empty key", func() (sluice.Register, error) { return c.GetRegister(cx, "") }, sluice.ErrInvalidKey, "1 to 1024 bytes"},
		{"huge key", func() (sluice.Register, error) { return c.SetRegister(cx, strings.Repeat("k", 1025), 1, time.Second) }, sluice.ErrInvalidKey, "this one 1025"},
	} {
		if _, err := tc.call(); !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v, want %v saying %q", tc.name, err, tc.want, tc.msg)
		}
	}
	if r, err := c.SetRegister(cx, "k", 1, sluice.MaxRegisterTTL); err != nil || !r.OK {
		t.Errorf("the longest ttl: %+v, %v", r, err)
	}
}

// A sidecar of version 5 does not know the register operations: the
// client says so, without sending one (the sidecar would close the
// connection on it), and the connection keeps serving.
func TestClient_registersOlderSidecar(t *testing.T) {
	path := sidecarOfVersion(t, 5, nil, func(b []byte, _ proto.Opcode) []byte { return proto.AppendPong(b) })
	c := dial(t, path, sluice.WithFailurePolicy(sluice.FailError))
	cx := context.Background()
	if _, err := c.GetRegister(cx, "k"); !errors.Is(err, sluice.ErrUnsupported) || !strings.Contains(err.Error(), "upgrade sluiced") {
		t.Fatalf("a register on a sidecar of version 5: %v", err)
	}
	if err := c.Ping(cx); err != nil {
		t.Fatalf("the connection after: %v", err)
	}
}
