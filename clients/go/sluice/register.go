package sluice

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/proto"
)

// MaxRegisterTTL is the longest a register may be set to live: 2^31
// seconds, about 68 years.
const MaxRegisterTTL = time.Duration(1<<31) * time.Second

// Register is a register as the sidecar reported it after an operation:
// a value under a key, with an expiry, on the sidecar's clock (protocol
// version 6). Registers are apart from buckets: a register and a bucket
// of the same key are two things.
type Register struct {
	// OK is GetRegister's "it exists", SetRegister's "it was set",
	// CompareAndSwapRegister's "it was swapped" and DeleteRegister's "it
	// existed".
	OK bool
	// Exists reports whether the register exists after the operation.
	Exists bool
	// Value is its value after the operation; 0 if it does not exist.
	Value int64
	// TTL is the time until it expires; 0 if it does not exist.
	TTL time.Duration
	// Now is the sidecar's clock when it decided: the host's clock, as
	// the sidecar reads it (its clock never goes back).
	Now time.Time
}

// GetRegister reads key's register.
func (c *Client) GetRegister(ctx context.Context, key string) (Register, error) {
	return c.register(ctx, proto.OpRegGet, key, 0, 0, 0)
}

// SetRegister sets key's register to value, to live ttl (1ns to
// MaxRegisterTTL), if it does not exist or has expired; OK reports that
// it was set. Otherwise the register is unchanged and reported as it
// stands.
func (c *Client) SetRegister(ctx context.Context, key string, value int64, ttl time.Duration) (Register, error) {
	return c.register(ctx, proto.OpRegSet, key, 0, value, ttl)
}

// CompareAndSwapRegister sets key's register to value, to live ttl (1ns to
// MaxRegisterTTL) from now, if it exists and holds old; OK reports that it
// was swapped. Otherwise the register is unchanged and reported as it
// stands (Exists false: there is none). It is atomic across every process
// of the host.
func (c *Client) CompareAndSwapRegister(ctx context.Context, key string, old, value int64, ttl time.Duration) (Register, error) {
	return c.register(ctx, proto.OpRegCAS, key, old, value, ttl)
}

// DeleteRegister deletes key's register; OK reports that it existed.
func (c *Client) DeleteRegister(ctx context.Context, key string) (Register, error) {
	return c.register(ctx, proto.OpRegDel, key, 0, 0, 0)
}

// register sends one register operation. The failure policy does not
// apply: a register is storage, not a decision, and an unreachable
// sidecar is an error (ErrUnavailable).
func (c *Client) register(ctx context.Context, op proto.Opcode, key string, old, value int64, ttl time.Duration) (Register, error) {
	if err := checkKey(op, key); err != nil {
		return Register{}, err
	}
	if (op == proto.OpRegSet || op == proto.OpRegCAS) && (ttl < 1 || ttl > MaxRegisterTTL) {
		return Register{}, refused(op, proto.StatusInvalidCost, "a register's ttl is 1ns to %v, this one %v", MaxRegisterTTL, ttl)
	}
	if err := c.registersSpoken(ctx, op); err != nil {
		return Register{}, err
	}
	cl := getCall(op)
	cl.key = append(cl.key[:0], key...)
	b, start := proto.BeginFrameVersion(cl.req[:0], proto.RegisterVersion, proto.KindRequest, 0)
	b = proto.AppendRegister(b, op, old, value, int64(ttl), cl.key)
	cl.req = proto.EndFrame(b, start, 1)
	if err := c.roundTrip(ctx, cl); err != nil {
		return Register{}, err
	}
	defer putCall(cl)
	if err := statusError(op, cl.res.Status, cl.res.Message); err != nil {
		return Register{}, err
	}
	w := &cl.res.Register
	r := Register{OK: w.OK, Exists: w.Exists(), Value: w.Value, Now: time.Unix(0, w.Now)}
	if r.Exists {
		r.TTL = time.Duration(w.TTL)
	}
	return r, nil
}

// registersSpoken checks that the sidecar speaks the register operations'
// version before one is sent: a sidecar of an older version would close
// the connection on the frame, failing every call on it.
func (c *Client) registersSpoken(ctx context.Context, op proto.Opcode) error {
	d, ok, _ := callDeadline(ctx, time.Now(), c.opt.timeout)
	v := c.sidecarSpeaks(ctx, d, ok)
	if v == 0 { // not connected yet, or not asked: connect, and ask
		if err := c.Ping(ctx); err != nil {
			return err
		}
		v = c.sidecarSpeaks(ctx, d, ok)
	}
	switch {
	case v == 0:
		return unavailable("the sidecar did not say which protocol version it speaks", nil)
	case v < proto.RegisterVersion:
		return refused(op, proto.StatusUnsupported, "the sidecar speaks protocol version %d, and registers need version %d: upgrade sluiced", v, proto.RegisterVersion)
	}
	return nil
}
