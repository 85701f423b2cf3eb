//go:build linux

package server

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const haveEpoll = true

// loops are the event loops of the epoll transport. Each owns an epoll
// instance on a locked OS thread and the connections given to it; a wake-up
// serves every ready connection: one non-blocking read of what has
// arrived, the protocol's handler over it (the same stream and handlers as
// the goroutine transport), one non-blocking write of the answers. A write
// the socket cannot take whole leaves the rest waiting for EPOLLOUT, and
// the connection is not read until it has been written (the maxPending
// bound holds as with goroutines).
//
// A loop never waits for a lock. A request whose bucket's lock is still
// held after a short spin (by a direct client that is stopped, say) hands
// the loop over (handOff): the goroutine that serves the loop stays with
// the request, waits for the lock (sleeping, up to Config.LockWait) and
// answers the rest of its connection's batch, while a new goroutine takes
// the loop and its other connections over. The connection leaves the epoll
// set meanwhile, so its answers keep their order, and comes back to the
// loop (giveBack) to have them written. A handover costs a goroutine and
// three syscalls, once per request that would have waited; the loop's
// other connections do not notice it. A connection the loop closes while it
// holds leases has them given back on a goroutine of its own
// (releaseLeasesThen): that too may wait for a lock.
//
// With TransportAuto (adaptive), two things change. A connection that
// keeps sending several requests at once (multiplexed: multiplexedAfter
// reads that each carried more than one) is not polled for: its client
// answers a batch with the next only after waking its own goroutines, a
// gap the loop would spend polling on a CPU that client needs, so a turn
// that served only multiplexed connections ends in sleep at once. (Such a
// connection stays on the loop: a goroutine of its own, woken by Go's
// poller, costs an empty read per batch, which ends every batch in
// EAGAIN, and the Go scheduler's wake-ups; a loop reads each batch once.)
// And the loop polls only as long as recent requests took to come
// (spinBudget), so a loop whose clients are slow, or starved of CPU by its
// polling, soon sleeps at once. With the default Config.LoopSpin, the
// most it polls follows the host's CPU pressure (spinGovernor), and on a
// quiet host it polls for multiplexed connections too.
type loops struct {
	all  []*loop
	n    atomic.Uint32 // round robin over all
	done sync.WaitGroup
	// gov, if set, sets the adaptive loops' polling limit from the host's
	// CPU pressure until stopGov is closed.
	gov     *spinGovernor
	stopGov chan struct{}
	spin    time.Duration // the limit without gov
}

// loop is one event loop.
type loop struct {
	s      *server
	epfd   int
	wakefd int // an eventfd: new connections, drain, close-all, stop

	done     *sync.WaitGroup // told when the loop ends
	mu       sync.Mutex
	incoming []*lconn // connections added since the last wake-up
	back     []*lconn // connections given back since the last wake-up (giveBack)
	kill     bool     // close every connection (drain timed out)
	quit     bool     // exit once every connection is closed

	// owned by the goroutine that serves the loop (one at a time: see handOff)
	conns     map[int32]*lconn
	events    []unix.EpollEvent
	taken     []*lconn
	draining  bool
	nextCheck time.Time // the earliest deadline of a connection, zero if none
	spinning  bool      // the last wait found events
	// single is set by a turn that read requests of a connection that is
	// not multiplexed (TransportAuto): only then does the loop poll.
	single bool

	// adaptive is set with TransportAuto: the loop does not poll for
	// multiplexed connections, and polls for up to budget (learned, see
	// spinBudget) instead of Config.LoopSpin.
	adaptive bool
	budget   time.Duration
	gov      *spinGovernor // the limit of budget, if set; else Config.LoopSpin
}

// multiplexedAfter is how many reads carrying more than one request make
// a connection multiplexed (TransportAuto), however many reads of one come
// between them. A client with one request in flight never sends two at
// once; one that pipelines or multiplexes does, though not on every read:
// a Go Client whose 64 goroutines share its connection, answered at once,
// was seen sending one request on ten reads of eleven.
const multiplexedAfter = 8

// lconn is a connection served by a loop.
type lconn struct {
	fd       int
	st       *stream
	handle   func()
	release  func()
	wpos     int  // bytes of st.out already written
	writing  bool // waiting for EPOLLOUT with st.out[wpos:] unwritten
	deadline time.Time
	// handling is set while the loop runs the connection's handler, away
	// once a request of it has handed the loop over: its batch is answered
	// off the loop, and the loop leaves it alone until it is given back.
	handling, away bool
	// multi counts the reads that carried more than one request
	// (TransportAuto: see multiplexedAfter), up to multiplexedAfter:
	// the connection is multiplexed.
	multi int
}

// startLoops starts n event loops for s.
func startLoops(s *server, n int) (*loops, error) {
	ls := &loops{spin: max(0, s.cfg.LoopSpin)}
	if s.cfg.Transport == TransportAuto && s.cfg.quietSpin > 0 {
		if p, err := openCPUPressure(cpuPressurePath); err != nil {
			s.log.Debug("no CPU pressure to read: event loops poll at most --loop-spin", "err", err)
		} else if self, _ := os.ReadFile("/proc/self/cgroup"); cgroupCPUQuota(cgroupRoot, self) {
			s.log.Info("the sidecar's control group has a CPU quota: event loops poll at most --loop-spin", "loop_spin", s.cfg.LoopSpin)
		} else {
			ls.gov = newSpinGovernor(s.cfg.LoopSpin, s.cfg.quietSpin)
			ls.stopGov = make(chan struct{})
			go ls.gov.run(p, ls.stopGov)
		}
	}
	for range n {
		lp, err := newLoop(s)
		if err != nil {
			ls.stop()
			return nil, fmt.Errorf("server: cannot start an event loop: %w", err)
		}
		lp.adaptive = s.cfg.Transport == TransportAuto
		lp.budget = max(0, s.cfg.LoopSpin)
		lp.gov = ls.gov
		ls.all = append(ls.all, lp)
		ls.done.Add(1)
		lp.done = &ls.done
		go lp.run()
	}
	return ls, nil
}

func newLoop(s *server) (*loop, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	wakefd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(epfd)
		return nil, err
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wakefd)}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wakefd, &ev); err != nil {
		unix.Close(epfd)
		unix.Close(wakefd)
		return nil, err
	}
	return &loop{s: s, epfd: epfd, wakefd: wakefd, conns: make(map[int32]*lconn),
		events: make([]unix.EpollEvent, 256)}, nil
}

// next picks the loop of a new connection.
func (ls *loops) next() *loop {
	return ls.all[int(ls.n.Add(1))%len(ls.all)]
}

// drain tells every loop that the server is shutting down: each answers
// what its connections have sent, writes the answers and closes them.
func (ls *loops) drain() {
	if ls == nil {
		return
	}
	for _, lp := range ls.all {
		lp.wake()
	}
}

// closeAll closes every connection at once.
func (ls *loops) closeAll() {
	if ls == nil {
		return
	}
	for _, lp := range ls.all {
		lp.mu.Lock()
		lp.kill = true
		lp.mu.Unlock()
		lp.wake()
	}
}

// stop ends the loops once their connections are closed, and waits.
func (ls *loops) stop() {
	if ls == nil {
		return
	}
	for _, lp := range ls.all {
		lp.stopNow()
	}
	ls.done.Wait()
	if ls.stopGov != nil {
		close(ls.stopGov)
		ls.stopGov = nil
	}
}

// quietNow reports whether the governor finds the host quiet.
func (lp *loop) quietNow() bool {
	if lp.gov == nil {
		return false
	}
	_, q := lp.gov.Limit()
	return q
}

// spinLimit is the most a loop polls now.
func (ls *loops) spinLimit() time.Duration {
	if ls == nil {
		return 0
	}
	if ls.gov != nil {
		l, _ := ls.gov.Limit()
		return l
	}
	return ls.spin
}

func (lp *loop) stopNow() {
	lp.mu.Lock()
	lp.quit = true
	lp.mu.Unlock()
	lp.wake()
}

func (lp *loop) wake() {
	one := [8]byte{1}
	unix.Write(lp.wakefd, one[:]) // EAGAIN: the counter is already set, a wake-up is due anyway
}

// add gives a connection, accepted and admitted, to the loop; release is
// called once it is closed. The loop serves a duplicate of the socket's
// descriptor, and the net.Conn is closed: Go's poller no longer sees it.
func (lp *loop) add(st *stream, handle func(), release func()) {
	fd, err := dupConn(st.c)
	st.c.Close()
	if err != nil {
		lp.s.log.Warn("cannot take a connection into the event loop; closing it", "err", err)
		release()
		return
	}
	lc := &lconn{fd: fd, st: st, handle: handle, release: release}
	st.handOff = func() { lp.handOff(lc) }
	lp.mu.Lock()
	lp.incoming = append(lp.incoming, lc)
	lp.mu.Unlock()
	lp.wake()
}

// handOff is called by a request of lc that is about to wait for a lock
// (engine.Time.Blocking), on the goroutine that serves the loop: that
// goroutine stays with the request, and a new one takes the loop over. lc
// leaves the epoll set until the goroutine has answered its batch
// (giveBack). Later requests of the same batch find lc away already.
func (lp *loop) handOff(lc *lconn) {
	if !lc.handling || lc.away {
		return
	}
	lc.away = true
	unix.EpollCtl(lp.epfd, unix.EPOLL_CTL_DEL, lc.fd, nil)
	lp.s.stats.handoffs.Add(1)
	runtime.UnlockOSThread() // this goroutine is no longer the loop
	go lp.run()
}

// giveBack returns a connection whose batch was answered off the loop: the
// loop writes its answers and serves it again.
func (lp *loop) giveBack(lc *lconn) {
	lp.mu.Lock()
	lp.back = append(lp.back, lc)
	lp.mu.Unlock()
	lp.wake()
}

// handleBatch runs lc's handler over what it has read. It reports whether
// the calling goroutine still serves the loop: if a request handed the
// loop over, the batch is answered and lc given back, and the caller must
// return at once without touching the loop.
func (lp *loop) handleBatch(lc *lconn) bool {
	lc.handling = true
	lc.st.handleBatch(lc.handle)
	lc.handling = false
	if lc.away {
		lp.giveBack(lc)
		return false
	}
	return true
}

// dupConn returns a duplicate of c's descriptor (non-blocking, as c's is:
// the flag belongs to the open file both share).
func dupConn(c net.Conn) (int, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return -1, errors.New("not a socket")
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd, dupErr := -1, error(nil)
	if err := raw.Control(func(f uintptr) {
		fd, dupErr = unix.FcntlInt(f, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return -1, err
	}
	return fd, dupErr
}

// run serves the loop on a locked OS thread until it ends, or until a
// request hands it over to another goroutine (handOff).
func (lp *loop) run() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if lp.serve() {
		unix.Close(lp.epfd)
		unix.Close(lp.wakefd)
		lp.done.Done()
	}
}

// serve is the loop: wait for ready connections (or the next deadline),
// serve each, expire the connections whose deadline has passed. It reports
// true when the loop ends, false when a request handed it over.
func (lp *loop) serve() bool {
	if lp.draining && !lp.drainPass(time.Now()) {
		// Taking over a draining loop: the connections the last pass did
		// not reach are drained now.
		return false
	}
	for {
		timeout := -1
		if !lp.nextCheck.IsZero() {
			d := time.Until(lp.nextCheck)
			timeout = max(0, int((d+time.Millisecond-1)/time.Millisecond))
		}
		n, err := lp.wait(timeout)
		if err != nil && err != unix.EINTR {
			// Not expected (the descriptors are the loop's own); waiting
			// out a moment keeps a repeating error from spinning.
			lp.s.log.Error("waiting for events failed", "err", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		now := time.Now()
		woken := false
		lp.single = !lp.adaptive
		for i := range n {
			ev := &lp.events[i]
			if int(ev.Fd) == lp.wakefd {
				woken = true
				continue
			}
			lc := lp.conns[ev.Fd]
			if lc == nil || lc.away {
				continue
			}
			if lc.writing {
				if !lp.write(lc, now) {
					continue
				}
				if !lp.pump(lc, now, false) {
					return false
				}
			} else if !lp.pump(lc, now, true) {
				return false
			}
		}
		if !lp.single && !lp.quietNow() {
			// Only multiplexed connections were served (or none):
			// their next requests come after their clients' own
			// wake-ups, not within a poll, and a poll would take a
			// CPU those clients need. On a quiet host a CPU is free,
			// and the loop polls for them as for the others.
			lp.spinning = false
		}
		if woken {
			quit, still := lp.woken(now)
			if !still {
				return false
			}
			if quit {
				return true
			}
		}
		if !lp.nextCheck.IsZero() && !now.Before(lp.nextCheck) {
			lp.expire(now)
		}
	}
}

// wait waits up to timeout milliseconds (-1: no limit) for events: first
// polling, for up to Config.LoopSpin, if the last turn found work. A client
// with one request in flight sends its next within microseconds, and
// waking a sleeping thread costs more than that on a virtual machine.
func (lp *loop) wait(timeout int) (int, error) {
	limit := lp.s.cfg.LoopSpin
	spin := limit
	quiet := false
	if lp.adaptive {
		if lp.gov != nil {
			limit, quiet = lp.gov.Limit()
		}
		spin = min(lp.budget, limit)
	}
	if lp.spinning && timeout != 0 && spin > 0 {
		lp.s.stats.polls.Add(1)
		began := time.Now()
		until := began.Add(spin)
		for {
			n, err := unix.EpollWait(lp.epfd, lp.events, 0)
			if n > 0 || (err != nil && err != unix.EINTR) {
				if lp.adaptive && n > 0 {
					lp.budget = spinBudget(lp.budget, time.Since(began), limit, quiet)
				}
				return n, err
			}
			if !time.Now().Before(until) {
				break
			}
		}
		if lp.adaptive {
			lp.budget = spinBudget(lp.budget, -1, limit, quiet)
		}
	}
	if !lp.adaptive {
		n, err := unix.EpollWait(lp.epfd, lp.events, timeout)
		lp.spinning = n > 0
		return n, err
	}
	slept := time.Now()
	n, err := unix.EpollWait(lp.epfd, lp.events, timeout)
	lp.spinning = n > 0
	if n > 0 {
		// A request that came while the loop slept: had it polled as long,
		// it would have saved the wake-up.
		lp.budget = spinBudget(lp.budget, time.Since(slept), limit, quiet)
	}
	return n, err
}

// spinBudget is an adaptive loop's next polling budget, given the last
// (budget) and how long the last request took to come (gap; negative when
// a poll of budget found nothing), never more than limit: it moves a
// quarter of the way towards twice the gap (a request later than limit
// counts as none), and halves when polling found nothing; on a quiet host
// (spinGovernor), where the polling takes a CPU nobody waits for, it
// shrinks by a quarter instead, so that a client whose turn is sometimes
// longer keeps being polled for. Under minSpin it is zero: the loop
// sleeps at once until a request that comes soon after the loop went to
// sleep raises it again.
func spinBudget(budget, gap, limit time.Duration, quiet bool) time.Duration {
	switch {
	case gap >= 0 && gap < limit:
		budget += (min(2*gap, limit) - budget) / 4
	case quiet:
		budget -= budget / 4
	default:
		budget /= 2
	}
	if budget < minSpin {
		return 0
	}
	return budget
}

// minSpin is the shortest polling budget worth a turn: a few empty polls.
const minSpin = 2 * time.Microsecond

// woken takes new connections, connections given back, and the server's
// requests; it reports whether the loop is to exit, and whether the calling
// goroutine still serves the loop (see handleBatch).
func (lp *loop) woken(now time.Time) (quit, still bool) {
	var b [8]byte
	unix.Read(lp.wakefd, b[:])
	lp.mu.Lock()
	lp.taken = append(lp.taken[:0], lp.incoming...)
	clear(lp.incoming)
	lp.incoming = lp.incoming[:0]
	back := lp.back
	lp.back = nil
	kill, quit := lp.kill, lp.quit
	lp.mu.Unlock()
	// Connections given back have answers to write: they wait for EPOLLOUT,
	// which comes at once, and are served from there.
	for _, lc := range back {
		lc.away = false
		if kill {
			lp.close(lc)
			continue
		}
		lc.writing, lc.deadline = true, now.Add(lp.s.cfg.WriteTimeout)
		ev := unix.EpollEvent{Events: unix.EPOLLOUT, Fd: int32(lc.fd)}
		if err := unix.EpollCtl(lp.epfd, unix.EPOLL_CTL_ADD, lc.fd, &ev); err != nil {
			lp.close(lc)
			continue
		}
		lp.arm(lc, now)
	}
	// Every new connection is in the set before any is served: one that a
	// handover leaves unserved is reported again (epoll is level-triggered).
	for i, lc := range lp.taken {
		lc.st.begin()
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(lc.fd)}
		if err := unix.EpollCtl(lp.epfd, unix.EPOLL_CTL_ADD, lc.fd, &ev); err != nil {
			lp.s.log.Warn("cannot add a connection to the event loop; closing it", "err", err)
			lp.close(lc)
			lp.taken[i] = nil
			continue
		}
		lp.conns[int32(lc.fd)] = lc
	}
	for i, lc := range lp.taken {
		lp.taken[i] = nil
		if lc != nil && !lp.pump(lc, now, true) {
			return false, false // the rest are in the set: lp.taken is no longer this goroutine's
		}
	}
	if kill {
		lp.closeAll()
	}
	if lp.s.draining.Load() && !lp.draining {
		lp.draining = true
		if !lp.drainPass(now) {
			return false, false
		}
	}
	return quit && len(lp.conns) == 0, true
}

// drainPass answers what every connection has sent and closes it (pump
// does, draining), but for those waiting to write and those away. It
// reports whether the calling goroutine still serves the loop.
func (lp *loop) drainPass(now time.Time) bool {
	for _, lc := range lp.conns {
		if !lc.writing && !lc.away && !lp.pump(lc, now, true) {
			return false
		}
	}
	return true
}

// pump serves a connection as far as it can go without waiting: answers
// requests left from the last batch, reads what has arrived (if readable),
// answers it and writes the answers; then it sets the connection's
// deadline. Draining, a connection is closed once it has nothing left to
// read and its answers are written. It reports whether the calling
// goroutine still serves the loop (see handleBatch).
func (lp *loop) pump(lc *lconn, now time.Time, readable bool) bool {
	st := lc.st
	for !lc.writing {
		if st.closed {
			lp.close(lc)
			return true
		}
		if st.more {
			st.more = false
			if !lp.handleBatch(lc) {
				return false
			}
			if !lp.write(lc, now) {
				return true
			}
			continue
		}
		if !readable {
			if lp.draining {
				lp.close(lc)
				return true
			}
			break
		}
		n, err := unix.Read(lc.fd, st.in[len(st.in):cap(st.in)])
		switch {
		case n > 0:
			if len(st.in) == 0 {
				st.started = now
			}
			st.in = st.in[:len(st.in)+n]
			// One read per connection per wake-up, so that a client that
			// never stops sending cannot starve the others: what is left
			// is reported again (epoll is level-triggered). Draining,
			// everything that has arrived is read now.
			readable = lp.draining
			if !lp.handleBatch(lc) {
				return false
			}
			if lp.adaptive && lc.multi < multiplexedAfter {
				if lc.st.batchFrames > 1 {
					if lc.multi++; lc.multi == multiplexedAfter {
						lp.s.stats.multiplexed.Add(1)
					}
				}
				lp.single = true
			}
			if !lp.write(lc, now) {
				return true
			}
		case err == unix.EAGAIN:
			readable = false
		case err == unix.EINTR:
		default: // end of stream, or a reset
			lp.close(lc)
			return true
		}
	}
	lp.arm(lc, now)
	return true
}

// write writes what is left of st.out without waiting. If the socket takes
// only part, the connection waits for EPOLLOUT (and is not read) until the
// rest is written. It reports whether the connection is still open.
func (lp *loop) write(lc *lconn, now time.Time) bool {
	st := lc.st
	for lc.wpos < len(st.out) {
		n, err := unix.Write(lc.fd, st.out[lc.wpos:])
		if n > 0 {
			lc.wpos += n
			continue
		}
		switch err {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			if !lc.writing {
				lc.writing = true
				lc.deadline = now.Add(lp.s.cfg.WriteTimeout)
				lp.watch(lc, unix.EPOLLOUT)
				lp.arm(lc, now)
			}
			return true
		}
		lp.close(lc)
		return false
	}
	lc.wpos = 0
	st.written()
	if lc.writing {
		lc.writing = false
		lp.watch(lc, unix.EPOLLIN)
	}
	return true
}

// watch sets the event a connection waits for.
func (lp *loop) watch(lc *lconn, events uint32) {
	ev := unix.EpollEvent{Events: events, Fd: int32(lc.fd)}
	unix.EpollCtl(lp.epfd, unix.EPOLL_CTL_MOD, lc.fd, &ev)
}

// arm sets a connection's deadline: the write deadline while answers wait
// to be written, the frame deadline once a request has begun to arrive,
// else the idle deadline (idleDeadline).
func (lp *loop) arm(lc *lconn, now time.Time) {
	if !lc.writing {
		if len(lc.st.in) > 0 {
			lc.deadline = lc.st.started.Add(lp.s.cfg.FrameTimeout)
		} else {
			lc.deadline = lc.st.idleDeadline(now)
		}
	}
	if lp.nextCheck.IsZero() || lc.deadline.Before(lp.nextCheck) {
		lp.nextCheck = lc.deadline
	}
}

// expire closes the connections whose deadline has passed and finds the
// next deadline. A connection away is not the loop's to close: its request
// waits at most Config.LockWait, and it comes back.
func (lp *loop) expire(now time.Time) {
	var next time.Time
	for _, lc := range lp.conns {
		if lc.away {
			continue
		}
		if !now.Before(lc.deadline) {
			if !lc.writing && len(lc.st.in) > 0 && !lp.draining {
				lp.s.stats.timeouts.Add(1)
			}
			lp.close(lc)
			continue
		}
		if next.IsZero() || lc.deadline.Before(next) {
			next = lc.deadline
		}
	}
	lp.nextCheck = next
}

// close closes a connection and releases it.
func (lp *loop) close(lc *lconn) {
	if _, ok := lp.conns[int32(lc.fd)]; ok {
		delete(lp.conns, int32(lc.fd))
	}
	unix.Close(lc.fd) // leaves the epoll set with its last descriptor
	lp.s.stats.buffered.Add(-int64(lc.st.accounted))
	lc.st.accounted = 0
	lc.release()
}

// closeAll closes every connection of the loop; one away is closed when it
// comes back.
func (lp *loop) closeAll() {
	for _, lc := range lp.conns {
		if !lc.away {
			lp.close(lc)
		}
	}
}
