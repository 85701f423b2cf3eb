// Package shm is Sluice's state table: an open-addressing hash table of
// fixed-size slots in a memory-mapped file, shared by every goroutine of the
// process that owns the file.
//
// The package knows nothing of limiter algorithms or the wire. A slot holds a
// bucket's fingerprint, an opaque algorithm id, the time at which the bucket
// will be back to its new state, and three words of algorithm state. Callers
// lock a slot (Lookup, LookupOrInsert, LockIndex), read and write its state,
// and Commit, Release or Clear it.
//
// # Format
//
// The byte layout of the file is specified in format.go, and only there: a
// checksummed, versioned 4096-byte header followed by the slots. Slots are 64
// bytes (one cache line) by default; 128- and 256-byte slots also keep keys
// of up to 64 or 192 bytes inline.
//
// Open validates the header in a fixed order and refuses a foreign,
// truncated, incompatible or corrupt file with a sentinel error (see
// errors.go), never modifying it. A file of an earlier format version is
// upgraded in place (format.go lists the versions and their upgrades).
//
// # Hashing and probing
//
// A bucket is identified by a 128-bit fingerprint: two xxhash64 values of its
// key and identity suffix under two seeds drawn at random when the file is
// created, so clients cannot choose keys that collide. The first half picks
// the bucket's home slot; lookups probe linearly from there, stopping at the
// fingerprint, at an empty slot, or past the home slot's reach: the largest
// displacement of any bucket whose home it is, kept in its lock word. The
// probe cap (512 by default) bounds displacement when inserting.
//
// A lookup reads the probe sequence's tags, not its slots: a byte per slot,
// 7 bits of the fingerprint, kept apart from the slots so that the tags of
// 64 consecutive slots share a cache line. It reads a slot only where the
// tag matches, so a hit usually costs the line of tags and the bucket's
// slot, and a miss the line of tags alone; the home slot's reach is read
// only for sequences longer than 64. Tags are derived from the slots: the
// owner rewrites them all whenever it opens the file.
//
// A slot whose bucket is back to its new state (FreshAt <= now) carries no
// information and is reclaimed in place by the next insert that passes it.
// now is the server's clock, handed in by the caller: a time a client sent
// decides its own request, never whether another bucket may be forgotten.
// The package reads no clock.
// Slots are never emptied, so probe sequences stay intact. When no free or
// reclaimable slot lies within the probe cap, inserting fails with
// ErrTableFull and is counted; nothing is evicted and nothing blocks.
//
// # Concurrency
//
// Every slot begins with a spinlock word taken with compare-and-swap and
// tagged with its holder's tag. Lookups (Find) probe without locks, then
// lock the slot they found and confirm its fingerprint. Creating a bucket
// (Claim) is serialised by one of 512 insert stripes, chosen by the
// fingerprint, so two callers creating the same bucket at once always agree
// on one slot: a key never occupies two slots. A stripe's lock word also
// counts the buckets created in it, so Claim looks for the bucket again
// only if one was created in its stripe since Find looked: one probe per
// decision. Holders of a slot lock never block, allocate or make syscalls.
// Operations on several slots lock them in ascending index order and hold
// no insert stripe, which makes them deadlock-free.
//
// # Owner and attached tables
//
// The table lives in a file, so several processes can map it and share its
// buckets and locks. One of them owns the file: Create or Open takes an
// exclusive flock, and only the owner
//
//   - creates the file, upgrades an older format, and recovers a file that
//     was not closed cleanly (recovery clears every lock word: it runs
//     before anyone else may use the file);
//   - syncs it (Sync), records the server's clock in it (RecordTime),
//     scrubs a file opened clean (Scrub), and marks it clean on Close.
//
// Any table, the owner's or one attached with Attach (in the same process
// or another), may find, claim, lock, decide, commit, clear and scan
// buckets, under the same locks. Attach refuses a file whose owner is not
// serving it (ErrNoOwner), so an attached table never sees a file that has
// not been recovered.
//
// An attached table brackets each decision with Enter and Exit, which count
// it in the file (busy, format.go) and check that the owner it attached to
// still serves the file. An owner that opens the file (after a previous
// owner died, say) or closes it first withdraws the owner tag, then waits
// until no live attached table is inside a decision; from then on every
// Enter fails with ErrNoOwner, so recovery and the final sync never run
// beside an attached writer. An attached table learns that its owner died
// from OwnerAlive (it keeps deciding meanwhile: the table stays sound, the
// kernel keeps the pages), and attaches again once a new owner serves.
// A process stopped inside a decision holds the next owner's open (or the
// closing owner's final sync) until it continues or dies.
//
// Every table registers in the file's holders registry (format.go): a tag,
// its pid and its process's start time. The registry takes NumHolders
// (1,024) tables at once; when it is full, entries of processes that are
// gone are freed, and if none is, Open and Attach fail with ErrHolders. A
// lock word carries its holder's tag.
//
// # Waiting for locks
//
// An operation waits for a lock another holder has: a slot's (every
// operation on a bucket), an insert stripe's (Claim, creating a bucket) or
// the arena's (Ext and Clear, allocating or freeing a block). Holders keep
// them for nanoseconds, unless the holder's process is stopped (SIGSTOP, a
// debugger) or descheduled. A waiter
//
//   - spins 64 rounds on the lock word;
//   - calls its Wait's Blocking, once per Wait, then yields the processor
//     64 times;
//   - asks whether the holder still lives (a registered process that
//     exists, is not a zombie and started when it registered: a read of
//     /proc, shared by the waiters of a table for 10 ms), then every 10 ms;
//     a lock whose holder is gone (a process killed while holding it, or a
//     tag no holder has, from damage) is taken over, and the slot it
//     guards, which may be half-written, is repaired;
//   - sleeps 10 µs, doubling up to 1 ms, between looks;
//   - then parks: one goroutine of the table looks at the lock words of
//     every parked waiter each millisecond and wakes the waiters whose lock
//     is free, whose budget is spent or whose holder is gone. Waiting costs
//     no processor however many wait, and a lock freed is taken within
//     about a millisecond.
//
// A holder that is only slow keeps its lock: it is waited for as long as it
// lives with a nil (or zero) Wait, and otherwise until the operation's Wait
// budget is spent, counted over all of the operation's waits (not the
// spinning). Then the wait fails with a *LockedError (ErrLockWait) naming
// the holder's pid and how long it was seen holding the lock, and locks
// nothing; the operation releases what else it holds and changes nothing
// (the engine's multi-slot operations release their slots and end their
// reservations). Two waits do not follow a budget: freeing a block whose
// arena lock stays held past the budget leaves the block's cells marked,
// unused, until the owner's next Open (which rebuilds the bitmap); Scrub
// waits as long as the holder lives, looking every 100 ms whether it was
// stopped. The owner's Open and Close wait, as long as it lives, for an
// attached holder stopped inside a decision (see above).
//
// # Durability
//
// Every write goes to the shared mapping, so a crash of the process loses
// nothing that was written: the kernel owns the pages. Sync writes the
// modified pages to the device (msync, MS_SYNC); an OS crash or power loss
// loses what was written since the last Sync. Open marks the file dirty
// (synchronously) and Close marks it clean after a final Sync. Opening a
// dirty file scans every slot: a slot whose lock word is held or whose
// checksum does not match is reset to a conservative state that its owner
// turns into one that grants no burst, and counted (it is not reclaimed
// before its owner has done so); buckets a power loss left unreachable
// (written without the pages before them in their probe sequence, hence
// created after the last sync) are dropped, and every reach is recomputed.
// The scan can itself be killed and redone with the same outcome (see
// recover). A clean file is served at once, without a scan: its slots are
// checked on first use until Scrub, run in the background, has checked them
// all.
//
// The header's high time (the highest server time recorded, below which a
// server's clock never starts) is kept in two checksummed copies: damage
// can only lower it, never move the clock forward and refill buckets.
//
// Create allocates the file's blocks up front (fallocate), and Open
// allocates any hole in an existing file, so a full disk fails there
// instead of raising SIGBUS on a later write.
//
// The kernel tracks dirty pages, and writes them back, a page at a time. A
// table mapped with huge pages (Options.HugePages) has 2 MiB pages, each
// written whole when any of its 32,768 slots of 64 bytes changed: measured
// on ext4 (Linux 6.18), writes to 100 random slots of a table of 1.33M
// slots made the next Sync write 76 MiB instead of 400 KiB, and writes to
// 10,000 81 MiB instead of 31 MiB. Huge pages cut a lookup's TLB misses (a decision
// on 1M random buckets took about 0.9 of the time) at that cost in disk
// writes, unless the decisions touch most pages between two syncs anyway or
// the file is on a file system without a disk (tmpfs): they are off by
// default.
//
// # Caveats
//
//   - The file is little-endian and its fields are accessed with native
//     atomics; big-endian machines are refused.
//   - Slots are never emptied, only reused. Lookups stop at the home slot's
//     reach, so used slots cost no probes, but reach never shrinks while the
//     file is open. Size tables for the live bucket count at a load of
//     0.75 (a 64-byte slot and its tag: 86.7 bytes per live bucket), at
//     most about 0.8: past that, inserts start failing with ErrTableFull.
//   - Reclaiming a token bucket that has refilled completely re-anchors its
//     refill phase at its next use, as smyte/ratelimit's compaction does.
//   - Verify requires the table to be quiescent.
package shm
