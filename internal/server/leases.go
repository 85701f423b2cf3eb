package server

import (
	"crypto/rand"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/proto"
)

// Concurrency leases. A connection remembers the leases it took and has not
// given back; when it closes (its client exited or died), the server gives
// them back. A lease the sidecar cannot give back (the sidecar itself was
// killed) expires at its limit's lease time.
//
// A lease's id is a random 64-bit number, drawn by the connection that takes
// it from its own ChaCha8 stream (seeded from the operating system's random
// source): an id tells nothing of any other, so a lease can only be released
// by a process it was handed to. A RELEASE from a connection that does not
// hold the lease is served only for a peer of the holder's uid (its
// SO_PEERCRED credentials, read when it connected): another user is refused
// (Denied), whatever id it brings. RESET stays the operator's override: it
// forgets every lease of the key.

// maxLeasesPerConn bounds the leases one connection holds at once, so a
// client cannot grow the server's memory without bound: LEASE beyond it is
// refused (leases that expired without a RELEASE are forgotten first).
const maxLeasesPerConn = 4096

var errTooManyLeases = fmt.Errorf("%w: this connection holds %d leases already; release some first",
	proto.ErrStatusBusy, maxLeasesPerConn)

// errNotHolder refuses a RELEASE of a lease that a connection of another
// user holds: status Denied.
var errNotHolder error = deniedError("this lease is held by another user's connection: " +
	"only that connection or a process of the same user may release it (RESET gives back every lease of the key)")

// deniedError is an error of status Denied with a message of its own.
type deniedError string

func (e deniedError) Error() string { return string(e) }

func (deniedError) Is(target error) bool { return target == proto.ErrStatusDenied }

// heldLease is a lease a connection took.
type heldLease struct {
	limit   engine.Limit
	key     string
	id      int64
	expires int64         // Unix ns, the server's clock: from then on it holds nothing
	global  *config.Limit // a global concurrency limit's (limit unused), else nil
}

// peer is who is at the other end of a connection: its uid, if known (a
// Unix socket's peer; not a TCP one's).
type peer struct {
	uid   uint32
	known bool
}

// sameUser reports whether p and q are known to be the same user.
func (p peer) sameUser(q peer) bool { return p.known && q.known && p.uid == q.uid }

// leaseHolders maps the id of each lease a connection of this server
// holds to that connection, so that a RELEASE from another connection can
// be checked against the holder's uid. Sharded: connections on every core
// take and give back leases at once.
type leaseHolders struct {
	shards [16]struct {
		mu sync.Mutex
		m  map[int64]holder
	}
}

// holder is the connection that holds a lease, and the lease's key and
// expiry.
type holder struct {
	st      *stream
	key     string
	expires int64
}

func (h *leaseHolders) shard(id int64) *struct {
	mu sync.Mutex
	m  map[int64]holder
} {
	return &h.shards[uint64(id)%uint64(len(h.shards))]
}

// add records that st holds lease id of key until expires.
func (h *leaseHolders) add(id int64, st *stream, key string, expires int64) {
	sh := h.shard(id)
	sh.mu.Lock()
	if sh.m == nil {
		sh.m = map[int64]holder{}
	}
	sh.m[id] = holder{st, key, expires}
	sh.mu.Unlock()
}

// remove forgets lease id of key, if st holds it (st nil: whoever holds it).
func (h *leaseHolders) remove(id int64, key []byte, st *stream) {
	sh := h.shard(id)
	sh.mu.Lock()
	if v, ok := sh.m[id]; ok && v.key == string(key) && (st == nil || v.st == st) {
		delete(sh.m, id)
	}
	sh.mu.Unlock()
}

// of returns the peer of the connection that holds lease id of key at now,
// if a connection of this server does.
func (h *leaseHolders) of(id int64, key []byte, now int64) (peer, bool) {
	sh := h.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if v, ok := sh.m[id]; ok && v.key == string(key) && v.expires > now {
		return v.st.peer, true
	}
	return peer{}, false
}

// leaseID draws the id of the connection's next lease.
func (st *stream) leaseID() int64 {
	if st.ids == nil {
		var seed [32]byte
		rand.Read(seed[:]) // never fails (crypto/rand)
		st.ids = mrand.NewChaCha8(seed)
	}
	return int64(st.ids.Uint64())
}

// leaseOp answers LEASE.
func (s *server) leaseOp(b []byte, op *proto.Op, c *conn, req *engine.Request, nl *namedLimit, start time.Time) []byte {
	if len(c.leases) >= maxLeasesPerConn {
		c.forgetExpired(c.now)
		if len(c.leases) >= maxLeasesPerConn {
			return c.fail(b, op.Code, errTooManyLeases)
		}
	}
	l, res := req.Limit, &c.res
	req.Time, req.Lease = c.at(c.now), c.leaseID() // a lease is about the server's clock, waited for as any request
	if err := s.engine.Do(req, res); err != nil {
		s.recordError(nl, l, err)
		return c.fail(b, op.Code, err)
	}
	if id := res.Lease; id != 0 {
		expires := c.now + min(l.Bucket().Lease, math.MaxInt64-c.now)
		key := string(op.Key)
		h := heldLease{key: key, id: id, expires: expires}
		if req.Remote != nil {
			h.global = nl.cfg
		} else {
			h.limit = *l
		}
		c.leases = append(c.leases, h)
		s.holders.add(id, &c.stream, key, expires)
		if until := time.Now().Add(time.Duration(l.Bucket().Lease)); until.After(c.leasedUntil) {
			c.leasedUntil = until
		}
		c.n.allowed++
	} else {
		c.n.denied++
	}
	s.record(nl, l.Bucket().Algorithm, res.Decision.Allowed, false, start)
	return c.markLease(proto.AppendLeaseResult(b, &res.Decision, uint64(res.Lease)), proto.OpLease, res.Outage)
}

// releaseOp answers RELEASE: from the connection that holds the lease, or
// from a peer of the holder's uid; a lease no connection of this server
// holds (taken through an earlier sidecar process, expired, or unknown) is
// released by whoever brings its id, which only its holder was given.
func (s *server) releaseOp(b []byte, op *proto.Op, c *conn, req *engine.Request) []byte {
	id := int64(op.Lease)
	if !c.holds(op.Key, id) {
		if p, held := s.holders.of(id, op.Key, c.now); held && !p.sameUser(c.peer) {
			return c.fail(b, op.Code, errNotHolder)
		}
	}
	req.Time, req.Lease = c.at(c.now), id
	res := &c.res
	if err := s.engine.Do(req, res); err != nil {
		return s.released(b, op, c, &res.Decision, res.Released, err)
	}
	return c.markLease(s.released(b, op, c, &res.Decision, res.Released, nil), proto.OpRelease, res.Outage)
}

// released answers a RELEASE of lease op.Lease: the connection and the
// server forget it.
func (s *server) released(b []byte, op *proto.Op, c *conn, d *bucket.Decision, released bool, err error) []byte {
	if err != nil {
		return c.fail(b, op.Code, err)
	}
	id := int64(op.Lease)
	c.forget(op.Key, id)
	if released {
		s.holders.remove(id, op.Key, nil)
	}
	return proto.AppendReleaseResult(b, released, d)
}

// idleDeadline is when the connection, idle from now, is closed:
// IdleTimeout from now or, while it holds leases, not before the last of
// them expires. A client may hold a lease quietly for longer than the idle
// timeout (a job that takes ten minutes, leased for an hour); closing its
// connection would give the lease back while the job still runs.
func (st *stream) idleDeadline(now time.Time) time.Time {
	d := now.Add(st.s.cfg.IdleTimeout)
	if len(st.leases) > 0 && st.leasedUntil.After(d) {
		return st.leasedUntil
	}
	return d
}

// forgetExpired drops the leases that expired by now: they hold no slot.
func (st *stream) forgetExpired(now int64) {
	st.leases = slices.DeleteFunc(st.leases, func(h heldLease) bool {
		if h.expires <= now {
			st.s.holders.remove(h.id, []byte(h.key), st)
			return true
		}
		return false
	})
}

// holds reports whether the connection took lease id of key and has not
// given it back.
func (st *stream) holds(key []byte, id int64) bool {
	for i := range st.leases {
		if h := &st.leases[i]; h.id == id && h.key == string(key) {
			return true
		}
	}
	return false
}

// forget drops lease id of key from the connection's leases, if it is there.
func (st *stream) forget(key []byte, id int64) {
	for i := range st.leases {
		if h := &st.leases[i]; h.id == id && h.key == string(key) {
			st.s.holders.remove(id, key, st)
			last := len(st.leases) - 1
			st.leases[i] = st.leases[last]
			st.leases = st.leases[:last]
			return
		}
	}
}

// releaseLeases gives back every lease the connection still holds: it has
// closed. Leases given back meanwhile by another connection, or expired,
// are not held any more and release nothing. A connection closed because
// the sidecar is stopping keeps its leases: its client is still running
// what it leased, and gives the lease back through the next sidecar (the
// leases are in the state file), or it expires. A bucket whose lock
// another process keeps (a stopped direct client) is waited for as a
// request waits, up to Config.LockWait (counted in lock_waits); a lease
// still locked after that is left to expire, and logged.
func (st *stream) releaseLeases() {
	if len(st.leases) == 0 || st.s.draining.Load() {
		return
	}
	now := st.s.now()
	t := engine.Time{Now: now, At: now, Wait: st.s.cfg.LockWait, Blocking: func() { st.s.stats.lockWaits.Add(1) }}
	var d bucket.Decision
	for i := range st.leases {
		h := &st.leases[i]
		key := []byte(h.key)
		st.s.holders.remove(h.id, key, st)
		if h.global != nil {
			if err := st.s.releaseGlobal(h); err != nil {
				st.s.log.Warn("could not give back a global lease of a closed connection; it expires in Redis at its lease time",
					"key", h.key, "err", err.Error())
			}
			continue
		}
		if _, err := st.s.engine.Release(&d, key, &h.limit, h.id, t); err != nil {
			st.s.log.Warn("could not give back a lease of a closed connection; it expires at its lease time",
				"key", h.key, "err", err.Error())
		}
	}
	st.leases = nil
}

// releaseLeasesThen gives back the leases of a connection an event loop
// closed (releaseLeases), then calls then: at once, on the loop, if it
// holds none, else on a goroutine of its own, since giving a lease back may
// wait for a lock another process keeps and a loop never waits for a lock
// (loop_linux.go). Its other connections are served meanwhile.
func (st *stream) releaseLeasesThen(then func()) {
	if len(st.leases) == 0 || st.s.draining.Load() {
		then()
		return
	}
	go func() {
		st.releaseLeases()
		then()
	}()
}
