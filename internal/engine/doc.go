// Package engine is the layer between the protocols and the table: it owns
// a state file's life and runs limits on its buckets. The server (and any
// process deciding in place) calls the engine; only the engine calls shm.
//
// The table's life (table.go): Open opens or creates a state file and
// recovers it, Maintain syncs it periodically and scrubs it, Stats and Scan
// look inside, Close syncs it a last time and marks it clean. Attach maps a
// file another process owns, to decide beside it.
//
// The decisions (engine.go, multi.go) are those of the product: Acquire,
// Peek, Refund, Reset, Lease, Release and Multi. Every one takes the time,
// Unix nanoseconds, as a parameter; the engine never reads a clock (Clock
// is the steady clock the processes that decide in a state file read).
// Acquire finds the bucket's slot and locks it in one probe of the table; a
// bucket that does not exist is decided on a new state first and its slot
// claimed only if the request changes it, from where the probe ended.
// Every algorithm, of fixed size or extended (with a block in the arena),
// goes the same way: open readies a locked slot's bucket, the algorithm
// decides (bucket.Limit's one method set), finish commits or releases it.
//
// The request path (request.go) is what the front ends call: a Request is
// one decision as any protocol decodes it (Wire reads the native
// protocol's), Do decides it (the operation switch, the checks, shadow
// mode), and Status words its errors in the wire's statuses. A request
// with a Remote (the server's global limits) is checked and put in shadow
// mode by Do the same way, and decided by the Remote instead of the table.
// A new front end translates its requests into Requests and its answers
// from Results and statuses, and nothing else; MULTI and Redis
// transactions hand their items to Multi and Each.
//
// Limits (limit.go) come validated: NewLimit from bucket.Limit, FromProto
// from the wire's proto.Limit, the one place where the wire's parameter
// order meets the algorithms' fields. Errors are the engine's own (errors.go);
// Status maps them to statuses. Adding an algorithm touches the engine only
// there (FromProto's mapping): see "Adding an algorithm" in package bucket.
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
// Multis over overlapping buckets cannot deadlock. An operation waits for
// locks another process keeps (a direct client stopped mid-decision) as
// package shm describes, at most its Time.Wait in all (DefaultLockWait,
// one second, unless set): then it fails with a *LockedError naming that
// process (ErrLocked) and changes nothing; Multi and Each release what
// they locked. Time.Blocking lets an event loop hand its other work over
// before the operation sleeps.
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
