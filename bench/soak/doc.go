// Package soak measures how a disk-backed state file behaves under sustained
// load: the time of each decision while every bucket of a large table is
// updated at random, at full rate, for minutes, next to the kernel's dirty
// and writeback counters.
//
// # Why
//
// SPEC section 6 ("Durability promise") records that a MAP_SHARED table on
// ext4 under constant random updates costs about 50 ns per update while its
// dirty pages stay under the kernel's writeback thresholds, but stalls at
// 120-200 µs per update for tens of seconds once they pass them (a 4 GiB
// table on a 24 GiB machine), while the same table on tmpfs does not. A
// benchmark of a few seconds never sees this: writeback starts only after
// dirty_expire_centisecs, or once Dirty passes the background threshold. The
// soak runs long enough to see it and says, per table size, on this machine,
// whether and when it begins, so the README can state where the disk-backed
// default stops being safe.
//
// # What is measured
//
// For each table size (Config.Buckets, 1M and 10M by default) Run creates a
// state file in Config.Dir with shm.Create, sized for the buckets at
// Config.Load, wraps it in the engine the sidecar uses, and creates every
// bucket once ("soak:<i>"). Then, for Config.Duration, Config.Workers
// goroutines issue acquires of cost 1 on uniformly random buckets as fast as
// they can, all under one limit, Limit (token_bucket:max=100,
// refill_time=1s, refill_amount=10), so that at full rate nearly every
// request on a large table is allowed and writes its slot. Meanwhile a sync
// goroutine does what the sidecar's sync loop does: every
// Config.SyncInterval it records the time in the file and syncs the mapping
// (msync, MS_SYNC), and each Sync call is timed.
//
// Decision time is measured in process, on the same engine and the same
// disk-backed, periodically synced mapping the sidecar uses. The socket is
// left out on purpose: a round trip over a Unix socket costs about 10 µs,
// which would hide a 100 ns decision and blur a stall; the soak isolates the
// file's behaviour. Each worker reads the clock once per decision: the
// reading after decision k is the start of decision k+1 and its time
// argument (Unix ns), so a decision's time includes drawing and formatting
// its key and one clock read (Machine.ClockRead says how long a read takes).
//
// Every Config.Interval the soak reports, per table size: decisions and
// decisions/s, the p50, p99, p99.9 and maximum decision time (bench/hist),
// syncs and their longest and total time, and, read at the interval's end,
// Dirty and Writeback from /proc/meminfo and nr_dirty, nr_writeback,
// nr_dirty_threshold and nr_dirty_background_threshold from /proc/vmstat;
// /proc/meminfo is also sampled every second for the largest Dirty. The
// report also records the machine, the kernel, the file system of
// Config.Dir and the vm.dirty_* settings.
//
// # Stalls
//
// An interval stalls when its p99 is above 10 times the table's first
// interval's p99, or above 100 µs (Classify). The summary gives, per size,
// the steady p50 and p99 (medians over the intervals), the worst interval
// and the first stalled one, with Dirty at that moment against the
// background writeback threshold.
//
// # Concurrency
//
// Workers never take a lock or allocate: each owns one histogram per
// interval and moves to the next when its own clock reading passes the
// interval's end, publishing with an atomic store that the earlier ones are
// final. Run is not safe to call twice on one Dir at once.
//
// # Caveats
//
// The soak needs Linux (statfs, /proc). It writes each state file in full,
// so Dir needs the file's size plus 1 GiB free; Run refuses before creating
// anything otherwise. Dirty and Writeback are the whole machine's, not only
// the state file's, so the numbers depend on whatever else the machine
// writes meanwhile.
package soak
