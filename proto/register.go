package proto

import (
	"encoding/binary"
)

// The register operations (version 6): a register is a small value, an
// i64, kept under a key with an expiry, decided atomically by the server
// on its own clock. doc.go gives the layouts.

// Register body sizes, not counting the opcode byte (and, for results, the
// status byte).
const (
	registerFixed  = 1 + 8 + 8 + 8 + 2 // flags, old, value, ttl, keylen: 27
	registerResLen = 1 + 8 + 8 + 8     // ok, value, ttl, now: 25
)

// isRegisterOp reports whether c is one of the register operations.
func isRegisterOp(c Opcode) bool { return c >= OpRegGet && c <= OpRegDel }

// IsRegisterOp reports whether c is one of the register operations of
// version 6: REGGET, REGSET, REGCAS or REGDEL.
func IsRegisterOp(c Opcode) bool { return isRegisterOp(c) }

// AppendRegister appends a register operation (version 6): op, then flags
// (0), old (REGCAS: the value the register must hold; else 0), value
// (REGSET, REGCAS: the value to write; else 0), ttl (REGSET, REGCAS: ns
// the written register lives; else 0) and the key. It writes what it is
// given, and panics if op is not a register operation or the key is longer
// than its u16 length can say.
func AppendRegister(dst []byte, op Opcode, old, value, ttl int64, key []byte) []byte {
	if !isRegisterOp(op) {
		panic("proto: AppendRegister: " + op.String() + " is not a register operation")
	}
	dst = append(dst, byte(op), 0)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(old))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(value))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(ttl))
	return appendBytes16(dst, key)
}

// decodeRegister decodes a register operation's body.
func decodeRegister(b []byte, op *Op) ([]byte, error) {
	if len(b) < registerFixed {
		return nil, truncated(op.Code.String(), registerFixed, len(b))
	}
	if b[0] != 0 {
		return nil, errorf(ErrMalformed, "%v: reserved flag bits %#02x", op.Code, b[0])
	}
	op.Old = int64(binary.LittleEndian.Uint64(b[1:]))
	op.N = int64(binary.LittleEndian.Uint64(b[9:]))
	op.TTL = int64(binary.LittleEndian.Uint64(b[17:]))
	switch {
	case op.Code != OpRegCAS && op.Old != 0:
		return nil, errorf(ErrMalformed, "%v with old %d, want 0", op.Code, op.Old)
	case (op.Code == OpRegGet || op.Code == OpRegDel) && (op.N != 0 || op.TTL != 0):
		return nil, errorf(ErrMalformed, "%v with value %d and ttl %d, want 0", op.Code, op.N, op.TTL)
	}
	key, rest, err := bytes16(b[registerFixed-2:], 1, op.Code, "key")
	op.Key = key
	return rest, err
}

// Register is the body of a register operation's result (version 6).
type Register struct {
	// OK is REGGET's "the register exists", REGSET's "it was set" (it did
	// not exist), REGCAS's "it was swapped" and REGDEL's "it existed".
	OK bool
	// Value is the register's value after the operation; 0 if it does not
	// exist.
	Value int64
	// TTL is the time, ns, until the register expires; -1 if it does not
	// exist.
	TTL int64
	// Now is the server's clock when it decided, Unix ns.
	Now int64
}

// Exists reports whether the register exists after the operation.
func (r *Register) Exists() bool { return r.TTL >= 0 }

// AppendRegisterResult appends the OK result of a register operation op.
func AppendRegisterResult(dst []byte, op Opcode, r *Register) []byte {
	dst = append(dst, byte(op), byte(StatusOK), boolByte(r.OK))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(r.Value))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(r.TTL))
	return binary.LittleEndian.AppendUint64(dst, uint64(r.Now))
}

// decodeRegisterResult decodes a register result's body.
func decodeRegisterResult(b []byte, r *Result) ([]byte, error) {
	if len(b) < registerResLen {
		return nil, truncated(r.Code.String()+" result", registerResLen, len(b))
	}
	ok, err := decodeBool(b[0], "register result ok")
	if err != nil {
		return nil, err
	}
	r.Register = Register{
		OK:    ok,
		Value: int64(binary.LittleEndian.Uint64(b[1:])),
		TTL:   int64(binary.LittleEndian.Uint64(b[9:])),
		Now:   int64(binary.LittleEndian.Uint64(b[17:])),
	}
	if r.Register.TTL < -1 {
		return nil, errorf(ErrMalformed, "%v result with ttl %d", r.Code, r.Register.TTL)
	}
	return b[registerResLen:], nil
}
