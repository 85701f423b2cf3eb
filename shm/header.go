package shm

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
)

// The header page: writing a new one, validating and upgrading an existing
// one, and its mutable fields (clean flag, counters, high marks).

// writeHeader fills a zeroed header page for a new table with geometry o,
// fresh random seeds and the creation time created (Unix ns).
func writeHeader(hdr []byte, o Options, created int64) error {
	var seeds [16]byte
	if _, err := rand.Read(seeds[:]); err != nil {
		return err
	}
	le := binary.LittleEndian
	copy(hdr[offMagic:], magic)
	le.PutUint32(hdr[offVersion:], FormatVersion)
	le.PutUint32(hdr[offByteOrder:], byteOrderMark)
	le.PutUint32(hdr[offHeaderSize:], HeaderSize)
	le.PutUint32(hdr[offSlotSize:], uint32(o.SlotSize))
	le.PutUint64(hdr[offSlotCount:], o.SlotCount)
	copy(hdr[offSeed0:offSeed1+8], seeds[:])
	le.PutUint32(hdr[offProbeCap:], uint32(o.ProbeCap))
	le.PutUint64(hdr[offCreated:], uint64(created))
	le.PutUint64(hdr[offChecksum:], headerSum(hdr))
	le.PutUint32(hdr[offCleanFlag:], cleanMagic)
	putArena(hdr, o.ArenaCells)
	for i := range numHighMarks {
		putHighMark(hdr, i, 0)
	}
	return nil
}

// headerSum is the checksum of the header's fixed fields.
func headerSum(hdr []byte) uint64 { return xxhash.Sum64(hdr[:checksummed]) }

// validateHeader checks a header read from a file of size bytes, in the
// order magic, version, byte order, checksum, geometry, and returns the
// file's format version. The checksum comes before the geometry so that a
// damaged size field is reported as damage, not as a truncated file.
//
// A header whose checksum is that of the same header with an earlier
// version is an upgrade a crash interrupted (see format.go): it is reported
// as that version, to be upgraded again.
func validateHeader(hdr []byte, size int64) (uint32, error) {
	le := binary.LittleEndian
	if string(hdr[offMagic:offMagic+len(magic)]) != magic {
		return 0, ErrNotStateFile
	}
	v := le.Uint32(hdr[offVersion:])
	if v < 1 || v > FormatVersion {
		return 0, fmt.Errorf("%w: file has version %d, this build reads versions 1 to %d", ErrVersion, v, FormatVersion)
	}
	if bo := le.Uint32(hdr[offByteOrder:]); bo != byteOrderMark {
		return 0, fmt.Errorf("%w: byte-order mark %#08x", ErrByteOrder, bo)
	}
	if got, want := le.Uint64(hdr[offChecksum:]), headerSum(hdr); got != want {
		// An upgrade step interrupted between the version and the checksum
		// leaves the checksum of an earlier version.
		old := v - 1
		for old >= 1 && got != sumWithVersion(hdr, old) {
			old--
		}
		if old < 1 {
			return 0, fmt.Errorf("%w: stored %#016x, computed %#016x", ErrChecksum, got, want)
		}
		v = old
	}
	hs := le.Uint32(hdr[offHeaderSize:])
	ss := le.Uint32(hdr[offSlotSize:])
	n := le.Uint64(hdr[offSlotCount:])
	pc := le.Uint32(hdr[offProbeCap:])
	switch {
	case hs != HeaderSize:
		return 0, fmt.Errorf("%w: header size %d, want %d", ErrGeometry, hs, HeaderSize)
	case !ValidSlotSize(int(ss)):
		return 0, fmt.Errorf("%w: slot size %d", ErrGeometry, ss)
	case n < 1 || n > MaxSlotCount:
		return 0, fmt.Errorf("%w: slot count %d", ErrGeometry, n)
	case pc < 1 || pc > MaxProbeCap || uint64(pc) > n:
		return 0, fmt.Errorf("%w: probe cap %d for %d slots", ErrGeometry, pc, n)
	}
	var cells uint64
	if v >= arenaVersion {
		cells = le.Uint64(hdr[offArenaCells:])
		if le.Uint64(hdr[offArenaSum:]) != arenaSum(cells) || cells > MaxArenaCells {
			return 0, fmt.Errorf("%w: arena geometry (%d cells) fails its checksum", ErrChecksum, cells)
		}
	}
	want := versionSize(v, n, int(ss), cells)
	if size > want && grownSize(hdr, v, size) {
		// Extended by an upgrade a crash interrupted (this build's, or an
		// earlier build's to a version between).
		return v, nil
	}
	if size < want {
		return 0, fmt.Errorf("%w: %d bytes, header declares %d slots of %d bytes and %d arena cells (%d bytes)", ErrTruncated, size, n, ss, cells, want)
	}
	if size > want {
		return 0, fmt.Errorf("%w: %d bytes, header declares %d bytes", ErrGeometry, size, want)
	}
	return v, nil
}

// arenaVersion is the first format version with an arena.
const arenaVersion = 5

// upgradedSize is the size of a validated file of version v once upgraded
// to FormatVersion.
func upgradedSize(hdr []byte, v uint32) int64 { return sizeAs(hdr, v, FormatVersion) }

// sizeAs is the size of a validated file of version v once upgraded to
// version u: a file of a version before arenaVersion gets the default arena.
func sizeAs(hdr []byte, v, u uint32) int64 {
	n := binary.LittleEndian.Uint64(hdr[offSlotCount:])
	cells := DefaultArenaCells(n)
	if v >= arenaVersion {
		cells = binary.LittleEndian.Uint64(hdr[offArenaCells:])
	}
	return versionSize(u, n, int(binary.LittleEndian.Uint32(hdr[offSlotSize:])), cells)
}

// grownSize reports whether size is that of a validated file of version v
// once upgraded to a later version: Open extended it for an upgrade (by
// this build, or an earlier one) that a crash interrupted.
func grownSize(hdr []byte, v uint32, size int64) bool {
	for u := v + 1; u <= FormatVersion; u++ {
		if size == sizeAs(hdr, v, u) {
			return true
		}
	}
	return false
}

// sumWithVersion is the header checksum hdr would have with version v.
func sumWithVersion(hdr []byte, v uint32) uint64 {
	var b [checksummed]byte
	copy(b[:], hdr)
	binary.LittleEndian.PutUint32(b[offVersion:], v)
	return xxhash.Sum64(b[:])
}

// upgrade brings the mapped header of a file of format version v up to
// FormatVersion, one version at a time, before anything else but quiesce
// reads or writes the file. Each step can be redone: the version number is
// written last but for the checksum (see validateHeader).
func (t *Table) upgrade(v uint32) {
	hdr := t.headerBytes()
	le := binary.LittleEndian
	for ; v < FormatVersion; v++ {
		switch v {
		case 1:
			// The version-1 high time has no checksum: drop it (format.go).
			le.PutUint64(hdr[offV1HighTime:], 0)
			for i := range numHighMarks {
				putHighMark(hdr, i, 0)
			}
		case arenaVersion - 1:
			// Open extended the file; the new bytes are zero, so every
			// cell is free (format.go).
			putArena(hdr, DefaultArenaCells(t.n))
			binary.LittleEndian.PutUint64(hdr[offArenaUsed:], 0)
			binary.LittleEndian.PutUint64(hdr[offArenaHint:], 0)
		case holdersVersion - 1:
			// Open extended the file: the registry is zero, every entry
			// free. Lock words a killed process left held carry tags of
			// the old registry: recovery frees them (format.go).
			le.PutUint32(hdr[offLastTag:], 0)
			atomic.StoreUint32(t.cleanFlag(), dirtyMagic)
		case tagsVersion - 1:
			// Open extended the file by the tags and writes them all
			// (writeTags) after the upgrade, as on every open.
		}
		crashPoint()
		le.PutUint32(hdr[offVersion:], v+1)
		crashPoint()
		le.PutUint64(hdr[offChecksum:], headerSum(hdr))
	}
}

func (t *Table) cleanFlag() *uint32    { return u32at(t.base, offCleanFlag) }
func (t *Table) counter(c int) *uint64 { return u64at(t.base, offCounters+uintptr(c)*8) }

// highMarkSum is the checksum of a high mark holding time v.
func highMarkSum(v int64) uint64 {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(v))
	return xxhash.Sum64(b[:])
}

// putHighMark writes time v into high mark i of hdr, time first: a mark
// torn between the two writes fails its checksum.
func putHighMark(hdr []byte, i int, v int64) {
	off := offHighMarks + i*highMarkSize
	binary.LittleEndian.PutUint64(hdr[off:], uint64(v))
	binary.LittleEndian.PutUint64(hdr[off+8:], highMarkSum(v))
}

// highMark returns the time in high mark i of hdr and whether its checksum
// matches.
func highMark(hdr []byte, i int) (int64, bool) {
	off := offHighMarks + i*highMarkSize
	v := int64(binary.LittleEndian.Uint64(hdr[off:]))
	return v, binary.LittleEndian.Uint64(hdr[off+8:]) == highMarkSum(v)
}

// HighTime returns the highest server time recorded with RecordTime, Unix
// ns, and whether it could be trusted: the higher of the two high marks
// whose checksum matches, or 0 and false if neither does (a new file's
// marks hold 0 and match). A server starts its clock no lower than it.
func (t *Table) HighTime() (int64, bool) {
	t.marks.Lock()
	defer t.marks.Unlock()
	hdr := t.headerBytes()
	best, ok := int64(0), false
	for i := range numHighMarks {
		if v, valid := highMark(hdr, i); valid && (!ok || v > best) {
			best, ok = v, true
		}
	}
	return best, ok
}

// RecordTime raises the recorded highest server time to now, if it is
// higher, by rewriting the lower (or damaged) of the two high marks, so a
// crash in the middle leaves the other intact. It is written with the
// header, so it survives restarts once synced. now must be the server's
// clock, never a client's timestamp. An attached table records nothing.
func (t *Table) RecordTime(now int64) {
	if !t.owner {
		return // only the owner keeps the file's clock
	}
	t.marks.Lock()
	defer t.marks.Unlock()
	hdr := t.headerBytes()
	older, high := 0, int64(0)
	v0, ok0 := highMark(hdr, 0)
	v1, ok1 := highMark(hdr, 1)
	switch {
	case !ok0:
		older, high = 0, v1
	case !ok1:
		older, high = 1, v0
	case v0 <= v1:
		older, high = 0, v1
	default:
		older, high = 1, v0
	}
	if ok0 || ok1 {
		if now <= high {
			return
		}
	}
	putHighMark(hdr, older, now)
}

// Stats are the table's counters. They are kept in the file's header, so they
// survive restarts; they are statistics, updated without ordering guarantees.
type Stats struct {
	SlotCount    uint64 // slots in the table
	Used         uint64 // slots that ever held a bucket (never decreases)
	Inserts      uint64 // buckets created
	Reclaims     uint64 // slots taken over from another key's fresh bucket
	TableFull    uint64 // creations refused with ErrTableFull
	Torn         uint64 // slots found torn (on open or when first used) and repaired
	LockedOnOpen uint64 // slots whose lock was held by a holder that is gone
	Syncs        uint64 // successful Syncs
	SyncErrors   uint64 // failed Syncs
	ArenaCells   uint64 // cells of the arena
	ArenaUsed    uint64 // cells allocated to blocks
	ArenaFull    uint64 // blocks refused with ErrArenaFull
}

// Stats returns the table's counters.
func (t *Table) Stats() Stats {
	c := func(i int) uint64 { return atomic.LoadUint64(t.counter(i)) }
	return Stats{
		SlotCount:    t.n,
		Used:         c(counterUsed),
		Inserts:      c(counterInserts),
		Reclaims:     c(counterReclaims),
		TableFull:    c(counterTableFull),
		Torn:         c(counterTorn),
		LockedOnOpen: c(counterLockedOnOpen),
		Syncs:        c(counterSyncs),
		SyncErrors:   c(counterSyncErrors),
		ArenaCells:   t.cells,
		ArenaUsed:    atomic.LoadUint64(u64at(t.base, offArenaUsed)),
		ArenaFull:    c(counterArenaFull),
	}
}
