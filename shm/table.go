package shm

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/edsrzf/mmap-go"
)

// Options are the geometry of a new table. They are fixed at creation and
// recorded in the file's header.
type Options struct {
	// SlotCount is the number of slots, >= 1. Memory and file size are
	// about HeaderSize + SlotCount*SlotSize + ArenaCells*CellSize bytes
	// (FileSize).
	SlotCount uint64
	// SlotSize is 64, 128 or 256 bytes; 0 means 64. Slots above 64 bytes keep
	// keys of up to SlotSize-64 bytes inline, for scan and inspection.
	SlotSize int
	// ProbeCap is the longest probe sequence; 0 means DefaultProbeCap. It is
	// clamped to SlotCount.
	ProbeCap int
	// ArenaCells is the number of 64-byte cells of the arena, where buckets
	// keep state that does not fit their slot; 0 means
	// DefaultArenaCells(SlotCount).
	ArenaCells uint64
	// HugePages asks the kernel to map the file with huge pages (2 MiB on
	// x86-64; madvise MADV_HUGEPAGE) where it can: a lookup then seldom
	// misses the TLB. It is this process's choice, not stored in the
	// file, and only advice: the kernel uses huge pages only where
	// transparent huge pages are enabled ("madvise" or "always"), the file
	// system caches files in large folios (ext4 on Linux 6.18 does), and
	// the file's pages were not already cached in small ones. The cost is
	// on disk: the kernel writes a dirty huge page back whole, so each Sync
	// writes 2 MiB for every huge page with a changed slot (see the
	// package documentation, "Durability"). Heap tables ignore it.
	HugePages bool
}

// MaxSlotCount bounds SlotCount so that file offsets fit comfortably in int64.
const MaxSlotCount = 1 << 40

// FileSize is the size of a state file created with o (after defaults).
func (o Options) FileSize() int64 {
	o = o.withDefaults()
	return fileSize(o.SlotCount, o.SlotSize, o.ArenaCells)
}

func (o Options) withDefaults() Options {
	if o.SlotSize == 0 {
		o.SlotSize = MinSlotSize
	}
	if o.ProbeCap == 0 {
		o.ProbeCap = DefaultProbeCap
	}
	if o.ArenaCells == 0 {
		o.ArenaCells = DefaultArenaCells(o.SlotCount)
	}
	if o.ProbeCap > 0 && uint64(o.ProbeCap) > o.SlotCount {
		o.ProbeCap = int(o.SlotCount)
	}
	return o
}

func (o Options) validate() error {
	switch {
	case o.SlotCount < 1 || o.SlotCount > MaxSlotCount:
		return fmt.Errorf("%w: slot count %d out of range [1, 2^40]", ErrOptions, o.SlotCount)
	case !ValidSlotSize(o.SlotSize):
		return fmt.Errorf("%w: slot size %d is not 64, 128 or 256", ErrOptions, o.SlotSize)
	case o.ArenaCells > MaxArenaCells:
		return fmt.Errorf("%w: arena of %d cells, more than 2^40", ErrOptions, o.ArenaCells)
	case o.ProbeCap < 1 || o.ProbeCap > MaxProbeCap:
		return fmt.Errorf("%w: probe cap %d out of range [1, %d]", ErrOptions, o.ProbeCap, MaxProbeCap)
	}
	return nil
}

// Table is an open-addressing hash table of fixed-size slots in a shared
// mapping of a state file (or, for tests, in a heap buffer). It is the
// file's owner (Create, Open) or attached to an owner's file (Attach); see
// the package documentation for what each may do.
//
// A Table is safe for concurrent use by many goroutines. Close must not run
// concurrently with any other method.
type Table struct {
	base      unsafe.Pointer // first byte of the mapping or heap buffer
	version   uint32         // the file's format version (older ones only before an upgrade, or in an Image)
	gen       uint32         // this table's holder tag, in the lock words it holds
	holderIdx int            // its entry in the holders registry
	owner     bool           // the file's owner (or a heap table), not attached
	ownerSeen uint32         // attached: the owner tag when it attached (Enter)
	holders   unsafe.Pointer // the holders registry's entry 0
	busyBase  unsafe.Pointer // entry 0's busy count
	busyStep  uintptr        // bytes from one busy count to the next
	nHolders  int            // entries in the registry
	alive     atomic.Uint64  // a holder recently found alive (holderAlive)
	parked    parking        // waiters for locks that stay held (park.go)
	slotSize  uintptr
	n         uint64 // slot count
	probeCap  uint64
	seed0     uint64
	seed1     uint64
	room      int            // inline key bytes per slot
	cells     uint64         // arena cells; 0 without an arena
	bitmap    unsafe.Pointer // the arena's bitmap
	cellBase  unsafe.Pointer // cell 0
	tags      unsafe.Pointer // slot 0's tag (version 7)
	lastSweep atomic.Int64   // when an allocation failure last swept (sweepIfDue's clock)

	file *os.File  // nil for heap tables
	mm   mmap.MMap // nil for heap tables
	heap []uint64  // keeps a heap table's buffer alive

	closed atomic.Bool
	// checkOnUse is set while a table opened from a clean file (so not
	// scanned) may hold slots nobody has checked: lockSlot verifies each
	// slot's checksum until Scrub has checked them all.
	checkOnUse atomic.Bool
	marks      sync.Mutex // serialises RecordTime and HighTime
	opened     OpenReport
}

// OpenReport says what Open found and did, for the owner's log.
type OpenReport struct {
	Created      bool   // the file was created, not opened
	UpgradedFrom uint32 // the format version the file was upgraded from; 0 if none
	Recovered    bool   // the file was not closed cleanly and was scanned
	Torn         uint64 // slots the scan found torn and repaired
	Dropped      uint64 // buckets the scan dropped: unreachable after a power loss
	Released     uint64 // claims and reservations whose holder died, released
}

// Opened returns what Open (or Create) found and did.
func (t *Table) Opened() OpenReport { return t.opened }

// Geometry describes an open table.
type Geometry struct {
	SlotCount  uint64
	SlotSize   int
	ProbeCap   int
	ArenaCells uint64
	FileSize   int64
}

// Geometry returns the table's fixed sizes.
func (t *Table) Geometry() Geometry {
	return Geometry{
		SlotCount:  t.n,
		SlotSize:   int(t.slotSize),
		ProbeCap:   int(t.probeCap),
		ArenaCells: t.cells,
		FileSize:   versionSize(t.version, t.n, int(t.slotSize), t.cells),
	}
}

// NewHeap returns a table in process memory with the same layout as a state
// file. It is for tests and benchmarks: nothing survives the process.
func NewHeap(o Options) (*Table, error) {
	o = o.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	if !littleEndian() {
		return nil, ErrByteOrder
	}
	buf, base := heapBuffer(uintptr(o.FileSize()))
	t := &Table{base: base, heap: buf}
	hdr := unsafe.Slice((*byte)(base), HeaderSize)
	if err := writeHeader(hdr, o, 0); err != nil {
		return nil, err
	}
	t.load(hdr, FormatVersion)
	t.opened.Created, t.owner = true, true
	binary.LittleEndian.PutUint32(hdr[offCleanFlag:], dirtyMagic)
	if err := t.register(); err != nil {
		return nil, err
	}
	return t, nil
}

// Create makes a new state file at path with geometry o and opens it. It
// fails if path exists. The file's space is allocated before it appears at
// path, so a disk too small for it fails here, not later. now is the
// caller's clock, recorded as the creation time.
func Create(path string, o Options, now int64) (*Table, error) {
	o = o.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	if !littleEndian() {
		return nil, ErrByteOrder
	}
	// Build the file under a temporary name and link it into place, so path
	// never names a half-initialised file and an existing file is never
	// replaced.
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".new-*")
	if err != nil {
		return nil, fmt.Errorf("shm: create %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	fail := func(err error) (*Table, error) {
		f.Close()
		return nil, fmt.Errorf("shm: create %s: %w", path, err)
	}
	if err := lockFile(f); err != nil {
		return fail(err)
	}
	if err := allocate(f, o.FileSize()); err != nil {
		return fail(err)
	}
	hdr := make([]byte, HeaderSize)
	if err := writeHeader(hdr, o, now); err != nil {
		return fail(err)
	}
	if _, err := f.WriteAt(hdr, 0); err != nil {
		return fail(err)
	}
	if err := syncFile(f); err != nil {
		return fail(err)
	}
	if err := os.Link(tmp, path); err != nil {
		return fail(err)
	}
	return mapTable(f, FormatVersion, true, o.HugePages)
}

// Open opens an existing state file. It validates the header in a fixed
// order (regular file, owner lock, length, magic, version, byte order,
// checksum, geometry) and returns the first failure's sentinel error, wrapped
// with detail; the file is not modified unless every check passes. Then it
// makes sure every block of the file is allocated (a sparse file on a full
// disk fails here, instead of raising SIGBUS when a page is first written),
// upgrades a file of an earlier format version in place, and scans a file
// that was not closed cleanly: slots whose lock was held or whose checksum
// is wrong are reset to a conservative state (see Slot.Conservative) and
// counted. Opened reports what it did.
func Open(path string) (*Table, error) { return OpenWith(path, Options{}) }

// OpenWith is Open, mapping the file as o.HugePages says. o's geometry is
// ignored: an existing file keeps its own.
func OpenWith(path string, o Options) (*Table, error) {
	if !littleEndian() {
		return nil, ErrByteOrder
	}
	f, err := openNoFollow(path)
	if err != nil {
		return nil, fmt.Errorf("shm: open %s: %w", path, err)
	}
	fail := func(err error) (*Table, error) {
		f.Close()
		return nil, fmt.Errorf("shm: open %s: %w", path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		return fail(err)
	}
	if !fi.Mode().IsRegular() {
		return fail(ErrNotRegular)
	}
	if err := lockFile(f); err != nil {
		return fail(err)
	}
	hdr := make([]byte, HeaderSize)
	if n, err := f.ReadAt(hdr, 0); err != nil && (err != io.EOF || n < len(hdr)) {
		if err == io.EOF {
			// Too short for a header: say which, foreign or truncated.
			if n >= len(magic) && string(hdr[:len(magic)]) == magic {
				return fail(fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrTruncated, n, HeaderSize))
			}
			return fail(fmt.Errorf("%w: %d bytes, no header", ErrNotStateFile, n))
		}
		return fail(err)
	}
	version, err := validateHeader(hdr, fi.Size())
	if err != nil {
		return fail(err)
	}
	if err := allocateHoles(f, fi.Size()); err != nil {
		return fail(fmt.Errorf("allocating the file's blocks: %w", err))
	}
	if version < FormatVersion {
		// The upgrades to versions 5, 6 and 7 add the arena after the
		// slots, the holders registry after it and the tags after that:
		// extend the file (with zeros) before mapping it.
		if err := allocate(f, upgradedSize(hdr, version)); err != nil {
			return fail(fmt.Errorf("extending the file for its upgrade: %w", err))
		}
		crashPoint()
	}
	return mapTable(f, version, false, o.HugePages)
}

// mapTable maps a validated file of format version, upgrades it, marks it
// dirty and recovers it if it was not closed cleanly. A file that was closed
// cleanly (and not just created) is checked on use until Scrub has checked
// it. huge asks for huge pages (Options.HugePages).
func mapTable(f *os.File, version uint32, created, huge bool) (*Table, error) {
	m, err := mapFile(f, huge)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("shm: map %s: %w", f.Name(), err)
	}
	t := &Table{base: mappingBase(m), file: f, mm: m, owner: true}
	t.load(t.headerBytes(), version)
	t.opened.Created = created
	// Tables still attached to a previous owner (one that died) stop
	// deciding before anything is upgraded or repaired: they see the owner
	// tag change. They are found in the registry of the file's version.
	atomic.StoreUint32(u32at(t.base, offOwnerTag), 0)
	t.pruneHolders(true)
	t.quiesce()
	if version < FormatVersion {
		t.upgrade(version)
		t.opened.UpgradedFrom = version
		t.load(t.headerBytes(), FormatVersion)
	}
	// Insert locks are held only for an instant, but a process killed in that
	// instant leaves one held: the file's single owner starts with them free.
	clear(t.headerBytes()[offInsertLocks : offInsertLocks+numInsertLocks*4])
	atomic.StoreUint32(u32at(t.base, offArenaLock), 0)
	flag := t.cleanFlag()
	if *flag != cleanMagic {
		t.recover()
	} else if !created {
		t.checkOnUse.Store(true)
	}
	t.writeTags()
	t.recoverArena()
	// Record that the file is in use before anything else is written, so a
	// crash from here on is detected by the next Open.
	atomic.StoreUint32(flag, dirtyMagic)
	if err := syncRange(t.headerBytes()); err != nil {
		m.Unmap()
		f.Close()
		return nil, fmt.Errorf("shm: sync header of %s: %w", f.Name(), err)
	}
	// Serve: register as a holder, then let tables attach.
	if err := t.register(); err != nil {
		m.Unmap()
		f.Close()
		return nil, fmt.Errorf("shm: open %s: %w", f.Name(), err)
	}
	atomic.StoreUint32(u32at(t.base, offOwnerTag), t.gen)
	return t, nil
}

// Attach maps the state file at path, which its owner (a sidecar, through
// Open) is serving, and registers as one of its holders. An attached table
// finds, claims, locks and decides like the owner's, under the same locks;
// it never syncs, upgrades, recovers, scrubs or closes the file for the
// owner (see the package documentation). It refuses a file whose owner is
// not serving it (ErrNoOwner: not running, or still recovering it) and a
// file of another format version (ErrVersion: the owner upgrades files).
func Attach(path string) (*Table, error) {
	if !littleEndian() {
		return nil, ErrByteOrder
	}
	f, err := openNoFollow(path)
	if err != nil {
		return nil, fmt.Errorf("shm: attach %s: %w", path, err)
	}
	fail := func(err error) (*Table, error) {
		f.Close()
		return nil, fmt.Errorf("shm: attach %s: %w", path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		return fail(err)
	}
	if !fi.Mode().IsRegular() {
		return fail(ErrNotRegular)
	}
	hdr := make([]byte, HeaderSize)
	if _, err := f.ReadAt(hdr, 0); err != nil {
		return fail(fmt.Errorf("%w: %v", ErrTruncated, err))
	}
	v, err := validateHeader(hdr, fi.Size())
	if err != nil {
		return fail(err)
	}
	if v != FormatVersion {
		return fail(fmt.Errorf("%w: file has version %d, this build attaches to version %d (its owner upgrades it)", ErrVersion, v, FormatVersion))
	}
	m, err := mapFile(f, false)
	if err != nil {
		return fail(err)
	}
	t := &Table{base: mappingBase(m), file: f, mm: m}
	t.load(t.headerBytes(), v)
	t.ownerSeen = atomic.LoadUint32(u32at(t.base, offOwnerTag))
	if !t.ownerLive() {
		m.Unmap()
		return fail(ErrNoOwner)
	}
	if err := t.register(); err != nil {
		m.Unmap()
		return fail(err)
	}
	return t, nil
}

// Owner reports whether t owns its file (or is a heap table), rather than
// being attached to another's.
func (t *Table) Owner() bool { return t.owner }

// load reads the geometry from a validated header of format version v.
func (t *Table) load(hdr []byte, v uint32) {
	le := binary.LittleEndian
	t.version = v
	t.slotSize = uintptr(le.Uint32(hdr[offSlotSize:]))
	t.n = le.Uint64(hdr[offSlotCount:])
	t.seed0 = le.Uint64(hdr[offSeed0:])
	t.seed1 = le.Uint64(hdr[offSeed1:])
	t.probeCap = uint64(le.Uint32(hdr[offProbeCap:]))
	t.room = inlineRoom(int(t.slotSize))
	if v >= arenaVersion {
		t.loadArena(le.Uint64(hdr[offArenaCells:]))
	}
	t.loadHolders()
	t.tags = nil
	if v >= tagsVersion {
		t.tags = unsafe.Add(t.base, tagsOffset(t.n, int(t.slotSize), t.cells))
	}
}

// Sync writes every modified page of the table to disk and waits for the
// device (msync with MS_SYNC). The kernel tracks which pages are dirty, so the
// cost is proportional to the pages written since the last Sync. A heap
// table's Sync does nothing; an attached table's fails with ErrNotOwner.
func (t *Table) Sync() error {
	if t.closed.Load() {
		return ErrClosed
	}
	if !t.owner {
		return ErrNotOwner
	}
	if t.mm == nil {
		return nil
	}
	if err := syncRange(t.mm); err != nil {
		atomic.AddUint64(t.counter(counterSyncErrors), 1)
		return fmt.Errorf("shm: sync: %w", err)
	}
	atomic.AddUint64(t.counter(counterSyncs), 1)
	return nil
}

// Close releases the table. The owner's Close first stops tables from
// attaching, then syncs the table, marks the file clean and releases it; if
// the final sync fails the file is left marked dirty (so the next Open
// scans it) and the error is returned. An attached table's Close only
// leaves the holders registry and unmaps the file. No other method may be
// running or be called afterwards.
func (t *Table) Close() error {
	if t.closed.Swap(true) {
		return ErrClosed
	}
	if t.owner {
		// Attached tables stop deciding before the final sync.
		atomic.CompareAndSwapUint32(u32at(t.base, offOwnerTag), t.gen, 0)
		t.quiesce()
	}
	t.deregister()
	if t.mm == nil {
		t.heap = nil
		return nil
	}
	if !t.owner {
		err := t.mm.Unmap()
		if cerr := t.file.Close(); err == nil {
			err = cerr
		}
		t.base = nil
		return err
	}
	err := syncRange(t.mm)
	if err == nil {
		atomic.AddUint64(t.counter(counterSyncs), 1)
		atomic.StoreUint32(t.cleanFlag(), cleanMagic)
		err = syncRange(t.headerBytes())
	}
	if uerr := t.mm.Unmap(); err == nil {
		err = uerr
	}
	if cerr := t.file.Close(); err == nil {
		err = cerr
	}
	t.base = nil
	if err != nil {
		return fmt.Errorf("shm: close: %w", err)
	}
	return nil
}
