package server

import (
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/global"
	"github.com/sluicehq/sluice/proto/resp"
)

// Bounds of one transaction, so that a client queueing without end holds
// bounded memory: past either, the command is refused and EXEC aborts.
const (
	maxTxCommands = 1024
	maxTxBytes    = 256 << 10 // bytes of queued arguments
)

// respTx is a transaction being queued between MULTI and EXEC: the queued
// commands' arguments, copied out of the read buffer.
type respTx struct {
	buf   []byte // every queued argument, back to back
	ends  []int  // the end of each argument in buf
	nargs []int  // the number of arguments of each command
	abort bool   // a command was refused while queueing: EXEC aborts
	// The scope of the rate-limit commands queued (txScope): local, or
	// global (route, the first global route matched) in one slot.
	local bool
	route *config.Route
	slot  int

	// Scratch for EXEC, kept between transactions.
	args  [][]byte
	reqs  []rlRequest
	at    []int // the command each of reqs came from
	items []engine.Item
	ds    []bucket.Decision
	greqs []global.Request // a global transaction's (execGlobal)
	gps   []global.Policy
}

// len is the number of queued commands.
func (tx *respTx) len() int { return len(tx.nargs) }

// queue adds command c (nil if unknown) to the transaction, or refuses it
// (and marks the transaction aborted) if Redis would: an unknown command or
// subcommand, or a wrong number of arguments. The rate-limit commands
// (txTogether) check their arguments when EXEC runs them, as modules'
// commands do in Redis.
func (rc *respConn) queue(c *respCommand, args [][]byte) {
	tx := rc.tx
	if c == nil {
		rc.unknown(args)
		tx.abort = true
		return
	}
	if msg := c.refusal(args); msg != "" && c.tx != txTogether {
		rc.out = resp.AppendError(rc.out, msg)
		tx.abort = true
		return
	}
	if key := c.routedKey(args); key != nil {
		if msg := rc.txScope(tx, c, args, key); msg != "" {
			rc.out = resp.AppendError(rc.out, msg)
			tx.abort = true
			return
		}
	}
	size := 0
	for _, a := range args {
		size += len(a)
	}
	if tx.len() >= maxTxCommands || len(tx.buf)+size > maxTxBytes {
		rc.out = resp.AppendError(rc.out, fmt.Sprintf("ERR transaction too large: at most %d commands and %d KiB of arguments", maxTxCommands, maxTxBytes>>10))
		tx.abort = true
		return
	}
	for _, a := range args {
		tx.buf = append(tx.buf, a...)
		tx.ends = append(tx.ends, len(tx.buf))
	}
	tx.nargs = append(tx.nargs, len(args))
	rc.out = resp.AppendSimple(rc.out, "QUEUED")
}

// multi starts a transaction.
func (rc *respConn) multi([][]byte) {
	if rc.tx != nil {
		rc.out = resp.AppendError(rc.out, "ERR MULTI calls can not be nested")
		return
	}
	tx := &rc.txs
	if cap(tx.buf) > keepBuffer {
		tx.buf = nil // a large transaction's buffer is not kept for the next
	}
	tx.buf, tx.ends, tx.nargs, tx.abort = tx.buf[:0], tx.ends[:0], tx.nargs[:0], false
	tx.local, tx.route, tx.slot = false, nil, 0
	rc.tx = tx
	rc.out = resp.AppendSimple(rc.out, "OK")
}

// discard drops the transaction.
func (rc *respConn) discard([][]byte) {
	if rc.tx == nil {
		rc.out = resp.AppendError(rc.out, "ERR DISCARD without MULTI")
		return
	}
	rc.tx = nil
	rc.out = resp.AppendSimple(rc.out, "OK")
}

// watch refuses WATCH: a check-and-set over rate-limit buckets has nothing
// to check that the commands do not already decide atomically, and
// accepting it without watching would promise an abort that never comes.
func (rc *respConn) watch([][]byte) {
	if rc.tx != nil {
		rc.out = resp.AppendError(rc.out, "ERR WATCH inside MULTI is not allowed")
		return
	}
	rc.out = resp.AppendError(rc.out, "ERR WATCH is not supported: each rate-limit command is atomic, and MULTI/EXEC decides a transaction's rate limits together")
}

// exec runs the transaction's commands in order and answers an array of
// their replies, each what the command would answer on its own.
//
// The rate-limit commands among them (at most engine.MaxMultiItems, at the
// server's clock, none a refund) are decided together by engine.Each:
// every bucket they touch is locked, in the engine's canonical order, for
// the whole sequence, so no other client's decision interleaves with the
// transaction's, and each is decided as it would be alone, in order (as in
// Redis, a limited command does not undo the allowed ones, and a limited
// RL.REDUCE drains its bucket). A transaction beyond those bounds runs its
// commands one by one, each atomic on its own bucket. One that gave up
// waiting for a bucket's lock (another process keeps it) changed nothing:
// each of its rate-limit commands is answered with that error.
func (rc *respConn) exec([][]byte) {
	tx := rc.tx
	if tx == nil {
		rc.out = resp.AppendError(rc.out, "ERR EXEC without MULTI")
		return
	}
	rc.tx = nil
	if tx.abort {
		rc.out = resp.AppendError(rc.out, "EXECABORT Transaction discarded because of previous errors.")
		return
	}
	// The queued commands' arguments.
	tx.args = tx.args[:0]
	start := 0
	for _, end := range tx.ends {
		tx.args = append(tx.args, tx.buf[start:end:end])
		start = end
	}
	together, err := rc.decideTogether(tx)
	rc.out = resp.AppendArray(rc.out, tx.len())
	a, k := 0, 0
	for _, n := range tx.nargs {
		args := tx.args[a : a+n]
		if (together || err != nil) && k < len(tx.at) && tx.at[k] == a {
			req := &tx.reqs[k]
			rc.last = lookupCommand(args[0]).name
			if err != nil {
				rc.failRequest(req, err)
			} else {
				rc.reply(req, &tx.ds[k])
			}
			k++
		} else {
			rc.command(lookupCommand(args[0]), args)
		}
		a += n
	}
}

// decideTogether parses the transaction's rate-limit commands and decides
// them with one engine.Each. It reports whether it did: then tx.ds holds
// the decision of each of tx.reqs, which came from the commands whose
// first arguments are at tx.at. It returns the error of an Each that gave
// up waiting for a lock, which decided none of them.
func (rc *respConn) decideTogether(tx *respTx) (bool, error) {
	tx.reqs, tx.at = tx.reqs[:0], tx.at[:0]
	smyte := false
	a := 0
	for _, n := range tx.nargs {
		args := tx.args[a : a+n]
		if c := lookupCommand(args[0]); c != nil && c.tx == txTogether {
			tx.reqs = append(tx.reqs, rlRequest{})
			req := &tx.reqs[len(tx.reqs)-1]
			if msg := c.parse(rc, req, args); msg != "" {
				tx.reqs = tx.reqs[:len(tx.reqs)-1]
			} else {
				if req.refund || req.at {
					return false, nil
				}
				smyte = smyte || !req.cell
				tx.at = append(tx.at, a)
			}
		}
		a += n
	}
	if len(tx.reqs) < 2 || len(tx.reqs) > engine.MaxMultiItems {
		return false, nil // one command is decided alone just the same
	}
	if tx.route != nil { // global: in Redis, together
		if err := rc.execGlobal(tx); err != nil {
			return false, err
		}
		return true, nil
	}
	// smyte/ratelimit decides at the millisecond: when it takes part, the
	// whole transaction does (redis-cell's replies are in whole seconds).
	t := rc.at(rc.now)
	if smyte {
		t = rc.at(rc.now / 1_000_000 * 1_000_000)
	}
	tx.items = tx.items[:0]
	for i := range tx.reqs {
		r := &tx.reqs[i]
		tx.items = append(tx.items, engine.Item{Key: r.key, Limit: &r.limit, Cost: r.cost, Flags: r.flags})
	}
	ds, err := rc.s.engine.Each(tx.ds[:0], tx.items, t)
	tx.ds = ds
	if errors.Is(err, engine.ErrLocked) {
		return false, err
	}
	return err == nil, nil
}
