package proto

import (
	"encoding/binary"
	"math"
	"strconv"
)

// Opcode names an operation: the first byte of every operation and of its
// result.
type Opcode uint8

// The opcodes. doc.go gives each body layout.
const (
	OpHello   Opcode = 1  // protocol version and server limits
	OpPing    Opcode = 2  // liveness
	OpAcquire Opcode = 3  // decide and, if allowed, consume n
	OpPeek    Opcode = 4  // the bucket as it stands, changing nothing
	OpRefund  Opcode = 5  // give n tokens back
	OpReset   Opcode = 6  // forget the bucket
	OpMulti   Opcode = 7  // up to MaxMulti acquires, all or nothing
	OpScan    Opcode = 8  // list buckets by key prefix
	OpStats   Opcode = 9  // server counters
	OpLease   Opcode = 10 // version 3: take a slot of a concurrency limit, for a lease id
	OpRelease Opcode = 11 // version 3: give a lease's slot back
	OpRegGet  Opcode = 12 // version 6: a register's value, its expiry and the server's clock
	OpRegSet  Opcode = 13 // version 6: set a register that does not exist
	OpRegCAS  Opcode = 14 // version 6: compare a register's value and swap it
	OpRegDel  Opcode = 15 // version 6: delete a register

	numOpcodes = 16 // one past the last Opcode
)

var opNames = [numOpcodes]string{
	"", "HELLO", "PING", "ACQUIRE", "PEEK", "REFUND", "RESET", "MULTI", "SCAN", "STATS", "LEASE", "RELEASE",
	"REGGET", "REGSET", "REGCAS", "REGDEL",
}

// String returns the operation's name ("ACQUIRE"), or "opcode(N)" for a
// value outside the enum.
func (c Opcode) String() string {
	if c.Valid() {
		return opNames[c]
	}
	return "opcode(" + strconv.Itoa(int(c)) + ")"
}

// Valid reports whether c is one of the opcodes of this version (Version).
func (c Opcode) Valid() bool { return c >= OpHello && c < numOpcodes }

// ValidIn reports whether c is one of the opcodes of protocol version v:
// LEASE and RELEASE are version 3's, the register operations version 6's.
func (c Opcode) ValidIn(v uint8) bool {
	switch {
	case v < 3:
		return c >= OpHello && c <= OpStats
	case v < 6:
		return c >= OpHello && c <= OpRelease
	}
	return c.Valid()
}

// isItemOp reports whether c's body is the item layout.
func isItemOp(c Opcode) bool { return c >= OpAcquire && c <= OpReset || isLeaseOp(c) }

// isLeaseOp reports whether c is LEASE or RELEASE.
func isLeaseOp(c Opcode) bool { return c == OpLease || c == OpRelease }

// Flags modify an operation. Bits not defined for an operation must be 0.
type Flags uint8

// The flag bits.
const (
	// FlagStrict: a request that leaves a token_bucket at 0, or is denied,
	// restarts its refill clock (smyte/ratelimit STRICT).
	FlagStrict Flags = 1
	// FlagSmyte: smyte/ratelimit compatibility for token_bucket: a denial
	// drains the bucket and Remaining is the count before the deduction.
	FlagSmyte Flags = 2
	// FlagAt: At is the request time, Unix ns, instead of the server clock.
	FlagAt Flags = 4
	// FlagNamed (version 2): the limit is named, not given by its
	// parameters: the limit field holds its name. The encoders set it from
	// Limit.Name.
	FlagNamed Flags = 8
	// FlagShadow (version 2, ACQUIRE): decide and consume as usual, but
	// answer a denial as allowed, marked shadow-denied (Result.ShadowDenied),
	// as a shadow limit's are.
	FlagShadow Flags = 16
	// FlagDeadline (version 4; ACQUIRE, PEEK, REFUND, RESET): the at field
	// holds the client's deadline instead of a request time: the moment,
	// Unix ns on the host's clock, at which the client stops waiting for
	// the answer. Not with FlagAt. A server answers a global limit's
	// request before it, by the limit's outage policy if Redis has not
	// answered (Op.Deadline).
	FlagDeadline Flags = 32
	// FlagAll (version 7; ACQUIRE, PEEK, REFUND, RESET): answer a named
	// limit that lists several limits with the decision of each of them
	// too (Result.Limits), not only their combination. A limit that is
	// one limit is answered as without it; RESET ignores it.
	FlagAll Flags = 64

	itemFlags      = FlagStrict | FlagSmyte | FlagAt | FlagNamed | FlagShadow | FlagDeadline | FlagAll // item operations
	leaseFlags     = FlagNamed                                                                         // LEASE and RELEASE
	multiFlags     = FlagAt                                                                            // the MULTI as a whole
	multiItemFlags = FlagStrict | FlagSmyte | FlagNamed                                                // each MULTI item
)

// allowedFlags returns the flags of mask that frames of version v may set.
func allowedFlags(mask Flags, v uint8) Flags {
	switch {
	case v < 2:
		return mask &^ (FlagNamed | FlagShadow | FlagDeadline | FlagAll)
	case v < 4:
		return mask &^ (FlagDeadline | FlagAll)
	case v < 7:
		return mask &^ FlagAll
	}
	return mask
}

// Body sizes, not counting the opcode byte, with a limit given by its
// parameters (a named limit's field is 1 + its name's length instead).
const (
	itemFixed      = 1 + limitLen + 8 + 8 + 2 // flags, limit, n, at, keylen: 44
	itemTail       = 8 + 8 + 2                // n, at, keylen: after the limit
	multiFixed     = 1 + 8 + 1                // flags, at, n: 10
	multiItemFixed = 1 + limitLen + 8 + 2     // flags, limit, cost, keylen: 36
	multiItemTail  = 8 + 2                    // cost, keylen: after the limit
	scanFixed      = 8 + 2 + 2                // cursor, count, prefixlen: 12
)

// MultiItem is one acquire of a MULTI. Its time is the MULTI's.
type MultiItem struct {
	Flags Flags // FlagStrict, FlagSmyte; FlagNamed when decoded from a named limit
	Limit Limit
	Cost  int64  // tokens to take, >= 0
	Key   []byte // 1..MaxKeyLen bytes; decoded, it aliases the frame
	// Name is a decoded named limit's name (Limit is then zero); it
	// aliases the frame. Encoders read Limit.Name instead.
	Name []byte
}

// Op is one decoded request operation. Which fields apply depends on Code:
//
//	HELLO, PING, STATS         none
//	ACQUIRE, PEEK, REFUND, RESET  Flags, Limit, N, At, Deadline, Key
//	LEASE                      Flags (FlagNamed only), Limit, N (always 1), Key
//	RELEASE                    Flags (FlagNamed only), Limit, Lease, Key
//	MULTI                      Flags (FlagAt only), At, Items[:NItems]
//	SCAN                       Cursor, Count, Prefix
//	REGGET, REGDEL             Key
//	REGSET                     N (the value), TTL, Key
//	REGCAS                     Old, N (the new value), TTL, Key
//
// Deadline is the at field of an operation with FlagDeadline (At is then
// 0), else 0.
// At is meaningful only with FlagAt, which LEASE and RELEASE may not set
// (leases are on the server's clock; At then holds the field as sent, which
// a server ignores); N is the cost (ACQUIRE), the amount (REFUND), and
// ignored for PEEK and RESET. Key, Prefix and Items[i].Key alias the
// decoded bytes: they are valid until the buffer is reused.
// DecodeOp sets every field that applies and zeroes the others, but leaves
// Items[NItems:] unspecified. An Op is large (about 1.3 KiB): reuse one.
type Op struct {
	Code     Opcode
	Flags    Flags
	Limit    Limit
	Name     []byte // with FlagNamed, the limit's name (Limit is then zero); it aliases the frame
	N        int64
	At       int64
	Deadline int64 // with FlagDeadline: the client's deadline, Unix ns
	Key      []byte
	Lease    uint64 // RELEASE: the lease to give back, never 0
	Old      int64  // REGCAS: the value the register must hold
	TTL      int64  // REGSET, REGCAS: ns the register lives after it is written

	Items  [MaxMulti]MultiItem
	NItems int

	Cursor uint64
	Count  uint16
	Prefix []byte
}

// AppendHello appends a HELLO operation.
func AppendHello(dst []byte) []byte { return append(dst, byte(OpHello)) }

// AppendPing appends a PING operation.
func AppendPing(dst []byte) []byte { return append(dst, byte(OpPing)) }

// AppendStats appends a STATS operation.
func AppendStats(dst []byte) []byte { return append(dst, byte(OpStats)) }

// AppendItem appends an operation of the item layout, ACQUIRE, PEEK,
// REFUND or RESET (or LEASE and RELEASE, for which AppendLease and
// AppendRelease are simpler): op, then flags, the limit, n (the cost or
// amount; 0 for PEEK and RESET), at (Unix ns, read only with FlagAt or, as
// the deadline, FlagDeadline; else 0) and the key. It writes what it is given, checking nothing a peer
// would reject, and panics if op is not one of the six or the key is
// longer than its u16 length can say.
func AppendItem(dst []byte, op Opcode, f Flags, l Limit, n, at int64, key []byte) []byte {
	if !isItemOp(op) {
		panic("proto: AppendItem: " + op.String() + " is not an item operation")
	}
	dst = append(dst, byte(op), byte(f&^FlagNamed|opLimitFlags(op, &l)))
	dst = appendLimit(dst, &l)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(n))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(at))
	return appendBytes16(dst, key)
}

// AppendLease appends a LEASE operation (version 3): take one slot of the
// concurrency limit l for key. f is 0, or FlagNamed, which the encoder sets
// from l anyway. The item's n is 1 and its at 0.
func AppendLease(dst []byte, f Flags, l Limit, key []byte) []byte {
	return AppendItem(dst, OpLease, f, l, 1, 0, key)
}

// AppendRelease appends a RELEASE operation (version 3): give back the slot
// of lease, the id a LEASE of the same limit and key returned (never 0). f
// is as AppendLease's. The item's n holds the lease id's 64 bits, its at 0.
func AppendRelease(dst []byte, f Flags, l Limit, lease uint64, key []byte) []byte {
	return AppendItem(dst, OpRelease, f, l, int64(lease), 0, key)
}

// AppendMulti appends a MULTI operation: flags (FlagAt or 0), at, and the
// items. It panics if there are more than 255 items or a key is longer than
// 65535 bytes; a peer rejects more than MaxMulti items or a key above
// MaxKeyLen.
func AppendMulti(dst []byte, f Flags, at int64, items []MultiItem) []byte {
	if len(items) > math.MaxUint8 {
		panic("proto: AppendMulti: " + strconv.Itoa(len(items)) + " items")
	}
	dst = append(dst, byte(OpMulti), byte(f))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(at))
	dst = append(dst, byte(len(items)))
	for i := range items {
		it := &items[i]
		dst = append(dst, byte(it.Flags&^FlagNamed|limitFlags(&it.Limit)))
		dst = appendLimit(dst, &it.Limit)
		dst = binary.LittleEndian.AppendUint64(dst, uint64(it.Cost))
		dst = appendBytes16(dst, it.Key)
	}
	return dst
}

// AppendScan appends a SCAN operation: list up to count (1..MaxScanCount)
// buckets whose key starts with prefix, from cursor (0 to start, then the
// previous result's next).
func AppendScan(dst []byte, cursor uint64, count uint16, prefix []byte) []byte {
	dst = append(dst, byte(OpScan))
	dst = binary.LittleEndian.AppendUint64(dst, cursor)
	dst = binary.LittleEndian.AppendUint16(dst, count)
	return appendBytes16(dst, prefix)
}

// appendBytes16 appends len(p) as a u16 and p, panicking if it does not fit.
func appendBytes16(dst, p []byte) []byte {
	if len(p) > math.MaxUint16 {
		panic("proto: " + strconv.Itoa(len(p)) + " bytes do not fit a u16 length")
	}
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(p)))
	return append(dst, p...)
}

// DecodeOp decodes the operation at the start of b into op and returns the
// bytes after it. It checks every length against the bytes present and
// against the limits, the flag bits, the opcode and the algorithm (those
// of the frame's version), the counts, and a LEASE's n (1) and a RELEASE's
// lease id (not 0), and nothing else: the server judges costs and
// parameters. Errors wrap ErrMalformed (truncated, reserved flags, counts
// out of range, a LEASE's n, a RELEASE's lease 0), ErrUnknownOpcode,
// ErrInvalidLimit, ErrInvalidKey or ErrTooManyItems; on
// error rest is nil, because the operations after a bad one cannot be
// located, and op.Code is the opcode byte if b has one. DecodeOp allocates nothing; the
// slices it stores alias b (see Op).
func DecodeOp(b []byte, op *Op) (rest []byte, err error) {
	return DecodeOpVersion(b, Version, op)
}

// DecodeOpVersion is DecodeOp for an operation of a frame of version v
// (MinVersion..Version): a version-1 operation may not use FlagNamed, and
// an operation of version 1 or 2 may not be a LEASE or RELEASE (they are
// unknown opcodes there) nor carry an algorithm of version 3 (an invalid
// limit there).
func DecodeOpVersion(b []byte, v uint8, op *Op) (rest []byte, err error) {
	if len(b) == 0 {
		return nil, truncated("operation", 1, 0)
	}
	code := Opcode(b[0])
	b = b[1:]
	oldItems := op.NItems
	op.Code, op.Flags, op.Limit, op.Name, op.N, op.At, op.Key, op.Lease = code, 0, Limit{}, nil, 0, 0, nil, 0
	op.Deadline, op.Old, op.TTL = 0, 0, 0
	op.NItems, op.Cursor, op.Count, op.Prefix = 0, 0, 0, nil
	switch {
	case !code.ValidIn(v):
		err = errorf(ErrUnknownOpcode, "%d", code)
	case isItemOp(code):
		rest, err = decodeItem(b, v, op)
	case code == OpMulti:
		rest, err = decodeMulti(b, v, op)
	case code == OpScan:
		rest, err = decodeScan(b, op)
	case isRegisterOp(code):
		rest, err = decodeRegister(b, op)
	default: // HELLO, PING, STATS
		rest = b
	}
	// Drop references to an earlier frame's keys.
	clear(op.Items[min(op.NItems, oldItems):oldItems])
	if err != nil {
		return nil, err
	}
	return rest, nil
}

// decodeItem decodes an item operation's body.
func decodeItem(b []byte, v uint8, op *Op) ([]byte, error) {
	if len(b) < 1 {
		return nil, truncated(op.Code.String(), itemFixed, len(b))
	}
	op.Flags = Flags(b[0])
	mask := itemFlags
	if isLeaseOp(op.Code) {
		mask = leaseFlags // STRICT, SMYTE and SHADOW mean nothing to a lease; AT is refused: leases are on the server's clock
	}
	if bad := op.Flags &^ allowedFlags(mask, v); bad != 0 {
		return nil, errorf(ErrMalformed, "%v: reserved flag bits %#02x", op.Code, byte(bad))
	}
	if op.Flags&(FlagAt|FlagDeadline) == FlagAt|FlagDeadline {
		return nil, errorf(ErrMalformed, "%v: flags AT and DEADLINE together (both use the at field)", op.Code)
	}
	b, err := decodeLimitField(b[1:], op.Flags, op.Code, v, &op.Limit, &op.Name)
	if err != nil {
		return nil, err
	}
	if len(b) < itemTail {
		return nil, truncated(op.Code.String(), itemFixed, len(b))
	}
	op.N = int64(binary.LittleEndian.Uint64(b))
	op.At = int64(binary.LittleEndian.Uint64(b[8:]))
	switch {
	case op.Code == OpLease && op.N != 1:
		return nil, errorf(ErrMalformed, "LEASE with n %d, want 1", op.N)
	case op.Code == OpRelease && op.N == 0:
		return nil, errorf(ErrMalformed, "RELEASE of lease 0")
	case op.Code == OpRelease:
		op.Lease, op.N = uint64(op.N), 0
	case op.Flags&FlagDeadline != 0:
		op.Deadline, op.At = op.At, 0
	}
	key, rest, err := bytes16(b[itemTail-2:], 1, op.Code, "key")
	op.Key = key
	return rest, err
}

// decodeLimitField decodes an operation's limit field at the start of b, in
// a frame of version v: a name with FlagNamed in f, else an algorithm and
// its parameters. It returns the bytes after it.
func decodeLimitField(b []byte, f Flags, code Opcode, v uint8, l *Limit, name *[]byte) ([]byte, error) {
	if f&FlagNamed != 0 {
		n, rest, err := decodeName(b, code)
		*name = n
		return rest, err
	}
	if len(b) < limitLen {
		return nil, truncated(code.String()+" limit", limitLen, len(b))
	}
	if err := decodeLimit(b, v, l); err != nil {
		return nil, err
	}
	if l.Algorithm == Quota {
		return decodeZone(b[limitLen:], code, l)
	}
	return b[limitLen:], nil
}

// decodeMulti decodes a MULTI's body.
func decodeMulti(b []byte, v uint8, op *Op) ([]byte, error) {
	if len(b) < multiFixed {
		return nil, truncated("MULTI", multiFixed, len(b))
	}
	op.Flags = Flags(b[0])
	if op.Flags&^multiFlags != 0 {
		return nil, errorf(ErrMalformed, "MULTI: reserved flag bits %#02x", byte(op.Flags&^multiFlags))
	}
	op.At = int64(binary.LittleEndian.Uint64(b[1:]))
	n := int(b[9])
	switch {
	case n == 0:
		return nil, errorf(ErrMalformed, "MULTI with no items")
	case n > MaxMulti:
		return nil, errorf(ErrTooManyItems, "%d items, limit %d", n, MaxMulti)
	}
	b = b[multiFixed:]
	for i := range n {
		op.NItems = i // only items decoded so far are set
		it := &op.Items[i]
		if len(b) < 1 {
			return nil, truncated("MULTI item "+strconv.Itoa(i), multiItemFixed, len(b))
		}
		it.Flags = Flags(b[0])
		if bad := it.Flags &^ allowedFlags(multiItemFlags, v); bad != 0 {
			return nil, errorf(ErrMalformed, "MULTI item %d: reserved flag bits %#02x", i, byte(bad))
		}
		it.Limit, it.Name = Limit{}, nil
		var err error
		if b, err = decodeLimitField(b[1:], it.Flags, OpMulti, v, &it.Limit, &it.Name); err != nil {
			return nil, err
		}
		if len(b) < multiItemTail {
			return nil, truncated("MULTI item "+strconv.Itoa(i), multiItemFixed, len(b))
		}
		it.Cost = int64(binary.LittleEndian.Uint64(b))
		if it.Key, b, err = bytes16(b[multiItemTail-2:], 1, OpMulti, "item key"); err != nil {
			return nil, err
		}
	}
	op.NItems = n
	return b, nil
}

// decodeScan decodes a SCAN's body.
func decodeScan(b []byte, op *Op) ([]byte, error) {
	if len(b) < scanFixed {
		return nil, truncated("SCAN", scanFixed, len(b))
	}
	op.Cursor = binary.LittleEndian.Uint64(b)
	op.Count = binary.LittleEndian.Uint16(b[8:])
	if op.Count == 0 || op.Count > MaxScanCount {
		return nil, errorf(ErrMalformed, "SCAN count %d, want 1..%d", op.Count, MaxScanCount)
	}
	prefix, rest, err := bytes16(b[scanFixed-2:], 0, OpScan, "prefix")
	op.Prefix = prefix
	return rest, err
}

// bytes16 decodes a u16 length and that many bytes (minLen..MaxKeyLen of
// them) from the start of b, which holds at least the 2 length bytes, the
// field of an operation code. The returned slice's capacity ends at its
// last byte.
func bytes16(b []byte, minLen int, code Opcode, field string) (p, rest []byte, err error) {
	n := int(binary.LittleEndian.Uint16(b))
	if n < minLen || n > MaxKeyLen {
		return nil, nil, errorf(ErrInvalidKey, "%v %s of %d bytes, want %d..%d", code, field, n, minLen, MaxKeyLen)
	}
	end := 2 + n
	if len(b) < end {
		return nil, nil, truncated(code.String()+" "+field, n, len(b)-2)
	}
	return b[2:end:end], b[end:], nil
}
