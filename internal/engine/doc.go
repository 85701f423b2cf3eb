// Package engine runs limits on a table: it finds or creates a bucket's slot
// in a shm.Table, runs the limit's algorithm on the slot's state under the
// slot lock, and writes the result back.
//
// The operations are those of the product: Acquire, Peek, Refund, Reset and
// Multi. Every one takes the time, Unix nanoseconds, as a parameter; the
// engine never reads a clock.
//
// # Buckets
//
// A bucket is identified by its key, its algorithm and the algorithm's
// identity parameters (bucket.Limit.Identity): the table stores a
// fingerprint of the three, so RL.REDUCE k 2 60 and RL.REDUCE k 3 60 are two
// buckets, while a gcra limit can change its rate without a reset. A bucket
// is created only by a request that changes it: a peek, a denial that changes
// nothing, or a cost of 0 never takes a slot.
//
// # Concurrency
//
// An Engine is safe for concurrent use. Each operation on one bucket holds
// one slot lock for the duration of the algorithm (tens of nanoseconds).
// Multi locks every slot it needs in ascending slot order, so concurrent
// Multis over overlapping buckets cannot deadlock.
//
// # Durability
//
// A decision is written to the shared mapping before the operation returns,
// so once it is returned it survives a crash of the process; see package shm
// for what survives a crash of the machine.
//
// A slot that shm found torn (on open, or when first used) is marked
// conservative: the engine replaces its state with the algorithm's drained
// state (one that grants no burst) before deciding.
package engine
