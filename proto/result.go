package proto

import (
	"encoding/binary"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/sluicehq/sluice/vocab"
)

// Result body sizes, not counting the opcode and status bytes.
const (
	decisionLen    = 1 + 5*8                   // allowed, remaining, limit, retry_after, reset_after, delay: 41
	leaseResLen    = decisionLen + 8           // decision, lease
	releaseResLen  = 1 + decisionLen           // released, decision
	helloLen       = 1 + 4 + 2 + 2 + 1 + 8 + 2 // 20
	multiResFixed  = 1 + 1                     // allowed, n
	limitsFixed    = 1 + 1                     // n, bound: before a list's decisions
	scanResFixed   = 8 + 2                     // next, n
	scanEntryFixed = 1 + 8 + 2                 // algorithm, fresh_at, keylen
	statsResFixed  = 2                         // n
	statFixed      = 1 + 8                     // namelen, value (around the name)
)

// Decision is the outcome of an ACQUIRE, PEEK, REFUND, LEASE or RELEASE,
// or of one MULTI item: package vocab's, which the algorithms decide.
// Durations are nanoseconds, -1 where not applicable.
type Decision = vocab.Decision

// Outage names the outage policy of a global limit that made a decision
// because Redis could not answer in time (version 4): bits 2-3 of a
// decision's first byte. OutageNone: the decision is the limit's own (in
// Redis, from a lease, or a local limit's).
type Outage uint8

// The outage policies, as the wire carries them.
const (
	OutageNone   Outage = 0
	OutageLocal  Outage = 1 // decided on this host with its share of the limit
	OutageOpen   Outage = 2 // admitted: the limit's policy is open
	OutageClosed Outage = 3 // denied: the limit's policy is closed
)

// String returns "", "local", "open" or "closed".
func (o Outage) String() string {
	switch o {
	case OutageNone:
		return ""
	case OutageLocal:
		return "local"
	case OutageOpen:
		return "open"
	case OutageClosed:
		return "closed"
	}
	return "outage(" + strconv.Itoa(int(o)) + ")"
}

// Marks are what the first byte of a MULTI item's decision says besides
// allowed (version 7): the outage policy that made the decision and
// whether the item's limit fails closed, as Result.Outage and
// Result.FailsClosed say for an ACQUIRE.
type Marks struct {
	Outage      Outage
	FailsClosed bool
}

// Hello is the body of a HELLO result: the server's protocol version and
// limits, and the geometry of its table.
type Hello struct {
	Version   uint8  // the protocol version the server speaks
	MaxFrame  uint32 // the largest length field it accepts (MaxFrameLen)
	MaxBatch  uint16 // the most operations per frame (MaxBatch)
	MaxKey    uint16 // the longest key (MaxKeyLen)
	MaxMulti  uint8  // the most items per MULTI (MaxMulti)
	SlotCount uint64 // slots in the table: the most buckets it can hold
	SlotSize  uint16 // bytes per slot: 64, or 128 or 256 with inline keys (SCAN)
}

// Result is one decoded result. Code and Status always apply; Message when
// Status is not StatusOK; otherwise the fields of Code:
//
//	HELLO                  Hello
//	PING                   none
//	ACQUIRE, PEEK, REFUND  Decision; with FlagAll on a list, Limits[:NLimits] and Bound
//	LEASE                  Decision, Lease
//	RELEASE                Released, Decision
//	RESET                  Existed
//	MULTI                  Allowed, Decisions[:NDecisions]
//	SCAN                   Next, Entries (NEntries of them: iterate with NextScanEntry)
//	STATS                  Stats (NStats of them: iterate with NextStat)
//	REGGET, REGSET,        Register
//	REGCAS, REGDEL
//
// Message, Entries and Stats alias the decoded bytes: they are valid until
// the buffer is reused. DecodeResult sets every field that applies and
// zeroes the others, but leaves Decisions[NDecisions:] unspecified.
type Result struct {
	Code    Opcode
	Status  Status
	Message []byte // UTF-8 from the server, up to MaxMessageLen bytes

	Decision Decision
	// ShadowDenied (ACQUIRE, version 2): the request was shadowed (a
	// shadow limit, or FlagShadow) and would have been denied; Decision
	// says allowed.
	ShadowDenied bool
	// Outage (ACQUIRE, PEEK, REFUND: version 4; LEASE, RELEASE: version 5):
	// the global limit's outage policy made the decision, Redis not
	// answering in time.
	Outage Outage
	// FailsClosed (ACQUIRE, PEEK, REFUND; version 4): the limit is a global
	// limit whose outage policy is closed, whoever made the decision; a
	// client's failure policy then denies, rather than admits, the limit's
	// requests the server does not answer.
	FailsClosed bool
	Existed     bool     // RESET: the bucket existed
	Lease       uint64   // LEASE (version 3): the lease's id when allowed, to RELEASE; 0 when denied
	Released    bool     // RELEASE (version 3): the lease was held and its slot is free now
	Register    Register // REGGET, REGSET, REGCAS, REGDEL (version 6)

	// Limits (ACQUIRE, PEEK, REFUND; version 7, the request's FlagAll):
	// the decision of each limit of a named list, in the list's order;
	// Decision is their combination, with the limit and retry_after of
	// Limits[Bound], the limit that binds (and the least remaining, the
	// largest reset_after and delay of all). NLimits is 0
	// when the answer has no list: the name is one limit.
	Limits  [MaxMulti]Decision
	NLimits int
	Bound   int

	Allowed    bool // MULTI: every item was allowed, and so every item consumed
	Decisions  [MaxMulti]Decision
	NDecisions int
	// Marks (MULTI; version 7): each item's outage mark and fails-closed
	// mark, as Outage and FailsClosed of an ACQUIRE of the item; zero in
	// older versions.
	Marks [MaxMulti]Marks

	Hello Hello

	Next     uint64 // SCAN: the cursor to continue from; 0 when the scan is complete
	Entries  []byte
	NEntries int

	Stats  []byte
	NStats int
}

// Err returns nil if r.Status is StatusOK, else an error wrapping
// r.Status.Err() with the server's message. It allocates on error only.
func (r *Result) Err() error {
	if r.Status == StatusOK || len(r.Message) == 0 {
		return r.Status.Err() // nil for StatusOK
	}
	return errorf(r.Status.Err(), "%s", r.Message)
}

// AppendError appends a result for op with status s and message msg,
// truncated to MaxMessageLen bytes at a UTF-8 boundary. s must be a status
// other than StatusOK; any other value is written as StatusInternal, so a
// bug cannot put an undecodable result on the wire. op is the operation's
// opcode, whatever its value, or 0 when the error is about the frame.
func AppendError(dst []byte, op Opcode, s Status, msg string) []byte {
	if s == StatusOK || !s.Valid() {
		s = StatusInternal
	}
	if len(msg) > MaxMessageLen {
		n := MaxMessageLen
		for i := 0; i < utf8.UTFMax-1 && !utf8.RuneStart(msg[n]); i++ {
			n--
		}
		msg = msg[:n]
	}
	dst = append(dst, byte(op), byte(s))
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(msg)))
	return append(dst, msg...)
}

// AppendDecision appends an OK result for op (ACQUIRE, PEEK or REFUND)
// carrying d.
func AppendDecision(dst []byte, op Opcode, d *Decision) []byte {
	return appendDecision(append(dst, byte(op), byte(StatusOK)), d)
}

// AppendLeaseResult appends the OK result of a LEASE (version 3): d, the
// decision as an ACQUIRE of cost 1 gets it (Remaining: the slots still
// free), and the lease's id, never 0 when d allows and 0 when it denies.
func AppendLeaseResult(dst []byte, d *Decision, lease uint64) []byte {
	dst = AppendDecision(dst, OpLease, d)
	return binary.LittleEndian.AppendUint64(dst, lease)
}

// AppendReleaseResult appends the OK result of a RELEASE (version 3):
// whether the lease was held (and is now free), then d, the decision as a
// PEEK reports it afterwards.
func AppendReleaseResult(dst []byte, released bool, d *Decision) []byte {
	return appendDecision(append(dst, byte(OpRelease), byte(StatusOK), boolByte(released)), d)
}

// MarkLeaseOutage marks the decision of the LEASE or RELEASE result (op)
// that ends dst, the one AppendLeaseResult or AppendReleaseResult just
// appended, as made by outage policy o (version 5), and returns dst.
func MarkLeaseOutage(dst []byte, op Opcode, o Outage) []byte {
	end := len(dst)
	if op == OpLease {
		end -= 8 // the lease's id follows the decision
	}
	dst[end-decisionLen] |= byte(o&outageMask) << outageShift
	return dst
}

// AppendShadowDecision appends the OK result of an ACQUIRE that a shadow
// limit (or FlagShadow) answered as allowed although it would have been
// denied (version 2): d says allowed, and the decision's first byte has
// bit 1 set.
func AppendShadowDecision(dst []byte, op Opcode, d *Decision) []byte {
	dst = AppendDecision(dst, op, d)
	dst[len(dst)-decisionLen] |= shadowDeniedBit
	return dst
}

// MarkOutage marks the decision that ends dst (the result AppendDecision
// or AppendShadowDecision just appended) as made by outage policy o
// (version 4), and returns dst.
func MarkOutage(dst []byte, o Outage) []byte {
	dst[len(dst)-decisionLen] |= byte(o&outageMask) << outageShift
	return dst
}

// MarkFailsClosed marks the decision that ends dst (the result
// AppendDecision or AppendShadowDecision just appended) as one of a global
// limit whose outage policy is closed (version 4), and returns dst.
func MarkFailsClosed(dst []byte) []byte {
	dst[len(dst)-decisionLen] |= failsClosedBit
	return dst
}

// AppendLimits appends the decisions of every limit of a named list
// (version 7, FlagAll) to the ACQUIRE, PEEK or REFUND result that ends
// dst, the one AppendDecision or AppendShadowDecision just appended (and
// MarkOutage or MarkFailsClosed marked): it sets bit 5 of that result's
// decision and appends n, bound (the index of the limit that binds, whose
// limit and retry_after the result's decision has) and ds, in the list's
// order. It panics unless
// 1 <= len(ds) <= 255 and 0 <= bound < len(ds); a peer rejects more than
// MaxMulti.
func AppendLimits(dst []byte, bound int, ds []Decision) []byte {
	if len(ds) == 0 || len(ds) > math.MaxUint8 || bound < 0 || bound >= len(ds) {
		panic("proto: AppendLimits: bound " + strconv.Itoa(bound) + " of " + strconv.Itoa(len(ds)) + " decisions")
	}
	dst[len(dst)-decisionLen] |= limitsBit
	dst = append(dst, byte(len(ds)), byte(bound))
	for i := range ds {
		dst = appendDecision(dst, &ds[i])
	}
	return dst
}

// The bits of a decision's first byte: bit 0 says allowed; bit 1 that the
// decision was shadowed (version 2, ACQUIRE); bits 2-3 the outage policy
// that made it (version 4: ACQUIRE, PEEK, REFUND; version 5: LEASE,
// RELEASE), bit 4 that the limit fails closed (version 4; ACQUIRE, PEEK,
// REFUND) and bit 5 that the decisions of a list's limits follow (version
// 7; ACQUIRE, PEEK, REFUND). The others are 0.
const (
	shadowDeniedBit = 2
	outageShift     = 2
	outageMask      = 3
	failsClosedBit  = 16
	limitsBit       = 32
	decisionBits    = 0x3f
)

// appendDecision appends d's 41 bytes.
func appendDecision(dst []byte, d *Decision) []byte {
	dst = append(dst, boolByte(d.Allowed))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(d.Remaining))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(d.Limit))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(d.RetryAfter))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(d.ResetAfter))
	return binary.LittleEndian.AppendUint64(dst, uint64(d.Delay))
}

// AppendPong appends the OK result of a PING.
func AppendPong(dst []byte) []byte { return append(dst, byte(OpPing), byte(StatusOK)) }

// AppendHelloResult appends the OK result of a HELLO carrying h.
func AppendHelloResult(dst []byte, h *Hello) []byte {
	dst = append(dst, byte(OpHello), byte(StatusOK), h.Version)
	dst = binary.LittleEndian.AppendUint32(dst, h.MaxFrame)
	dst = binary.LittleEndian.AppendUint16(dst, h.MaxBatch)
	dst = binary.LittleEndian.AppendUint16(dst, h.MaxKey)
	dst = append(dst, h.MaxMulti)
	dst = binary.LittleEndian.AppendUint64(dst, h.SlotCount)
	return binary.LittleEndian.AppendUint16(dst, h.SlotSize)
}

// AppendReset appends the OK result of a RESET.
func AppendReset(dst []byte, existed bool) []byte {
	return append(dst, byte(OpReset), byte(StatusOK), boolByte(existed))
}

// AppendMultiResult appends the OK result of a MULTI: whether every item
// was allowed, and one decision per item in the request's order. It panics
// if there are more than 255 decisions; a peer rejects more than MaxMulti.
func AppendMultiResult(dst []byte, allowed bool, ds []Decision) []byte {
	if len(ds) > math.MaxUint8 {
		panic("proto: AppendMultiResult: " + strconv.Itoa(len(ds)) + " decisions")
	}
	dst = append(dst, byte(OpMulti), byte(StatusOK), boolByte(allowed), byte(len(ds)))
	for i := range ds {
		dst = appendDecision(dst, &ds[i])
	}
	return dst
}

// MarkMulti marks decision i of the n decisions of the MULTI result that
// ends dst (the one AppendMultiResult just appended) with m (version 7),
// and returns dst.
func MarkMulti(dst []byte, n, i int, m Marks) []byte {
	c := &dst[len(dst)-(n-i)*decisionLen]
	*c |= byte(m.Outage&outageMask) << outageShift
	if m.FailsClosed {
		*c |= failsClosedBit
	}
	return dst
}

// BeginScanResult appends the start of a SCAN's OK result, with next and a
// placeholder entry count, and returns the extended buffer and the offset
// of the result in it. Append entries with AppendScanEntry, then call
// EndScanResult, which writes the final next and count; b may grow (be
// reallocated) in between, as offsets are relative.
func BeginScanResult(dst []byte, next uint64) (b []byte, start int) {
	start = len(dst)
	b = append(dst, byte(OpScan), byte(StatusOK))
	b = binary.LittleEndian.AppendUint64(b, next)
	return append(b, 0, 0), start
}

// AppendScanEntry appends one SCAN entry: the bucket's algorithm, the
// time, Unix ns, from which it is back to its fresh state, and its key.
// It panics if the key is longer than 65535 bytes.
func AppendScanEntry(b []byte, alg Algorithm, freshAt int64, key []byte) []byte {
	b = append(b, byte(alg))
	b = binary.LittleEndian.AppendUint64(b, uint64(freshAt))
	return appendBytes16(b, key)
}

// EndScanResult writes next (the cursor to continue from, 0 when the scan
// is complete) and the number of entries n into the SCAN result that
// BeginScanResult started at offset start of b, and returns b.
func EndScanResult(b []byte, start int, next uint64, n int) []byte {
	if n < 0 || n > math.MaxUint16 {
		panic("proto: EndScanResult: " + strconv.Itoa(n) + " entries")
	}
	binary.LittleEndian.PutUint64(b[start+2:], next)
	binary.LittleEndian.PutUint16(b[start+10:], uint16(n))
	return b
}

// BeginStatsResult appends the start of a STATS OK result with a
// placeholder count, and returns the extended buffer and the offset of the
// result in it. Append counters with AppendStat, then call EndStatsResult.
func BeginStatsResult(dst []byte) (b []byte, start int) {
	start = len(dst)
	return append(dst, byte(OpStats), byte(StatusOK), 0, 0), start
}

// AppendStat appends one counter of a STATS result. name is 1..255 bytes of
// ASCII snake_case; AppendStat panics if its length does not fit.
func AppendStat(b []byte, name string, v uint64) []byte {
	if len(name) == 0 || len(name) > math.MaxUint8 {
		panic("proto: AppendStat: name of " + strconv.Itoa(len(name)) + " bytes")
	}
	b = append(b, byte(len(name)))
	b = append(b, name...)
	return binary.LittleEndian.AppendUint64(b, v)
}

// EndStatsResult writes the number of counters n into the STATS result
// that BeginStatsResult started at offset start of b, and returns b.
func EndStatsResult(b []byte, start, n int) []byte {
	if n < 0 || n > math.MaxUint16 {
		panic("proto: EndStatsResult: " + strconv.Itoa(n) + " counters")
	}
	binary.LittleEndian.PutUint16(b[start+2:], uint16(n))
	return b
}

// DecodeResult decodes the result at the start of b into r and returns the
// bytes after it. It checks every length against the bytes present and the
// limits, every boolean byte (0 or 1), the status (a known one) and the
// opcode of an OK result; the body of an error result is the same for
// every opcode, so its opcode is not checked. Errors wrap ErrMalformed,
// ErrUnknownOpcode, or for a SCAN entry those of NextScanEntry; on error
// rest is nil. DecodeResult allocates nothing;
// the slices it stores alias b (see Result).
func DecodeResult(b []byte, r *Result) (rest []byte, err error) {
	if len(b) < 2 {
		return nil, truncated("result", 2, len(b))
	}
	oldN, oldL := r.NDecisions, r.NLimits
	r.Code, r.Status, r.Message = Opcode(b[0]), Status(b[1]), nil
	r.NLimits, r.Bound = 0, 0
	r.Decision, r.ShadowDenied, r.Existed, r.Allowed, r.NDecisions, r.Hello = Decision{}, false, false, false, 0, Hello{}
	r.Outage, r.FailsClosed = OutageNone, false
	r.Lease, r.Released, r.Register = 0, false, Register{}
	r.Next, r.Entries, r.NEntries, r.Stats, r.NStats = 0, nil, 0, nil, 0
	rest, err = decodeResultBody(b[2:], r)
	clear(r.Decisions[min(r.NDecisions, oldN):oldN])
	clear(r.Marks[min(r.NDecisions, oldN):oldN])
	clear(r.Limits[min(r.NLimits, oldL):oldL])
	if err != nil {
		return nil, err
	}
	return rest, nil
}

// decodeResultBody decodes the body of a result whose opcode and status r
// holds.
func decodeResultBody(b []byte, r *Result) ([]byte, error) {
	if r.Status != StatusOK {
		if !r.Status.Valid() {
			return nil, errorf(ErrMalformed, "%v result: unknown status %d", r.Code, r.Status)
		}
		if len(b) < 2 {
			return nil, truncated(r.Code.String()+" error", 2, len(b))
		}
		n := int(binary.LittleEndian.Uint16(b))
		if n > MaxMessageLen {
			return nil, errorf(ErrMalformed, "%v error message of %d bytes, limit %d", r.Code, n, MaxMessageLen)
		}
		if len(b) < 2+n {
			return nil, truncated(r.Code.String()+" error message", n, len(b)-2)
		}
		r.Message = b[2 : 2+n : 2+n]
		return b[2+n:], nil
	}
	switch r.Code {
	case OpHello:
		if len(b) < helloLen {
			return nil, truncated("HELLO result", helloLen, len(b))
		}
		r.Hello = Hello{
			Version:   b[0],
			MaxFrame:  binary.LittleEndian.Uint32(b[1:]),
			MaxBatch:  binary.LittleEndian.Uint16(b[5:]),
			MaxKey:    binary.LittleEndian.Uint16(b[7:]),
			MaxMulti:  b[9],
			SlotCount: binary.LittleEndian.Uint64(b[10:]),
			SlotSize:  binary.LittleEndian.Uint16(b[18:]),
		}
		return b[helloLen:], nil
	case OpPing:
		return b, nil
	case OpAcquire, OpPeek, OpRefund:
		return decodeFlaggedDecision(b, r)
	case OpLease:
		if len(b) < leaseResLen {
			return nil, truncated("LEASE result", leaseResLen, len(b))
		}
		rest, err := decodeLeaseDecision(b, r)
		if err != nil {
			return nil, err
		}
		r.Lease = binary.LittleEndian.Uint64(rest)
		return rest[8:], nil
	case OpRelease:
		if len(b) < releaseResLen {
			return nil, truncated("RELEASE result", releaseResLen, len(b))
		}
		var err error
		if r.Released, err = decodeBool(b[0], "RELEASE released"); err != nil {
			return nil, err
		}
		return decodeLeaseDecision(b[1:], r)
	case OpReset:
		if len(b) < 1 {
			return nil, truncated("RESET result", 1, 0)
		}
		var err error
		r.Existed, err = decodeBool(b[0], "RESET existed")
		return b[1:], err
	case OpMulti:
		return decodeMultiResult(b, r)
	case OpScan:
		return decodeScanResult(b, r)
	case OpStats:
		return decodeStatsResult(b, r)
	case OpRegGet, OpRegSet, OpRegCAS, OpRegDel:
		return decodeRegisterResult(b, r)
	}
	return nil, errorf(ErrUnknownOpcode, "OK result with opcode %d", r.Code)
}

// decodeFlaggedDecision decodes the decision of an ACQUIRE, PEEK or
// REFUND result, whose first byte may carry the shadow bit (ACQUIRE), an
// outage policy and the fails-closed bit besides allowed.
func decodeFlaggedDecision(b []byte, r *Result) ([]byte, error) {
	if len(b) < 1 {
		return nil, truncated(r.Code.String()+" decision", decisionLen, len(b))
	}
	c := b[0]
	shadow := c&shadowDeniedBit != 0
	if c&^decisionBits != 0 || shadow && (c&1 == 0 || r.Code != OpAcquire) {
		return nil, errorf(ErrMalformed, "%v decision's first byte %#02x", r.Code, c)
	}
	r.ShadowDenied, r.Outage, r.FailsClosed = shadow, Outage(c>>outageShift&outageMask), c&failsClosedBit != 0
	rest, err := decodeDecisionAllowed(b, &r.Decision, r.Code, c&1 == 1)
	if err != nil || c&limitsBit == 0 {
		return rest, err
	}
	return decodeLimits(rest, r)
}

// decodeLimits decodes the decisions of a list's limits that follow an
// ACQUIRE, PEEK or REFUND decision whose bit 5 is set (version 7).
func decodeLimits(b []byte, r *Result) ([]byte, error) {
	if len(b) < limitsFixed {
		return nil, truncated(r.Code.String()+" limits", limitsFixed, len(b))
	}
	n, bound := int(b[0]), int(b[1])
	if n == 0 || n > MaxMulti || bound >= n {
		return nil, errorf(ErrMalformed, "%v result with %d limits bound by limit %d, want 1..%d limits and a bound below their count", r.Code, n, bound, MaxMulti)
	}
	b = b[limitsFixed:]
	for i := range n {
		r.NLimits = i // only decisions decoded so far are set
		var err error
		if b, err = decodeDecision(b, &r.Limits[i], r.Code); err != nil {
			return nil, err
		}
	}
	r.NLimits, r.Bound = n, bound
	return b, nil
}

// decodeLeaseDecision decodes the decision of a LEASE or RELEASE result,
// whose first byte may carry an outage policy besides allowed (version 5).
func decodeLeaseDecision(b []byte, r *Result) ([]byte, error) {
	if len(b) < 1 {
		return nil, truncated(r.Code.String()+" decision", decisionLen, len(b))
	}
	c := b[0]
	if c&^(1|outageMask<<outageShift) != 0 {
		return nil, errorf(ErrMalformed, "%v decision's first byte %#02x", r.Code, c)
	}
	r.Outage = Outage(c >> outageShift & outageMask)
	return decodeDecisionAllowed(b, &r.Decision, r.Code, c&1 == 1)
}

// decodeDecision decodes the 41 bytes of a decision of an op's result.
func decodeDecision(b []byte, d *Decision, op Opcode) ([]byte, error) {
	if len(b) < 1 {
		return nil, truncated(op.String()+" decision", decisionLen, len(b))
	}
	allowed, err := decodeBool(b[0], "decision allowed")
	if err != nil {
		return nil, err
	}
	return decodeDecisionAllowed(b, d, op, allowed)
}

// decodeDecisionAllowed decodes a decision whose first byte has been read
// as allowed.
func decodeDecisionAllowed(b []byte, d *Decision, op Opcode, allowed bool) ([]byte, error) {
	if len(b) < decisionLen {
		return nil, truncated(op.String()+" decision", decisionLen, len(b))
	}
	_ = b[decisionLen-1] // bounds check hint to compiler; see golang.org/issue/14808
	*d = Decision{
		Allowed:    allowed,
		Remaining:  int64(binary.LittleEndian.Uint64(b[1:])),
		Limit:      int64(binary.LittleEndian.Uint64(b[9:])),
		RetryAfter: int64(binary.LittleEndian.Uint64(b[17:])),
		ResetAfter: int64(binary.LittleEndian.Uint64(b[25:])),
		Delay:      int64(binary.LittleEndian.Uint64(b[33:])),
	}
	return b[decisionLen:], nil
}

// decodeMultiResult decodes the body of a MULTI's OK result.
func decodeMultiResult(b []byte, r *Result) ([]byte, error) {
	if len(b) < multiResFixed {
		return nil, truncated("MULTI result", multiResFixed, len(b))
	}
	var err error
	if r.Allowed, err = decodeBool(b[0], "MULTI allowed"); err != nil {
		return nil, err
	}
	n := int(b[1])
	if n == 0 || n > MaxMulti {
		return nil, errorf(ErrMalformed, "MULTI result with %d decisions, want 1..%d", n, MaxMulti)
	}
	b = b[multiResFixed:]
	for i := range n {
		r.NDecisions = i // only decisions decoded so far are set
		if len(b) < 1 {
			return nil, truncated("MULTI decision", decisionLen, len(b))
		}
		c := b[0]
		if c&^(1|outageMask<<outageShift|failsClosedBit) != 0 {
			return nil, errorf(ErrMalformed, "MULTI decision's first byte %#02x", c)
		}
		r.Marks[i] = Marks{Outage: Outage(c >> outageShift & outageMask), FailsClosed: c&failsClosedBit != 0}
		if b, err = decodeDecisionAllowed(b, &r.Decisions[i], OpMulti, c&1 == 1); err != nil {
			return nil, err
		}
	}
	r.NDecisions = n
	return b, nil
}

// decodeScanResult decodes the body of a SCAN's OK result, checking every
// entry so that NextScanEntry cannot fail on r.Entries.
func decodeScanResult(b []byte, r *Result) ([]byte, error) {
	if len(b) < scanResFixed {
		return nil, truncated("SCAN result", scanResFixed, len(b))
	}
	r.Next = binary.LittleEndian.Uint64(b)
	n := int(binary.LittleEndian.Uint16(b[8:]))
	if n > MaxScanCount {
		return nil, errorf(ErrMalformed, "SCAN result with %d entries, limit %d", n, MaxScanCount)
	}
	b = b[scanResFixed:]
	rest := b
	for range n {
		var err error
		if _, _, _, rest, err = NextScanEntry(rest); err != nil {
			return nil, err
		}
	}
	r.Entries, r.NEntries = upTo(b, rest), n
	return rest, nil
}

// decodeStatsResult decodes the body of a STATS OK result, checking every
// counter so that NextStat cannot fail on r.Stats.
func decodeStatsResult(b []byte, r *Result) ([]byte, error) {
	if len(b) < statsResFixed {
		return nil, truncated("STATS result", statsResFixed, len(b))
	}
	n := int(binary.LittleEndian.Uint16(b))
	b = b[statsResFixed:]
	rest := b
	for range n {
		var err error
		if _, _, rest, err = NextStat(rest); err != nil {
			return nil, err
		}
	}
	r.Stats, r.NStats = upTo(b, rest), n
	return rest, nil
}

// NextScanEntry decodes the SCAN entry at the start of b (Result.Entries,
// then the rest it returns) and returns its fields and the bytes after it.
// key aliases b. Errors wrap ErrMalformed, ErrInvalidLimit (an algorithm
// outside 1..8) or ErrInvalidKey (a key of 0 or more than MaxKeyLen bytes).
// Iterate with "for e := r.Entries; len(e) > 0; e = rest { ... }".
func NextScanEntry(b []byte) (alg Algorithm, freshAt int64, key []byte, rest []byte, err error) {
	if len(b) < scanEntryFixed {
		return 0, 0, nil, nil, truncated("SCAN entry", scanEntryFixed, len(b))
	}
	alg = Algorithm(b[0])
	if !alg.Valid() {
		return 0, 0, nil, nil, errorf(ErrInvalidLimit, "SCAN entry: unknown algorithm %d", b[0])
	}
	freshAt = int64(binary.LittleEndian.Uint64(b[1:]))
	key, rest, err = bytes16(b[scanEntryFixed-2:], 1, OpScan, "entry key")
	if err != nil {
		return 0, 0, nil, nil, err
	}
	return alg, freshAt, key, rest, nil
}

// NextStat decodes the STATS counter at the start of b (Result.Stats, then
// the rest it returns) and returns its name, value and the bytes after it.
// name aliases b. Errors wrap ErrMalformed.
func NextStat(b []byte) (name []byte, v uint64, rest []byte, err error) {
	if len(b) < statFixed {
		return nil, 0, nil, truncated("STATS counter", statFixed, len(b))
	}
	n := int(b[0])
	if n == 0 {
		return nil, 0, nil, errorf(ErrMalformed, "STATS counter with an empty name")
	}
	end := 1 + n + 8
	if len(b) < end {
		return nil, 0, nil, truncated("STATS counter", end, len(b))
	}
	return b[1 : 1+n : 1+n], binary.LittleEndian.Uint64(b[1+n:]), b[end:], nil
}

// upTo returns the bytes of b before its suffix rest, capacity cut.
func upTo(b, rest []byte) []byte {
	end := len(b) - len(rest)
	return b[:end:end]
}

// boolByte encodes a boolean as 0 or 1.
func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// decodeBool decodes a boolean byte, which must be 0 or 1.
func decodeBool(c byte, what string) (bool, error) {
	if c > 1 {
		return false, errorf(ErrMalformed, "%s byte %d, want 0 or 1", what, c)
	}
	return c == 1, nil
}
