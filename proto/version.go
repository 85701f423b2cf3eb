package proto

// The oldest version a request needs. A client may write each frame in the
// oldest version that holds its operations: a sidecar answers a frame in
// its version, so a client of this package then keeps working against a
// sidecar of an older version for everything that version has (its
// specs, ACQUIRE and the rest), and only what is new needs a new sidecar.

// ItemVersion returns the oldest version whose frames may carry the item
// operation AppendItem(dst, code, f, l, ...) writes: 7 with FlagAll, 5 for a quota, 4 with
// FlagDeadline, 3 for LEASE, RELEASE and sliding_log, window_counters and
// concurrency, 2 for a named limit or a shadow request (a spec's
// shadow=true included), else 1.
func ItemVersion(code Opcode, f Flags, l *Limit) uint8 {
	switch {
	case f&FlagAll != 0:
		return ListVersion
	case l.Name == "" && !l.Algorithm.ValidIn(4):
		return 5
	case f&FlagDeadline != 0:
		return 4
	case isLeaseOp(code) || !l.Algorithm.ValidIn(2) && l.Name == "":
		return 3
	case (f|opLimitFlags(code, l))&(FlagNamed|FlagShadow) != 0:
		return 2
	}
	return 1
}

// ScanVersion is the version a SCAN is best written in: the newest that
// changed what it lists (a SCAN in a frame of version 1 or 2 leaves out
// the buckets of the algorithms of version 3; version 4 changed nothing).
const ScanVersion = 3

// MultiVersion returns the oldest version whose frames may carry the MULTI
// AppendMulti(dst, f, at, items) writes.
func MultiVersion(items []MultiItem) uint8 {
	v := uint8(1)
	for i := range items {
		v = max(v, ItemVersion(OpAcquire, items[i].Flags&^FlagShadow, &Limit{Algorithm: items[i].Limit.Algorithm, Name: items[i].Limit.Name}))
	}
	return v
}

// RegisterVersion is the version of the register operations (REGGET,
// REGSET, REGCAS, REGDEL): a client writes them in frames of version 6
// only to a sidecar that said, in HELLO, that it speaks it.
const RegisterVersion = 6

// ListVersion is the version of FlagAll, the request for every decision of
// a named list of limits: a client sets it, in frames of version 7, only
// for a sidecar that said, in HELLO, that it speaks it.
const ListVersion = 7
