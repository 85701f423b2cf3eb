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
// tagged with a random generation of the process that opened the table: a
// lock held under another generation has no live holder and is taken over
// (its slot repaired) instead of blocking forever. Lookups
// probe without locks, then lock the slot they found and confirm its
// fingerprint. Creating a bucket is serialised by one of 512 insert locks,
// chosen by the fingerprint, so two goroutines creating the same bucket at
// once always agree on one slot: a key never occupies two slots. Holders of a
// slot lock never block, allocate or make syscalls. Operations on several
// slots lock them in ascending index order and hold no insert lock, which
// makes them deadlock-free.
//
// The lock words live in the file, so the table can be shared by processes
// that map it; today one process owns a file at a time (an exclusive flock
// taken by Open and Create).
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
// # Caveats
//
//   - The file is little-endian and its fields are accessed with native
//     atomics; big-endian machines are refused.
//   - Slots are never emptied, only reused. Lookups stop at the home slot's
//     reach, so used slots cost no probes, but reach never shrinks while the
//     file is open. Size tables for the live bucket count at a load of at
//     most about 0.8: past that, inserts start failing with ErrTableFull.
//   - Reclaiming a token bucket that has refilled completely re-anchors its
//     refill phase at its next use, as smyte/ratelimit's compaction does.
//   - Verify requires the table to be quiescent.
package shm
