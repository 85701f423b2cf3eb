package proto

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// describer walks a frame's bytes and writes one line per field: offset,
// size, field, value, bytes. It follows doc.go, not the decoder, so that
// the golden descriptions are a second reading of the specification, and
// it stops where the bytes run out or stop making sense.
type describer struct {
	b   []byte
	off int
	w   strings.Builder
	ok  bool // still walking
}

// describeFrame returns the field-by-field description of frame.
func describeFrame(frame []byte) string {
	d := &describer{b: frame, ok: true}
	fmt.Fprintf(&d.w, "%-6s %-4s %-37s %-44s %s\n", "offset", "size", "field", "value", "bytes")
	d.uint(4, "length", func(v uint64) string { return "bytes after this field" })
	d.uint(1, "version", nil)
	kind := Kind(d.uint(1, "kind", func(v uint64) string { return Kind(v).String() }))
	count := int(d.uint(2, "count", nil))
	d.uint(4, "id", nil)
	if !d.ok {
		return d.w.String()
	}
	if _, err := ParseHeader(frame); err != nil {
		d.note("the header is refused: " + err.Error())
		return d.w.String()
	}
	for i := 0; i < count && d.ok; i++ {
		if kind == KindRequest {
			d.op(fmt.Sprintf("op[%d].", i))
		} else {
			d.result(fmt.Sprintf("result[%d].", i))
		}
	}
	if d.ok && d.off < len(d.b) {
		d.line(len(d.b)-d.off, "(after the last operation)", "bytes the count does not cover")
	}
	return d.w.String()
}

// line writes the field of size bytes at the current offset and moves on.
func (d *describer) line(size int, name, value string) {
	raw := hex.EncodeToString(d.b[d.off : d.off+size])
	if len(raw) > 32 {
		raw = raw[:32] + "..."
	}
	fmt.Fprintf(&d.w, "%-6d %-4d %-37s %-44s %s\n", d.off, size, name, value, raw)
	d.off += size
}

// has reports whether size more bytes are present, noting where not.
func (d *describer) has(size int, name string) bool {
	if d.ok && d.off+size > len(d.b) {
		fmt.Fprintf(&d.w, "%-6d %-4d %-37s truncated: %d of %d bytes present\n", d.off, size, name, len(d.b)-d.off, size)
		d.ok = false
	}
	return d.ok
}

func (d *describer) note(s string) {
	fmt.Fprintf(&d.w, "       %s\n", s)
	d.ok = false
}

// uint describes an unsigned little-endian field of 1, 2, 4 or 8 bytes,
// with its meaning if any.
func (d *describer) uint(size int, name string, meaning func(uint64) string) uint64 {
	return d.field(size, name, func(v uint64) string {
		return withMeaning(strconv.FormatUint(v, 10), meaning, v)
	})
}

// i64 describes a signed 8-byte field.
func (d *describer) i64(name string, meaning func(int64) string) int64 {
	return int64(d.field(8, name, func(v uint64) string {
		return withMeaning(strconv.FormatInt(int64(v), 10), meaning, int64(v))
	}))
}

// field reads a little-endian field and writes its line.
func (d *describer) field(size int, name string, show func(uint64) string) uint64 {
	if !d.has(size, name) {
		return 0
	}
	var v uint64
	for i := size - 1; i >= 0; i-- {
		v = v<<8 | uint64(d.b[d.off+i])
	}
	d.line(size, name, show(v))
	return v
}

func withMeaning[T any](val string, meaning func(T) string, v T) string {
	if meaning != nil {
		if m := meaning(v); m != "" {
			return val + " (" + m + ")"
		}
	}
	return val
}

func (d *describer) bytes(n int, name string) {
	if d.has(n, name) {
		d.line(n, name, strconv.Quote(string(d.b[d.off:d.off+n])))
	}
}

func boolean(v uint64) string {
	switch v {
	case 0:
		return "false"
	case 1:
		return "true"
	}
	return "not a boolean"
}

// decisionByte describes a decision's first byte: a boolean, with the
// shadow bit (version 2), the outage policy and the fails-closed bit
// (version 4).
func decisionByte(v uint64) string {
	if v <= 1 || v&^decisionBits != 0 {
		return boolean(v)
	}
	s := boolean(v & 1)
	if v&shadowDeniedBit != 0 {
		s += ", shadow-denied"
	}
	if o := Outage(v >> outageShift & outageMask); o != OutageNone {
		s += ", decided by the outage policy " + o.String()
	}
	if v&failsClosedBit != 0 {
		s += ", the limit fails closed"
	}
	if v&limitsBit != 0 {
		s += ", each limit's decision follows"
	}
	return s
}

func duration(v int64) string {
	if v == -1 {
		return "not applicable"
	}
	return time.Duration(v).String()
}

func unixTime(v int64) string { return time.Unix(0, v).UTC().Format(time.RFC3339Nano) }

func flagNames(v uint64) string {
	var names []string
	for bit, name := range []string{"STRICT", "SMYTE", "AT", "bit3", "bit4", "DEADLINE", "ALL", "bit7"} {
		if v&(1<<bit) != 0 {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, "|")
}

// limit describes a limit's 25 bytes.
func (d *describer) limit(p string) {
	alg := Algorithm(d.uint(1, p+"algorithm", algorithmName))
	for i := range 3 {
		name, meaning := wireParam(alg, i)
		d.i64(p+name, meaning)
	}
	if alg == Quota { // version 5: the time zone follows
		n := int(d.uint(1, p+"tzlen", nil))
		d.bytes(n, p+"tz")
	}
}

// wireParam returns the name of an algorithm's wire parameter i, and its
// meaning: "p2" and none for a parameter it does not use; for
// window_counters' P[2] both of the parameters it packs.
func wireParam(alg Algorithm, i int) (string, func(int64) string) {
	var names []string
	var kind paramKind
	if alg.Valid() {
		for _, sp := range specParams[alg] {
			if sp.p == i {
				names, kind = append(names, sp.name), sp.kind
			}
		}
	}
	switch {
	case len(names) == 0:
		return "p" + strconv.Itoa(i), nil
	case kind == calendarParam:
		return names[0], func(v int64) string {
			return fmt.Sprintf("unit %d, every %d", v&QuotaUnitMask, v>>QuotaEveryShift)
		}
	case alg == Quota && len(names) > 1: // anchor | week_start<<8
		return strings.Join(names, "|"), func(v int64) string {
			return fmt.Sprintf("anchor %d, week_start %d, other bits %#x", v&QuotaAnchorMask, v>>QuotaWeekStartShift&0xff, v&^QuotaBits)
		}
	case kind == durationParam:
		return names[0], func(v int64) string { return time.Duration(v).String() }
	case len(names) > 1: // counters | count_denied<<8
		return strings.Join(names, "|"), func(v int64) string {
			return fmt.Sprintf("counters %d, count_denied %v, other bits %#x", v&CountersMask, v&CountDeniedBit != 0, v&^WindowCountersBits)
		}
	}
	return names[0], nil
}

// key describes a u16 length and the bytes it counts.
func (d *describer) key(p, lenName, name string) {
	n := int(d.uint(2, p+lenName, nil))
	d.bytes(n, p+name)
}

func (d *describer) op(p string) {
	code := Opcode(d.uint(1, p+"opcode", func(v uint64) string { return Opcode(v).String() }))
	switch {
	case isItemOp(code):
		d.uint(1, p+"flags", flagNames)
		d.limit(p + "limit.")
		if code == OpRelease {
			d.uint(8, p+"n (the lease id)", nil)
		} else {
			d.i64(p+"n", nil)
		}
		d.i64(p+"at", unixTime)
		d.key(p, "keylen", "key")
	case code == OpMulti:
		d.uint(1, p+"flags", flagNames)
		d.i64(p+"at", unixTime)
		n := int(d.uint(1, p+"n", nil))
		for i := 0; i < n && d.ok; i++ {
			q := fmt.Sprintf("%sitem[%d].", p, i)
			d.uint(1, q+"flags", flagNames)
			d.limit(q + "limit.")
			d.i64(q+"cost", nil)
			d.key(q, "keylen", "key")
		}
	case code == OpScan:
		d.uint(8, p+"cursor", nil)
		d.uint(2, p+"count", nil)
		d.key(p, "prefixlen", "prefix")
	case isRegisterOp(code):
		d.uint(1, p+"flags", flagNames)
		d.i64(p+"old", nil)
		d.i64(p+"value", nil)
		d.i64(p+"ttl", duration)
		d.key(p, "keylen", "key")
	case code == OpHello || code == OpPing || code == OpStats:
	default:
		if d.ok {
			d.note("unknown opcode: the operations after it cannot be located")
		}
	}
}

// decision describes a decision and returns its first byte.
func (d *describer) decision(p string) uint64 {
	first := d.uint(1, p+"allowed", decisionByte)
	d.i64(p+"remaining", nil)
	d.i64(p+"limit", nil)
	d.i64(p+"retry_after", duration)
	d.i64(p+"reset_after", duration)
	d.i64(p+"delay", duration)
	return first
}

func (d *describer) result(p string) {
	code := Opcode(d.uint(1, p+"opcode", func(v uint64) string { return Opcode(v).String() }))
	status := Status(d.uint(1, p+"status", func(v uint64) string { return Status(v).String() }))
	switch {
	case !d.ok:
	case status != StatusOK:
		d.key(p, "msglen", "message")
	case code == OpHello:
		d.uint(1, p+"version", nil)
		d.uint(4, p+"maxFrame", nil)
		d.uint(2, p+"maxBatch", nil)
		d.uint(2, p+"maxKey", nil)
		d.uint(1, p+"maxMulti", nil)
		d.uint(8, p+"slotCount", nil)
		d.uint(2, p+"slotSize", nil)
	case code == OpAcquire || code == OpPeek || code == OpRefund:
		if d.decision(p+"decision.")&limitsBit == 0 || !d.ok {
			break
		}
		n := int(d.uint(1, p+"n", func(v uint64) string { return "limits of the list" }))
		d.uint(1, p+"bound", func(v uint64) string { return "the limit that binds: limit[" + strconv.FormatUint(v, 10) + "]" })
		for i := 0; i < n && d.ok; i++ {
			d.decision(fmt.Sprintf("%slimit[%d].", p, i))
		}
	case code == OpLease:
		d.decision(p + "decision.")
		d.uint(8, p+"lease", func(v uint64) string {
			if v == 0 {
				return "none: denied"
			}
			return ""
		})
	case code == OpRelease:
		d.uint(1, p+"released", boolean)
		d.decision(p + "decision.")
	case code == OpReset:
		d.uint(1, p+"existed", boolean)
	case code == OpMulti:
		d.uint(1, p+"allowed", boolean)
		n := int(d.uint(1, p+"n", nil))
		for i := 0; i < n && d.ok; i++ {
			d.decision(fmt.Sprintf("%sdecision[%d].", p, i))
		}
	case code == OpScan:
		d.uint(8, p+"next", nil)
		n := int(d.uint(2, p+"n", nil))
		for i := 0; i < n && d.ok; i++ {
			q := fmt.Sprintf("%sentry[%d].", p, i)
			d.uint(1, q+"algorithm", algorithmName)
			d.i64(q+"fresh_at", unixTime)
			d.key(q, "keylen", "key")
		}
	case code == OpStats:
		n := int(d.uint(2, p+"n", nil))
		for i := 0; i < n && d.ok; i++ {
			q := fmt.Sprintf("%scounter[%d].", p, i)
			l := int(d.uint(1, q+"namelen", nil))
			d.bytes(l, q+"name")
			d.uint(8, q+"value", nil)
		}
	case isRegisterOp(code):
		d.uint(1, p+"ok", boolean)
		d.i64(p+"value", nil)
		d.i64(p+"ttl", duration)
		d.i64(p+"now", unixTime)
	case code == OpPing:
	default:
		d.note("unknown opcode in an OK result: its body cannot be located")
	}
}

// algorithmName is an algorithm byte as the vectors describe it: its name,
// or "algorithm(N)" for a value that names none (0 included).
func algorithmName(v uint64) string {
	if a := Algorithm(v); a.Valid() {
		return a.String()
	}
	return "algorithm(" + strconv.FormatUint(v, 10) + ")"
}
