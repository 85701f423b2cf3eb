package engine

import (
	"fmt"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/shm"
	"github.com/sluicehq/sluice/vocab"
)

// Registers. A register is one int64 value under a key, with an expiry,
// held in a slot of the table as a bucket is: its key's fingerprint is
// its own (a register and a bucket of the same key are apart), its slot's
// kind is vocab.RegisterKind, and its slot is fresh, so reclaimable by
// any bucket or register, when it expires. Every operation locks the slot
// for the few words it reads or writes, so registers are atomic across the
// processes that decide in the table; they are decided on the server's
// clock (Time.Now; Time.At is not read). A register found torn after a
// crash (a conservative slot) reads as absent.
//
// State words: [0] the value, [1] the expiry, Unix ns, [2] 0.

// MaxRegisterTTL is the longest time a register may be set to live:
// bucket.MaxDuration (2^31 s, about 68 years).
const MaxRegisterTTL = bucket.MaxDuration

// ErrTTL is returned for a register's time to live outside
// 1..MaxRegisterTTL nanoseconds.
var ErrTTL = fmt.Errorf("a register's ttl must be at least 1ns and at most %v", time.Duration(MaxRegisterTTL))

// Register is what a register operation saw or left.
type Register struct {
	// OK is RegGet's "it exists", RegSet's "it was set", RegCAS's "it was
	// swapped" and RegDel's "it existed".
	OK bool
	// Value is the register's value after the operation, 0 if it does not
	// exist.
	Value int64
	// TTL is the time until it expires, ns, after the operation; -1 if it
	// does not exist.
	TTL int64
}

// registerIdent is the fingerprint identity of every register: the
// encoding of a limit's identity with the register's kind and no
// parameters, which no limit has.
var registerIdent = func() uint64 {
	var enc [identLen]byte
	enc[0] = byte(vocab.RegisterKind)
	return xxhash.Sum64(enc[:])
}()

// liveRegister reports whether the locked slot sl holds a register that has not
// expired at now, and writes what it holds to *r.
func liveRegister(sl shm.Slot, now int64, r *Register) bool {
	st := sl.State()
	if !sl.Live() || sl.Conservative() || sl.Kind() != vocab.RegisterKind || st[1] <= now {
		*r = Register{TTL: -1}
		return false
	}
	*r = Register{OK: true, Value: st[0], TTL: st[1] - now}
	return true
}

// writeRegister writes value, to expire ttl after now, to the locked slot
// sl, commits it and reports it in *r.
func writeRegister(sl shm.Slot, value, ttl, now int64, r *Register) {
	*sl.State() = [shm.StateWords]int64{value, now + ttl, 0}
	sl.Commit(now + ttl)
	*r = Register{OK: true, Value: value, TTL: ttl}
}

// checkRegister validates a register operation's key and ttl (0: an
// operation that writes nothing) and counts it in.
func (e *Engine) checkRegister(key []byte, ttl int64, writes bool) error {
	if err := CheckKeyCost(key, 0); err != nil {
		return err
	}
	if writes && (ttl < 1 || ttl > MaxRegisterTTL) {
		return fmt.Errorf("%w: %v", ErrTTL, time.Duration(ttl))
	}
	return e.enter()
}

// lookupRegister checks an operation on key's register (checkRegister),
// counts it in and finds the register, locked if ok, with the lock wait it
// used. On success the caller exits (e.t.Exit) once done; on an error
// nothing is held.
func (e *Engine) lookupRegister(key []byte, ttl int64, writes bool, t Time) (sl shm.Slot, ok bool, w shm.Wait, err error) {
	if err := e.checkRegister(key, ttl, writes); err != nil {
		return sl, false, w, err
	}
	w = t.wait()
	if sl, ok, err = e.t.Lookup(e.t.Fingerprint(key, registerIdent), &w); err != nil {
		e.t.Exit()
		return sl, false, w, tableErr(err)
	}
	return sl, ok, w, nil
}

// RegGet reads key's register at t.Now: OK and its value and time to live
// if it exists and has not expired.
func (e *Engine) RegGet(key []byte, t Time) (r Register, err error) {
	sl, ok, _, err := e.lookupRegister(key, 0, false, t)
	if err != nil {
		return r, err
	}
	defer e.t.Exit()
	r = Register{TTL: -1}
	if ok {
		liveRegister(sl, t.Now, &r)
		sl.Release()
	}
	return r, nil
}

// RegSet sets key's register to value, to live ttl ns from t.Now, if it
// does not exist (or has expired): OK reports that it was set; otherwise
// r is the register as it stands, unchanged. A new register takes a slot
// (ErrTableFull if none is free or reclaimable).
func (e *Engine) RegSet(key []byte, value, ttl int64, t Time) (r Register, err error) {
	if err := e.checkRegister(key, ttl, true); err != nil {
		return r, err
	}
	defer e.t.Exit()
	w := t.wait()
	sl, ok, pr, err := e.t.Find(e.t.Fingerprint(key, registerIdent), &w)
	if err != nil {
		return r, tableErr(err)
	}
	if !ok {
		if sl, _, err = e.t.Claim(&pr, vocab.RegisterKind, key, t.Now, &w); err != nil {
			return r, tableErr(err)
		}
		// Created, or created by another request since the Find: decided
		// below either way, under the slot's lock.
	}
	if liveRegister(sl, t.Now, &r) {
		sl.Release()
		r.OK = false
		return r, nil
	}
	writeRegister(sl, value, ttl, t.Now, &r)
	return r, nil
}

// RegCAS sets key's register to value, to live ttl ns from t.Now, if it
// exists and holds old: OK reports that it was swapped; otherwise r is the
// register as it stands (TTL -1: it does not exist), unchanged.
func (e *Engine) RegCAS(key []byte, old, value, ttl int64, t Time) (r Register, err error) {
	sl, ok, _, err := e.lookupRegister(key, ttl, true, t)
	if err != nil {
		return r, err
	}
	defer e.t.Exit()
	r = Register{TTL: -1}
	if !ok {
		return r, nil
	}
	if !liveRegister(sl, t.Now, &r) || r.Value != old {
		sl.Release()
		r.OK = false
		return r, nil
	}
	writeRegister(sl, value, ttl, t.Now, &r)
	return r, nil
}

// RegDel deletes key's register: OK reports that it existed (and had not
// expired).
func (e *Engine) RegDel(key []byte, t Time) (r Register, err error) {
	sl, ok, w, err := e.lookupRegister(key, 0, false, t)
	if err != nil {
		return r, err
	}
	defer e.t.Exit()
	if !ok {
		return Register{TTL: -1}, nil
	}
	existed := liveRegister(sl, t.Now, &r)
	sl.Clear(&w)
	return Register{OK: existed, TTL: -1}, nil
}
