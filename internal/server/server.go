package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/proto"
)

// ErrGeometryMismatch is returned when an existing state file's geometry
// differs from the one the Config asks for explicitly.
var ErrGeometryMismatch = engine.ErrGeometryMismatch

// server is one running sidecar.
type server struct {
	cfg    Config
	log    *slog.Logger
	engine *engine.Engine
	now    func() int64
	hello  proto.Hello
	stats  counters

	global      *globalLimits     // nil without Config.Global
	loops       *loops            // nil with the goroutine transport
	rec         *metrics.Recorder // nil without metrics
	specMetrics *metrics.Limit    // the counters of requests that bring a spec
	namedSet    atomic.Pointer[namedLimits]
	holders     leaseHolders // who holds each lease taken here (leases.go)

	lingering chan struct{} // a token for each refused connection that lingers (refuse)

	draining atomic.Bool
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	perUID   map[uint32]int // connections held by each peer uid, with MaxConnsPerUID
	wg       sync.WaitGroup
}

// Run opens (or creates) the state file, listens on the socket and serves
// until ctx is cancelled. Then it stops accepting, lets every connection
// finish the frames it has received (up to DrainTimeout), syncs the table,
// marks the file clean, removes the socket and returns nil. It returns an
// error if the state file or the socket cannot be set up, or the final sync
// fails.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	c := cfg.withDefaults()
	// An existing file keeps its geometry: only what cfg sets explicitly
	// (before defaults) must match it.
	e, err := engine.Open(c.StatePath, engine.Options{Slots: cfg.Slots, SlotSize: cfg.SlotSize, ArenaCells: cfg.ArenaCells, HugePages: cfg.HugePages}, time.Now().UnixNano())
	if err != nil {
		return err
	}
	// closeEngine closes the table when the sidecar fails to start, and
	// removes its file if this start created it: a second sluiced given
	// another --state and a socket in use left a new state file behind.
	// The file goes while the owner lock is held, so no other process can
	// have taken it up.
	created := e.Opened().Created
	closeEngine := func() {
		if created {
			os.Remove(c.StatePath)
		}
		e.Close()
	}
	var gl *globalLimits
	if c.Global != nil {
		if gl, err = newGlobalLimits(*c.Global, c.Logger, c.StatePath+".leases"); err != nil {
			closeEngine()
			return err
		}
	}
	lns, err := listenAll(c)
	if err != nil {
		if gl != nil {
			gl.close()
		}
		closeEngine()
		return err
	}
	o := e.Opened()
	if c.Now == nil {
		c.Now = engine.Clock(o.HighTime)
	}
	g, st := e.Geometry(), e.Stats()
	s := &server{
		cfg: c, log: c.Logger, engine: e, now: c.Now, rec: c.Metrics, global: gl,
		conns: make(map[net.Conn]struct{}), perUID: make(map[uint32]int), lingering: make(chan struct{}, maxLingering),
		hello: proto.Hello{
			Version: proto.Version, MaxFrame: proto.MaxFrameLen, MaxBatch: proto.MaxBatch,
			MaxKey: proto.MaxKeyLen, MaxMulti: proto.MaxMulti,
			SlotCount: g.SlotCount, SlotSize: uint16(g.SlotSize),
		},
	}
	if c.Transport == TransportEpoll || c.Transport == TransportAuto {
		if s.loops, err = startLoops(s, c.Loops); err != nil {
			for _, l := range lns {
				l.ln.Close()
				l.close()
			}
			if gl != nil {
				gl.close()
			}
			closeEngine()
			return err
		}
	}
	if s.rec != nil {
		s.specMetrics = s.rec.Limit(metrics.SpecLimit)
		s.rec.SetTable(s.tableStats())
		e.SetProbeHook(s.rec.Probe)
		if gl != nil {
			s.rec.SetGlobal(gl.stats)
		}
	}
	if !o.HighTimeOK {
		s.log.Warn("the state file's recorded high time failed its checksum: the clock starts at the wall clock")
	}
	if o.UpgradedFrom != 0 || o.Recovered {
		s.log.Info("state file recovered", "upgraded_from_version", o.UpgradedFrom, "scanned", o.Recovered,
			"torn_slots", o.Torn, "dropped", o.Dropped, "released", o.Released)
	}
	s.log.Info("sluiced started", "state", c.StatePath, "created", o.Created, "slots", g.SlotCount,
		"slot_size", g.SlotSize, "file_bytes", g.FileSize, "used_slots", st.Used,
		"load", fmt.Sprintf("%.3f", float64(st.Used)/float64(g.SlotCount)),
		"torn_slots_reset", st.Torn, "socket", c.SocketPath, "resp_socket", c.RESPSocket,
		"resp_addr", c.RESPAddr, "sync_interval", c.SyncInterval, "transport", c.Transport)

	stopRLS, err := s.startRLS()
	if err != nil {
		for _, l := range lns {
			l.ln.Close()
			l.close()
		}
		s.drain() // no connection yet: it stops the event loops
		if gl != nil {
			gl.close()
		}
		closeEngine()
		return err
	}
	var accepting sync.WaitGroup
	for _, l := range lns {
		accepting.Add(1)
		go func() { defer accepting.Done(); s.accept(l) }()
	}
	if c.Ready != nil {
		c.Ready()
	}
	var synced func(time.Duration, error)
	if s.rec != nil {
		synced = s.rec.Sync
	}
	e.Maintain(ctx, c.SyncInterval, c.Now, s.log, synced)
	for _, l := range lns {
		l.ln.Close()
	}
	accepting.Wait()
	stopRLS()
	s.drain()
	if gl != nil {
		gl.close() // unused lease tokens go back
	}
	st = e.Stats()
	err = e.Close()
	for _, l := range lns {
		l.close()
	}
	if err != nil {
		s.log.Error("sluiced stopped; final sync failed", "err", err)
		return err
	}
	s.log.Info("sluiced stopped", "state", c.StatePath, "used_slots", st.Used, "syncs", st.Syncs,
		"sync_errors", st.SyncErrors, "connections_total", s.stats.connsTotal.Load(), "ops", s.stats.ops.Load())
	return nil
}

// accept serves a listener's connections until it is closed.
func (s *server) accept(l *listener) {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			s.log.Warn("accept failed", "err", err)
			time.Sleep(10 * time.Millisecond) // e.g. out of file descriptors: do not spin
			continue
		}
		s.stats.connsTotal.Add(1)
		refuse := func(st proto.Status, msg string) { s.refuse(c, l.refusal(st, msg)) }
		p, counted, ok := s.admit(c, l)
		uid := p.uid
		if !ok {
			s.stats.peersDenied.Add(1)
			if s.rec != nil {
				s.rec.PeerDenied()
			}
			refuse(proto.StatusDenied, "permission denied")
			continue
		}
		if int(s.stats.conns.Add(1)) > s.cfg.MaxConns {
			s.stats.conns.Add(-1)
			s.stats.connsRejected.Add(1)
			refuse(proto.StatusBusy, "too many connections")
			continue
		}
		s.mu.Lock()
		if counted && s.perUID[uid] >= s.cfg.MaxConnsPerUID {
			s.mu.Unlock()
			s.stats.conns.Add(-1)
			s.stats.connsRejected.Add(1)
			refuse(proto.StatusBusy, "too many connections from this user")
			continue
		}
		if counted {
			s.perUID[uid]++
		}
		s.wg.Add(1)
		lp := s.loopFor(l)
		if lp == nil {
			s.conns[c] = struct{}{}
		}
		s.mu.Unlock()
		if s.rec != nil {
			s.rec.ConnOpened()
		}
		if lp != nil {
			st, handle := l.open(s, c)
			st.peer = p
			lp.add(st, handle, func() { st.releaseLeasesThen(func() { s.release(c, uid, counted) }) })
			continue
		}
		go func() {
			defer s.release(c, uid, counted)
			st, handle := l.open(s, c)
			st.peer = p
			st.serve(handle)
			st.releaseLeases()
		}()
	}
}

// Refused connections linger: see refuse.
const (
	refusalLinger = time.Second // the longest a refused connection stays open
	maxLingering  = 64          // refused connections lingering at once; more close at once
)

// refuse answers a connection the server does not serve with answer, and
// closes it. The answer must reach the client: a server that closed at
// once made a client that writes its request before it reads (redis-cli)
// fail on EPIPE, and print "Broken pipe" instead of the refusal. So the
// server shuts its side for writing (the client reads the answer, then
// EOF) and reads what the client sends, until the client closes or
// refusalLinger passes, before it closes; on a goroutine, at most
// maxLingering at once, so refused peers cannot hold the server's
// resources.
func (s *server) refuse(c net.Conn, answer []byte) {
	c.SetWriteDeadline(time.Now().Add(time.Second))
	c.Write(answer)
	cw, ok := c.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		c.Close()
		return
	}
	select {
	case s.lingering <- struct{}{}:
	default:
		c.Close()
		return
	}
	go func() {
		defer func() { c.Close(); <-s.lingering }()
		c.SetReadDeadline(time.Now().Add(refusalLinger))
		io.CopyN(io.Discard, c, 64<<10)
	}()
}

// loopFor returns the event loop that serves a new connection of l, or nil
// if it runs on its own goroutine (the goroutine transport). A request that
// is about to wait on Redis hands its loop over first (stream.leaveLoop), as
// one about to wait for a lock does. Called with s.mu held.
func (s *server) loopFor(l *listener) *loop {
	if s.loops == nil {
		return nil
	}
	return s.loops.next()
}

// release forgets a connection that has been closed.
func (s *server) release(c net.Conn, uid uint32, counted bool) {
	s.mu.Lock()
	delete(s.conns, c)
	if counted {
		if s.perUID[uid]--; s.perUID[uid] == 0 {
			delete(s.perUID, uid)
		}
	}
	s.mu.Unlock()
	s.stats.conns.Add(-1)
	if s.rec != nil {
		s.rec.ConnClosed()
	}
	s.wg.Done()
}

// admit reads the credentials of c's peer, on a Unix socket, and reports
// whether it may be served (always, unless an allow-list is configured)
// and, with MaxConnsPerUID, whether its uid counts against the cap. The
// uid also says who may release the connection's leases. A TCP connection
// has no credentials: it is never counted.
func (s *server) admit(c net.Conn, l *listener) (p peer, counted, ok bool) {
	lists := len(s.cfg.AllowUIDs) > 0 || len(s.cfg.AllowGIDs) > 0
	needed := lists || s.cfg.MaxConnsPerUID > 0 && l.path != ""
	if l.path == "" && !needed {
		return peer{}, false, true
	}
	uid, gid, err := peerCred(c)
	if err != nil {
		if !needed {
			return peer{}, false, true // served; it may release only the leases it took
		}
		s.log.Warn("cannot read a peer's credentials; refusing it", "err", err)
		return peer{}, false, false
	}
	if lists && !slices.Contains(s.cfg.AllowUIDs, uid) && !slices.Contains(s.cfg.AllowGIDs, gid) {
		return peer{}, false, false
	}
	return peer{uid: uid, known: true}, s.cfg.MaxConnsPerUID > 0 && l.path != "", true
}

// drain lets every connection finish what it has read, then closes it:
// blocked reads are woken at once; a connection still busy after
// DrainTimeout is closed.
func (s *server) drain() {
	s.draining.Store(true)
	s.mu.Lock()
	for c := range s.conns {
		c.SetReadDeadline(time.Now())
	}
	s.mu.Unlock()
	s.loops.drain()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(s.cfg.DrainTimeout):
		s.mu.Lock()
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.loops.closeAll()
		<-done
	}
	s.loops.stop()
}

// liveEvery bounds how often the table metrics count live buckets (a pass
// over every slot); the counters are read at every scrape.
const liveEvery = 10 * time.Second

// tableStats returns what the metrics read of the table at a scrape.
func (s *server) tableStats() func() metrics.TableStats {
	var mu sync.Mutex
	var live uint64
	var counted time.Time
	return func() metrics.TableStats {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(counted) >= liveEvery {
			// A count that gave up waiting for a lock keeps the last one.
			if n, err := s.engine.Live(engine.At(s.now())); err == nil {
				live = n
			}
			counted = time.Now()
		}
		st := s.tableCounters()
		st.LiveBuckets = live
		return st
	}
}
