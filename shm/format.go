package shm

import "github.com/sluicehq/sluice/vocab"

// This file is the specification of the state file. Every offset below is a
// byte offset; every multi-byte field is little-endian. Other tools may read
// the file from this description alone.
//
// The file is a header page, SlotCount fixed-size slots, the arena (version
// 5): a bitmap of its cells and ArenaCells cells of 64 bytes, where buckets
// whose state does not fit a slot keep the rest (their block), then the
// holders registry (version 6), then the tags (version 7):
//
//	offset 0          4096            4096+N*S   A        A+B      E          T=E+0x14000   T+G
//	+-----------------+---------------+-----+----+--------+--------+----------+-------------+
//	| header (4096 B) | slot 0 .. N-1 (S bytes) | bitmap | cells  | holders  | tags (N B)  |
//	+-----------------+---------------+-----+----+--------+--------+----------+-------------+
//
// where A = 4096+N*S rounded up to a multiple of 4096 (the gap is zero), B
// = ceil(C/64)*8 rounded up to a multiple of 4096, C = ArenaCells, E =
// A+B+C*64 rounded up to a multiple of 4096, and G = N rounded up to a
// multiple of 4096. A file with C = 0 has no arena and E = 4096+N*S rounded
// up to a multiple of 4096.
//
// The header page:
//
//	0x000  magic       [8]byte  "SLUICE\x1a\n" (the ^Z and LF catch text-mode damage)
//	0x008  version     uint32   FormatVersion
//	0x00c  byteOrder   uint32   0x01020304, written little-endian
//	0x010  headerSize  uint32   HeaderSize (4096)
//	0x014  slotSize    uint32   64, 128 or 256
//	0x018  slotCount   uint64   number of slots, >= 1
//	0x020  seed0       uint64   xxhash seed of the fingerprint's first half
//	0x028  seed1       uint64   xxhash seed of the fingerprint's second half
//	0x030  probeCap    uint32   longest probe sequence, in slots
//	0x034  reserved    uint32   0
//	0x038  created     int64    creation time, Unix ns
//	0x040  checksum    uint64   xxhash64 (seed 0) of bytes [0x000, 0x040)
//	-------------------------------------------------------------- mutable below
//	0x048  cleanFlag   uint32   cleanMagic after a graceful close, else dirty
//	0x04c  reserved    uint32   0
//	0x050  reserved    int64    0 (version 1: the high time, unchecksummed)
//	0x058  counters    [16]uint64  see counter* (statistics, best effort)
//	0x0d8  highMarks   [2]{time int64, sum uint64}
//	                            the highest server time recorded (Unix ns), in
//	                            two copies written alternately, each with
//	                            sum = xxhash64 (seed 0) of its time (8 bytes,
//	                            little-endian); the server's clock never
//	                            starts below the higher valid copy. A copy
//	                            whose sum does not match is ignored, so a torn
//	                            or flipped time can only lower the floor.
//	0x0f8  ownerTag    uint32   the tag of the owner's holder entry once it has
//	                            opened (and recovered) the file, 0 before and
//	                            after: attached tables require it
//	0x0fc  lastTag     uint32   the tag drawn last (version 6; see the holders
//	                            registry)
//	0x100  reserved    [0x500]byte  ignored (versions 3 to 5: a holders
//	                            registry of 64 entries at 0x100 and their busy
//	                            counts at 0x500, as in the registry below but
//	                            16 bytes apart, entry i's tags i | g<<6 for a
//	                            generation g in 1..511)
//	0x600  arenaCells  uint64   C, the arena's cells (version 5)
//	0x608  arenaSum    uint64   xxhash64 (seed 0) of arenaCells (8 bytes,
//	                            little-endian): the arena's geometry is fixed
//	                            at creation like the slots'
//	0x610  arenaLock   uint32   the allocation lock: bit 0 held, bits 1-15 the
//	                            holder's tag; it guards the bitmap, and is
//	                            taken with a slot lock held, never the reverse
//	0x614  reserved    uint32   0
//	0x618  arenaHint   uint64   the cell where the next allocation starts
//	                            looking (a hint: any value is safe)
//	0x620  arenaUsed   uint64   cells allocated (statistics)
//	...    reserved    zero
//	0x800  insertLocks [512]uint32  insert stripes: bit 0 locked, bits 1-15 the
//	                            holder's tag, bits 16-31 the count of buckets
//	                            created in the stripe (modulo 2^16)
//
// The holders registry (version 6; E as above, 0x14000 bytes):
//
//	E+0x0000  holders  [1024]{tag uint32, pid uint32, started uint64}
//	                   the processes that have the table open (the owner, and
//	                   tables attached to it), one entry each: the 15-bit tag
//	                   they put in the lock words they hold (0: never used;
//	                   bit 31 set: free, with its last tag), their pid, and
//	                   the process's start time (Linux: field 22 of
//	                   /proc/PID/stat), which tells a pid reused by another
//	                   process from the one that registered. A registering
//	                   table takes a free entry and the next tag after lastTag
//	                   (1 to 32767, then 1 again) that no live entry has, so a
//	                   tag comes back only after 32,767 registrations: a lock
//	                   word left held by a holder that died is not mistaken
//	                   for a later holder's before then (and by then any
//	                   waiter on that lock has taken it over)
//	E+0x4000  busy     [1024]{count uint32, reserved [60]byte}
//	                   per holders entry, on a cache line of its own: the
//	                   decisions an attached table has in progress
//	                   (Table.Enter to Exit). An owner that opens or closes
//	                   the file first zeroes ownerTag, then waits until every
//	                   live attached holder's count is 0: from then on no
//	                   attached table writes (each checks ownerTag after
//	                   counting itself in)
//
// A slot (S = SlotSize bytes; the first 64 bytes are the same for every size):
//
//	0x00  lock     uint32  bit 0: spinlock (1 held); bits 1-15: while held,
//	                       the holder's tag (a holders entry, never 0), else 0;
//	                       bits 16-31: reach, the largest displacement of any
//	                       bucket whose home is this slot (lookups probe no
//	                       further)
//	0x04  sum      uint32  checksum of bytes [0x08, 0x40) (checksumOf)
//	0x08  fp0      uint64  fingerprint, first half  } both zero: the slot was never used
//	0x10  fp1      uint64  fingerprint, second half }
//	0x18  kind     uint8   the bucket's algorithm (vocab.Algorithm; opaque to this package)
//	0x19  flags    uint8   flagLive, flagConservative, flagBlock
//	0x1a  keyLen   uint16  length of the inline key, 0 if not stored
//	0x1c  keySum   uint32  low 32 bits of xxhash64(key) (seed 0) when keyLen > 0
//	0x20  freshAt  int64   Unix ns at or after which the bucket is back to its
//	                       new state; the slot is then reclaimable
//	0x28  state    [3]int64 the algorithm's words; with flagBlock, word 1 is
//	                       the block's checksum (below) and word 2 the block:
//	                       its first cell (bits 0-39) and its length in
//	                       words (bits 40-55; it spans ceil(words/8) cells)
//	0x40  key      [S-64]byte inline key bytes (slot sizes 128 and 256 only)
//
// A block is a run of consecutive cells of the arena that one slot owns
// while it has flagBlock: the words the slot's algorithm keeps beyond its
// state words (int64, little-endian, from the block's first byte). Its
// cells are set in the bitmap (bit i%64 of word i/64 for cell i) while
// allocated. The block's checksum, state word 1 of its slot, is the wrapping
// sum over its words w[i] (the algorithm's, not the whole cells) of
// mix(w[i] ^ (i+1)*0x9E3779B97F4A7C15), where mix is splitmix64's
// finalizer (x ^= x>>30; x *= 0xBF58476D1CE4E5B9; x ^= x>>27;
// x *= 0x94D049BB133111EB; x ^= x>>31). The algorithm keeps it up to date
// word by word as it writes; recovery recomputes it to detect a block torn
// by a power loss, or written apart from its slot.
//
// The bitmap is derived: recovery rebuilds it from the slots that own a
// sound block, so cells a crashed process allocated without giving them to
// a slot are freed then. A slot whose block is out of the arena, overlaps
// another's, or fails its checksum loses it and becomes conservative.
//
// The tags (version 7; T as above, G bytes): one byte per slot, slot i's at
// T+i, so that the tags of 64 consecutive slots share a cache line and a
// lookup reads them there instead of each slot's fingerprint. A slot's tag
// is 0 while the slot has never held a fingerprint, else 0x80 | (fp1 >>
// 57), the top 7 bits of the second half of its fingerprint with the high
// bit set. Tags are derived: whoever claims an empty slot writes its tag
// before its fingerprint (so a tag of 0 always means an empty slot), and
// whoever reclaims a slot, holding the new bucket's insert stripe, writes
// the fingerprint before the tag; a creator that takes an insert stripe
// over from a holder that died looks for its bucket by fingerprint, not by
// tag, and corrects the tag of the slot it finds. The owner rewrites every
// tag from the slots each time it opens the file, after any upgrade and
// recovery and before it serves: tags on disk are never trusted, so a tag
// damaged on disk or left behind by a crash costs nothing. Bytes past T+N
// are zero. A lookup of fingerprint fp from home slot h reads the tags from
// h on: a tag of 0 ends it (fp is absent), a tag equal to fp's sends it to
// the slot to compare the whole fingerprint; after 64 tags it also stops
// past h's reach.
//
// The fingerprint's halves are xxhash64 (seed 0) of seed0^ident, respectively
// seed1^ident (8 bytes, little-endian), followed by the key, where ident is
// a 64-bit digest of the bucket's identity besides its key; an all-zero
// result is remapped to {0, 1}, so a zero fingerprint always means an empty
// slot. Sluice's engine sets ident to xxhash64 (seed 0) of the algorithm id
// (1 byte) followed by its three identity parameters (int64, little-endian).
// The home slot of a fingerprint is
// floor(fp0 * slotCount / 2^64).
//
// Format versions, and how Open upgrades a file of an earlier one in place
// (the owner lock held, the header rewritten and synced before anything
// else; an upgrade interrupted by a crash is redone by the next Open):
//
//	1  the first.
//	2  the high time moves from 0x050 to the checksummed highMarks. A
//	   version-1 high time has no checksum to trust it by: the upgrade drops
//	   it (0x050 is zeroed, both marks hold 0), so the clock starts at the
//	   wall clock. A clock below a bucket's times only delays its refills;
//	   a flipped bit that moved it years ahead would have refilled every
//	   bucket.
//	3  the owner's tag and the holders registry (0x0f8, 0x100), in bytes
//	   that were zero: the upgrade changes only the version.
//	4  the busy counts (0x500), in bytes that were zero: the upgrade changes
//	   only the version. A version-3 attached table does not count itself
//	   in, so it may not attach to a version-4 file (nor the reverse).
//	5  the arena (0x600, and bytes after the slots). Open first extends
//	   the file to its version-5 size with the default arena of its slot
//	   count (DefaultArenaCells; the new bytes are zero, so the bitmap
//	   says every cell is free), then the upgrade writes arenaCells and
//	   arenaSum, then the version. A file of an earlier version that is
//	   already that long is an upgrade a crash interrupted: it is upgraded
//	   again. The slots do not move: every bucket is kept.
//	6  the holders registry moves from 0x100 (64 entries) to the end of the
//	   file (1,024 entries), with tags drawn from lastTag, and each busy
//	   count gets a cache line. Open first waits, as every Open does, for
//	   the tables attached to a previous owner to leave their decisions
//	   (through the version-5 registry), then extends the file by the
//	   registry (zeros: every entry free). The upgrade marks the file dirty
//	   before it writes the version, so that Open's recovery scan frees any
//	   lock word still held under a version-5 tag (a process killed holding
//	   it) and repairs its slot. A file of an earlier version that is
//	   already that long is an upgrade a crash interrupted, as for version
//	   5. Every bucket is kept.
//	7  the tags, after the holders registry. Open first extends the file by
//	   them (zeros), then the upgrade writes the version; Open then writes
//	   every tag, as it does on every open. A file of an earlier version
//	   that is already as long as its version-7 size (or that of any
//	   version between) is an upgrade a crash interrupted, as for version
//	   5. The slots do not move: every bucket is kept.
//
// An interrupted upgrade leaves the new version number under the old
// header checksum (the two are written in that order); Open recognises it
// by the checksum of the header with the old version, and upgrades again.

const (
	magic         = "SLUICE\x1a\n" // identifies a Sluice state file
	FormatVersion = 7              // the file format this package writes; it reads 1 to FormatVersion
	byteOrderMark = 0x01020304     // written little-endian; reads differently on a foreign order
	HeaderSize    = 4096           // bytes before slot 0; one page, so slots are page-aligned
	cleanMagic    = 0xC1EA7C1E     // cleanFlag value after a graceful close
	dirtyMagic    = 0xD1127D11     // cleanFlag value while the file is open for writing
)

// Header field offsets.
const (
	offMagic      = 0x000
	offVersion    = 0x008
	offByteOrder  = 0x00c
	offHeaderSize = 0x010
	offSlotSize   = 0x014
	offSlotCount  = 0x018
	offSeed0      = 0x020
	offSeed1      = 0x028
	offProbeCap   = 0x030
	offCreated    = 0x038
	offChecksum   = 0x040
	checksummed   = offChecksum // bytes [0, checksummed) are covered by the header checksum

	offCleanFlag   = 0x048
	offV1HighTime  = 0x050 // version 1 only; zero from version 2
	offCounters    = 0x058
	numCounters    = 16
	offHighMarks   = 0x0d8
	numHighMarks   = 2
	highMarkSize   = 16 // time int64, sum uint64
	offOwnerTag    = 0x0f8
	offLastTag     = 0x0fc
	offV5Holders   = 0x100 // versions 3 to 5: [v5Holders]{tag, pid, started}
	v5Holders      = 64
	offV5Busy      = 0x500 // versions 4 and 5: [v5Holders]uint32
	offArenaCells  = 0x600
	offArenaSum    = 0x608
	offArenaLock   = 0x610
	offArenaHint   = 0x618
	offArenaUsed   = 0x620
	offInsertLocks = 0x800
	numInsertLocks = 512
)

// Slot field offsets.
const (
	slotLock    = 0x00
	slotSum     = 0x04
	slotFP0     = 0x08
	slotFP1     = 0x10
	slotKind    = 0x18
	slotFlags   = 0x19
	slotKeyLen  = 0x1a
	slotKeySum  = 0x1c
	slotFreshAt = 0x20
	slotState   = 0x28
	slotKey     = 0x40 // inline key bytes, slot sizes above 64 only

	StateWords  = vocab.StateWords // int64 words of algorithm state per slot
	MinSlotSize = slotKey          // the smallest slot: no room for an inline key
	summedFrom  = slotFP0          // the slot checksum covers [summedFrom, summedTo)
	summedTo    = MinSlotSize      //
	slotAlign   = MinSlotSize      // slots start on cache-line boundaries
	MaxKeyLen   = vocab.MaxKeyLen  // the longest key a caller may use, in bytes
)

// Slot flags.
const (
	flagLive         = 1 << 0 // the state words hold the bucket's state
	flagConservative = 1 << 1 // the slot was found torn; the owner must replace its state with a drained one
	flagBlock        = 1 << 2 // the slot owns the arena block in state word 2
)

// Blocks and the arena.
const (
	CellSize      = 64   // bytes per arena cell
	arenaAlign    = 4096 // the arena and its cells start on page boundaries
	wordsPerCell  = CellSize / 8
	blockStart    = 1<<40 - 1 // state word 2 of a slot with flagBlock: first cell
	blockLenShift = 40        // and length in words, bits 40-55
	MaxBlockWords = 1<<16 - 1 // the longest block, in words
	MaxArenaCells = 1 << 40   // the most cells an arena may have
	stateSum      = 1         // the state word holding a block's checksum
	stateBlock    = 2         // the state word holding the block
)

// Counters kept in the header. They are statistics: updated with atomics,
// never trusted for correctness.
const (
	counterUsed         = iota // slots that ever held a fingerprint
	counterInserts             // buckets created
	counterReclaims            // slots taken over from a fresh bucket of another key
	counterTableFull           // inserts refused: no free or reclaimable slot within the probe cap
	counterTorn                // slots found torn on open and reset to a conservative state
	counterSyncs               // successful syncs
	counterSyncErrors          // failed syncs
	counterLockedOnOpen        // slots whose lock word was held when the file was opened
	counterArenaFull           // blocks refused: no run of free cells long enough
)

// The holders registry (version 6), at the end of the file.
const (
	NumHolders     = 1024 // the most tables (hence processes) that may have a file open at once
	holderSize     = 16   // tag uint32, pid uint32, started uint64
	busyStride     = 64   // a busy count per cache line
	offBusy        = NumHolders * holderSize
	registrySize   = offBusy + NumHolders*busyStride // 0x14000
	maxTag         = genMask >> genShift             // 32767: tags are 1 to maxTag
	holdersVersion = 6                               // the first version with this registry
)

// The tags (version 7), after the holders registry.
const (
	tagsVersion = 7    // the first version with tags
	tagUsed     = 0x80 // the bit every tag of a used slot has
	tagShift    = 57   // a used slot's tag is tagUsed | fp.Hi>>tagShift
	tagScan     = 64   // tags a lookup reads before it also bounds itself by the home slot's reach
)

// Lock word bits, for slots and insert stripes alike.
const (
	lockHeld   = 1      // bit 0: locked
	genShift   = 1      // bits 1-15: while locked, the holder's tag; else 0
	genMask    = 0xfffe // the tag bits in place
	reachShift = 16     // slots, bits 16-31: the home slot's reach
	maxReach   = 1<<16 - 1
	seqShift   = 16 // insert stripes, bits 16-31: buckets created in the stripe, modulo 2^16
)

// DefaultProbeCap is the probe cap of new files: the largest displacement of
// a bucket from its home slot. Linear probing displaces a few keys far: in a
// table of 1.4M slots at a load of 0.7 the largest displacement is about 110,
// at 0.8 about 300 (14M slots: 141 and 386). A cap of 512 keeps inserts
// succeeding to a load of about 0.85; lookups stop at the home slot's reach,
// which is usually a few slots, not at the cap.
const DefaultProbeCap = 512

// MaxProbeCap is the largest probe cap: reach must fit in 16 bits.
const MaxProbeCap = maxReach

// ValidSlotSize reports whether n is a slot size this format supports.
func ValidSlotSize(n int) bool { return n == 64 || n == 128 || n == 256 }

// inlineRoom is the number of key bytes a slot of size n keeps inline.
func inlineRoom(slotSize int) int { return slotSize - slotKey }
