package shm

import (
	"encoding/binary"
	"fmt"
	"io"
	"math/bits"
	"os"
	"sync/atomic"

	"github.com/edsrzf/mmap-go"
)

// Offline inspection: a read-only view of a state file that is safe to take
// beside a live sidecar. It never locks the file or a slot, never writes a
// byte (the mapping is read-only: a write would fault), and never registers
// as a holder, so the owner cannot tell it is there.

// Image is a read-only view of a state file, for inspect and verify. Its
// methods may run while the file's owner serves it; they then see the slots
// as they are at each instant.
type Image struct {
	t       *Table
	version uint32 // the file's format version (an older one is upgraded by the owner's next Open)
}

// OpenImage maps the state file at path read-only, after validating its
// header as Open does (without taking the owner lock): it fails with the
// same sentinel errors for a file that is not a state file, truncated or
// damaged in its header.
func OpenImage(path string) (*Image, error) {
	if !littleEndian() {
		return nil, ErrByteOrder
	}
	fail := func(err error) (*Image, error) { return nil, fmt.Errorf("shm: %s: %w", path, err) }
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return fail(ErrNotRegular)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the mapping outlives the descriptor
	hdr := make([]byte, HeaderSize)
	if n, err := f.ReadAt(hdr, 0); err != nil {
		if err != io.EOF {
			return fail(err)
		}
		if n >= len(magic) && string(hdr[:len(magic)]) == magic {
			return fail(fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrTruncated, n, HeaderSize))
		}
		return fail(fmt.Errorf("%w: %d bytes, no header", ErrNotStateFile, n))
	}
	st, err := f.Stat()
	if err != nil {
		return fail(err)
	}
	v, err := validateHeader(hdr, st.Size())
	if err != nil {
		return fail(err)
	}
	m, err := mmap.Map(f, mmap.RDONLY, 0)
	if err != nil {
		return fail(err)
	}
	t := &Table{base: mappingBase(m), mm: m}
	t.load(hdr, v) // the geometry is fixed: read it from the validated copy
	return &Image{t: t, version: v}, nil
}

// Close unmaps the file.
func (im *Image) Close() error {
	if im.t.mm == nil {
		return ErrClosed
	}
	err := im.t.mm.Unmap()
	im.t.mm, im.t.base = nil, nil
	return err
}

// FileState is how a state file was left.
type FileState uint8

const (
	Clean FileState = iota // closed cleanly: the next Open scrubs it in the background
	InUse                  // open by a live owner
	Dirty                  // not closed cleanly and no owner: the next Open recovers it
)

func (s FileState) String() string {
	return [...]string{"clean", "in use", "dirty"}[s]
}

// Report is what Inspect finds in a state file.
type Report struct {
	Version  uint32 // format version
	Created  int64  // creation time, Unix ns
	Geometry Geometry
	State    FileState
	Owner    int   // the owner's pid when State is InUse
	Holders  []int // pids of the processes registered on the file
	// MaxHolders is how many processes may have the file open at once: the
	// entries of its holders registry (NumHolders from version 6).
	MaxHolders int
	HighTime   int64 // the highest server time recorded, Unix ns; 0 if none is valid
	Stats      Stats // the header's counters

	Used         uint64           // slots holding a fingerprint
	Live         uint64           // slots whose state words hold a bucket's state
	Fresh        uint64           // live buckets back to their new state at the time given (reclaimable)
	Conservative uint64           // slots found torn and awaiting a drained state
	ByKind       map[uint8]uint64 // live buckets by algorithm id
	// Probe lengths: Displacement[k] counts the buckets that lie d slots
	// past their home slot with 2^(k-1) <= d < 2^k (Displacement[0]: d == 0).
	Displacement    []uint64
	MaxDisplacement uint64
}

// Load is the share of slots that hold a fingerprint.
func (r *Report) Load() float64 {
	if r.Geometry.SlotCount == 0 {
		return 0
	}
	return float64(r.Used) / float64(r.Geometry.SlotCount)
}

// Inspect reads the header and every slot, without locks, and reports what
// it finds; now (Unix ns) decides which buckets are fresh. On a file in
// use the counts are a blur of the instants each slot was read.
func (im *Image) Inspect(now int64) Report {
	t := im.t
	hdr := t.headerBytes()
	le := binary.LittleEndian
	r := Report{
		Version:    im.version,
		Created:    int64(le.Uint64(hdr[offCreated:])),
		Geometry:   t.Geometry(),
		Stats:      t.Stats(),
		Holders:    t.Holders(),
		ByKind:     map[uint8]uint64{},
		MaxHolders: t.nHolders,
	}
	r.State, r.Owner = im.state()
	if im.version >= 2 {
		for i := range numHighMarks {
			if v, ok := highMark(hdr, i); ok && v > r.HighTime {
				r.HighTime = v
			}
		}
	}
	for i := range t.n {
		p := t.slotPtr(i)
		fp := loadFP(p)
		if fp == (Fingerprint{}) {
			continue
		}
		r.Used++
		flags, kind := *u8at(p, slotFlags), *u8at(p, slotKind)
		if flags&flagConservative != 0 {
			r.Conservative++
		}
		if flags&flagLive != 0 {
			r.Live++
			r.ByKind[kind]++
			if atomic.LoadInt64(i64at(p, slotFreshAt)) <= now {
				r.Fresh++
			}
		}
		d := (i + t.n - t.home(fp)) % t.n
		k := 0
		if d > 0 {
			k = bits.Len64(d) // d in [2^(k-1), 2^k)
		}
		for len(r.Displacement) <= k {
			r.Displacement = append(r.Displacement, 0)
		}
		r.Displacement[k]++
		r.MaxDisplacement = max(r.MaxDisplacement, d)
	}
	return r
}

// state says whether the file is clean, in use by a live owner (and its
// pid), or dirty.
func (im *Image) state() (FileState, int) {
	t := im.t
	if atomic.LoadUint32(t.cleanFlag()) == cleanMagic {
		return Clean, 0
	}
	if tag := atomic.LoadUint32(u32at(t.base, offOwnerTag)); tag != 0 {
		if pid, ok := im.liveHolder(tag); ok {
			return InUse, pid
		}
	}
	return Dirty, 0
}

// liveHolder returns the pid of the registered holder with tag, if its
// process is alive.
func (im *Image) liveHolder(tag uint32) (int, bool) {
	e := im.t.entryOf(tag)
	if e == nil {
		return 0, false
	}
	pid := atomic.LoadUint32(u32at(e, 4))
	return int(pid), pid != 0 && processAlive(int(pid), atomic.LoadUint64(u64at(e, 8)))
}

// Verify checks every slot's checksum and the probe invariants, as
// Table.Verify does, in a form that tolerates a live owner: a slot whose
// lock is held by a live process, or whose problem disappears when it is
// read again a moment later, was being written and is not damage. It
// returns ErrCorrupt joined with up to maxProblems problems, or nil.
func (im *Image) Verify() error { return im.t.verify(im) }

// Stats returns the counters of the file's header, without scanning the
// slots.
func (im *Image) Stats() Stats { return im.t.Stats() }
