package sluice_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clients/go/sluice"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/proto"
)

// fakeSidecar listens on a fresh socket and runs serve on each connection
// until the test ends. It returns the socket's path. A connection whose
// first frame is a PING, as a client's start check is (see Dial), gets its
// answer before serve runs, so that Dial succeeds and the client has had
// an answer.
func fakeSidecar(t *testing.T, serve func(*fakeConn)) string {
	t.Helper()
	return serveUnix(t, "sock", func(nc net.Conn, wg *sync.WaitGroup, track func(...net.Conn)) {
		track(nc)
		wg.Go(func() {
			defer nc.Close()
			fc := &fakeConn{nc: nc}
			fc.startCheck()
			serve(fc)
		})
	})
}

// startCheck answers the first frame if it is a PING, the start check
// Dial sends on a client's first connection; a first frame that is not
// one is left for the next read.
func (fc *fakeConn) startCheck() {
	h, frame, ok := fc.next()
	if !ok {
		return
	}
	if h.Count == 1 && proto.Opcode(frame[proto.HeaderLen]) == proto.OpPing {
		fc.pong(h.ID)
		return
	}
	fc.buf = append(frame, fc.buf...)
}

// goneSidecar returns the socket of a sidecar that answers a client's start
// check, then goes away, with its socket, once gone is called: the client's
// later calls meet an outage of a sidecar that was there.
func goneSidecar(t *testing.T) (path string, gone func()) {
	t.Helper()
	path = filepath.Join(shortDir(t), "gone.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	conns := make(chan net.Conn, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			close(conns)
			return
		}
		fc := &fakeConn{nc: nc}
		fc.startCheck()
		conns <- nc
	}()
	var once sync.Once
	gone = func() {
		once.Do(func() {
			ln.Close() // removes the socket
			if nc, ok := <-conns; ok {
				nc.Close()
			}
		})
	}
	t.Cleanup(gone)
	return path, gone
}

// dialGone returns a client of a sidecar that answered its start check and
// has gone away since (see goneSidecar).
func dialGone(t *testing.T, opts ...sluice.Option) *sluice.Client {
	t.Helper()
	path, gone := goneSidecar(t)
	c := dial(t, path, opts...)
	gone()
	return c
}

// serveUnix listens on a fresh socket named name and hands each connection
// to handle, on the accepting goroutine: handle starts the connection's
// goroutines in wg and tracks, with track, the connections to close when
// the test ends (then the listener closes, they close, and wg is waited
// for). It returns the socket's path.
func serveUnix(t *testing.T, name string, handle func(nc net.Conn, wg *sync.WaitGroup, track func(...net.Conn))) string {
	t.Helper()
	path := filepath.Join(shortDir(t), name)
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	track := func(cs ...net.Conn) {
		mu.Lock()
		conns = append(conns, cs...)
		mu.Unlock()
	}
	wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			handle(nc, &wg, track)
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, nc := range conns {
			nc.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return path
}

// fakeConn is the server side of a connection to a fake sidecar.
type fakeConn struct {
	nc  net.Conn
	buf []byte
}

// next reads one request frame; ok is false once the connection is done.
func (fc *fakeConn) next() (h proto.Header, frame []byte, ok bool) {
	for {
		frame, rest, h, err := proto.SplitFrame(fc.buf)
		if err != nil {
			return h, nil, false
		}
		if frame != nil {
			fc.buf = append([]byte(nil), rest...)
			return h, frame, true
		}
		tmp := make([]byte, 4096)
		n, err := fc.nc.Read(tmp)
		fc.buf = append(fc.buf, tmp[:n]...)
		if err != nil && n == 0 {
			return h, nil, false
		}
	}
}

// respond writes a response frame with id and the results that add
// appends.
func (fc *fakeConn) respond(id uint32, n int, add func([]byte) []byte) {
	b, start := proto.BeginFrame(nil, proto.KindResponse, id)
	fc.nc.Write(proto.EndFrame(add(b), start, n))
}

func (fc *fakeConn) pong(id uint32) { fc.respond(id, 1, proto.AppendPong) }

// echo answers every further PING with a pong and anything else with an
// Internal error.
func (fc *fakeConn) echo() {
	for {
		h, frame, ok := fc.next()
		if !ok {
			return
		}
		if op := proto.Opcode(frame[proto.HeaderLen]); op == proto.OpPing {
			fc.pong(h.ID)
		} else {
			fc.respond(h.ID, 1, func(b []byte) []byte { return proto.AppendError(b, op, proto.StatusInternal, "fake") })
		}
	}
}

// wait reads and drops everything until the client hangs up.
func (fc *fakeConn) wait() { io.Copy(io.Discard, fc.nc) }

// countingDial dials the socket, counting attempts and the writes on the
// connections.
func countingDial(writes, dials *atomic.Int64) func(context.Context, string) (net.Conn, error) {
	return func(ctx context.Context, path string) (net.Conn, error) {
		dials.Add(1)
		var d net.Dialer
		nc, err := d.DialContext(ctx, "unix", path)
		if err != nil {
			return nil, err
		}
		return countingConn{nc, writes}, nil
	}
}

// Replies the client cannot trust fail the call and the connection with a
// clear error, promptly; the next call connects again.
func TestClient_malformedReplies(t *testing.T) {
	frame := func(version, kind byte, count uint16, id uint32, body ...byte) []byte {
		b := binary.LittleEndian.AppendUint32(nil, uint32(8+len(body)))
		b = append(b, version, kind)
		b = binary.LittleEndian.AppendUint16(b, count)
		b = binary.LittleEndian.AppendUint32(b, id)
		return append(b, body...)
	}
	for _, tc := range []struct {
		name  string
		reply func(id uint32) []byte
		want  []error
		text  string
	}{
		{"text", func(uint32) []byte { return []byte("HTTP/1.1 400 Bad Request\r\n\r\n") }, nil, "cannot be decoded"},
		{"version", func(id uint32) []byte { return frame(9, 2, 1, id, 2, 0) }, []error{sluice.ErrBadVersion}, "unsupported protocol version"},
		{"request kind", func(id uint32) []byte { return frame(1, 1, 1, id, 2, 0) }, []error{sluice.ErrMalformed}, "a request frame instead of a response"},
		{"wrong id", func(id uint32) []byte { return frame(1, 2, 1, id+7, 2, 0) }, []error{sluice.ErrMalformed}, "to request"},
		{"two results", func(id uint32) []byte { return frame(1, 2, 2, id, 2, 0, 2, 0) }, []error{sluice.ErrMalformed}, "with 2 results"},
		{"wrong opcode", func(id uint32) []byte { return frame(1, 2, 1, id, 6, 0, 1) }, []error{sluice.ErrMalformed}, "a RESET result to a PING request"},
		{"bad status", func(id uint32) []byte { return frame(1, 2, 1, id, 2, 99, 0, 0) }, []error{sluice.ErrMalformed}, "unknown status 99"},
		{"trailing bytes", func(id uint32) []byte { return frame(1, 2, 1, id, 2, 0, 0) }, []error{sluice.ErrMalformed}, "1 bytes after"},
		{"truncated", func(id uint32) []byte { return frame(1, 2, 1, id, 2, 0)[:10] }, nil, "it closed the connection"},
		{"huge length", func(id uint32) []byte {
			b := frame(1, 2, 1, id)
			binary.LittleEndian.PutUint32(b, proto.MaxFrameLen+1)
			return b
		}, []error{sluice.ErrFrameTooLarge}, "frame too large"},
		{"silence", func(uint32) []byte { return nil }, nil, "it closed the connection"},
		{"busy", func(uint32) []byte {
			return frame(1, 2, 1, 0, proto.AppendError(nil, 0, proto.StatusBusy, "too many connections")...)
		}, []error{sluice.ErrBusy}, "the sidecar is unavailable: the sidecar refused the connection, it is at its connection limit: too many connections"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := fakeSidecar(t, func(fc *fakeConn) {
				h, _, ok := fc.next()
				if !ok {
					return
				}
				fc.nc.Write(tc.reply(h.ID))
				if tc.name != "huge length" {
					return // hang up
				}
				fc.wait()
			})
			c := dial(t, path, sluice.WithTimeout(5*time.Second), sluice.WithBackoff(time.Millisecond, time.Millisecond))
			start := time.Now()
			err := c.Ping(context.Background())
			if !errors.Is(err, sluice.ErrUnavailable) || !strings.Contains(err.Error(), tc.text) {
				t.Errorf("got %v, want ErrUnavailable saying %q", err, tc.text)
			}
			for _, w := range tc.want {
				if !errors.Is(err, w) {
					t.Errorf("got %v, want it to match %v", err, w)
				}
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("took %v", d)
			}
		})
	}
}

// A response frame larger than the read buffer is read whole.
func TestClient_largeResponse(t *testing.T) {
	path := fakeSidecar(t, func(fc *fakeConn) {
		h, _, ok := fc.next()
		if !ok {
			return
		}
		fc.respond(h.ID, 1, func(b []byte) []byte {
			b, start := proto.BeginStatsResult(b)
			for i := range 2000 {
				b = proto.AppendStat(b, strings.Repeat("x", 200)+string(rune('a'+i%26))+strings.Repeat("y", i%7), uint64(i))
			}
			return proto.EndStatsResult(b, start, 2000)
		})
		fc.echo()
	})
	c := dial(t, path)
	st, err := c.Stats(ctx(t))
	if err != nil || len(st) != 26*7 {
		t.Errorf("stats: %d names, %v", len(st), err)
	}
	if err := c.Ping(ctx(t)); err != nil {
		t.Error(err)
	}
}

// A broken connection fails the calls in flight; the next call reconnects.
func TestClient_connectionLost(t *testing.T) {
	var conns atomic.Int64
	path := fakeSidecar(t, func(fc *fakeConn) {
		if conns.Add(1) == 1 {
			h, _, _ := fc.next()
			fc.pong(h.ID)
			for range 5 { // take five requests, answer none, hang up
				fc.next()
			}
			return
		}
		fc.echo()
	})
	c := dial(t, path)
	if err := c.Ping(ctx(t)); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 5)
	for range 5 {
		go func() { errs <- c.Ping(ctx(t)) }()
	}
	for range 5 {
		if err := <-errs; !errors.Is(err, sluice.ErrUnavailable) {
			t.Errorf("ping in flight when the connection broke: %v", err)
		}
	}
	if err := c.Ping(ctx(t)); err != nil {
		t.Errorf("ping after the break: %v", err)
	}
	// The new connection's first ping is answered before serve counts it.
	eventually(t, func() error {
		if n := conns.Load(); n != 2 {
			return fmt.Errorf("%d connections, want 2", n)
		}
		return nil
	})
}

// The sidecar restarts: calls fail (or follow the policy) meanwhile, then
// the same client works again, on the same state.
func TestClient_sidecarRestart(t *testing.T) {
	for _, policy := range []sluice.FailurePolicy{sluice.FailError, sluice.FailOpen, sluice.FailClosed} {
		t.Run(policy.String(), func(t *testing.T) {
			sc := startSidecar(t)
			c := dial(t, sc.cfg.SocketPath, sluice.WithFailurePolicy(policy), sluice.WithBackoff(time.Millisecond, 10*time.Millisecond))
			cx := ctx(t)
			if d, err := c.Acquire(cx, tb10, "k", 1); err != nil || d.Remaining != 9 {
				t.Fatalf("before: %+v, %v", d, err)
			}
			// Callers keep going through the restart.
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var degraded, failed atomic.Int64
			for range 4 {
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						d, err := c.Acquire(cx, tb10, "busy", 0)
						switch {
						case err != nil && policy == sluice.FailError && errors.Is(err, sluice.ErrUnavailable):
							failed.Add(1)
						case err != nil:
							t.Errorf("%v during the restart: %v", policy, err)
							return
						case d.Degraded && d.Allowed == (policy == sluice.FailOpen):
							degraded.Add(1)
						case d.Degraded:
							t.Errorf("%v: degraded decision %+v", policy, d)
						}
						time.Sleep(100 * time.Microsecond)
					}
				})
			}
			sc.stop(t)
			d, err := c.Acquire(cx, tb10, "k", 1)
			switch policy {
			case sluice.FailError:
				if !errors.Is(err, sluice.ErrUnavailable) {
					t.Errorf("while down: %+v, %v", d, err)
				}
			case sluice.FailOpen:
				if err != nil || !d.Allowed || !d.Degraded {
					t.Errorf("while down: %+v, %v", d, err)
				}
			case sluice.FailClosed:
				if err != nil || d.Allowed || !d.Degraded || d.RetryAfter <= 0 || d.RetryAfter > 10*time.Millisecond {
					t.Errorf("while down: %+v, %v", d, err)
				}
			}
			sc.start(t)
			eventually(t, func() error {
				d, err := c.Acquire(cx, tb10, "k", 1)
				if err == nil && d.Degraded {
					err = errors.New("degraded")
				}
				if err == nil && d.Remaining != 8 {
					t.Fatalf("after the restart: %+v, want remaining 8 (state kept)", d)
				}
				return err
			})
			close(stop)
			wg.Wait()
			if policy == sluice.FailError && failed.Load()+degraded.Load() == 0 {
				t.Logf("no caller noticed the restart")
			}
		})
	}
}

// Nothing listening at the socket is a mistake, not an outage: Dial fails,
// whatever the failure policy, and says where it looked, as an absolute
// path. With WithLazyStart it does not ask, and calls fail until the
// sidecar first answers.
func TestClient_noSidecar(t *testing.T) {
	dir := shortDir(t)
	t.Chdir(dir)
	abs := filepath.Join(dir, "var", "sluice.sock")
	for _, policy := range []sluice.FailurePolicy{sluice.FailOpen, sluice.FailClosed, sluice.FailError} {
		_, err := sluice.Dial("var/sluice.sock", sluice.WithFailurePolicy(policy), sluice.WithLogger(quiet))
		if !errors.Is(err, sluice.ErrUnavailable) ||
			err.Error() != "the sidecar is unavailable: nothing listens at "+abs+": no such file or directory" {
			t.Errorf("%v: Dial: %v", policy, err)
		}
	}
	// A socket file nobody listens on (left by a sidecar killed with -9).
	ln, err := net.Listen("unix", filepath.Join(dir, "left.sock"))
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	if _, err := sluice.Dial("left.sock", sluice.WithLogger(quiet)); err == nil ||
		err.Error() != "the sidecar is unavailable: nothing listens at "+filepath.Join(dir, "left.sock")+": connection refused" {
		t.Errorf("Dial of a socket nobody listens on: %v", err)
	}

	// Started before its sidecar: no error at Dial, and every call fails
	// until the sidecar first answers.
	cx := ctx(t)
	lazy := dial(t, "var/sluice.sock", sluice.WithLazyStart(), sluice.WithBackoff(time.Millisecond, time.Millisecond))
	for _, policy := range []sluice.FailurePolicy{sluice.FailOpen, sluice.FailClosed} {
		lazy := dial(t, "var/sluice.sock", sluice.WithLazyStart(), sluice.WithFailurePolicy(policy))
		d, err := lazy.Acquire(cx, tb10, "k", 1)
		if !errors.Is(err, sluice.ErrUnavailable) || !strings.Contains(err.Error(), "never answered") || d.Allowed || d.Degraded {
			t.Errorf("%v: acquire before the sidecar ever answered: %+v, %v", policy, d, err)
		}
		if ls, err := lazy.Lease(cx, sluice.Concurrency(1, time.Minute), "k"); err == nil || ls.Allowed {
			t.Errorf("%v: lease before the sidecar ever answered: %+v, %v", policy, ls, err)
		}
		if lazy.Degraded() != 0 {
			t.Errorf("%v: %d degraded decisions", policy, lazy.Degraded())
		}
	}
	// Once it has answered, the failure policy covers its outages.
	sc := startSidecar(t, func(cfg *server.Config) { cfg.SocketPath = abs })
	eventually(t, func() error { return second(lazy.Acquire(cx, tb10, "k", 1)) })
	sc.stop(t)
	if d, err := lazy.Acquire(cx, tb10, "k", 1); err != nil || !d.Allowed || !d.Degraded {
		t.Errorf("acquire during an outage: %+v, %v", d, err)
	}
}

// A sidecar that has answered and gone away: the policy decides, and the
// client does not hammer the socket.
func TestClient_outage(t *testing.T) {
	cx := ctx(t)
	var dials, writes atomic.Int64
	open := dialGone(t, sluice.WithFailurePolicy(sluice.FailOpen), sluice.WithDial(countingDial(&writes, &dials)),
		sluice.WithBackoff(time.Hour, time.Hour))
	for range 1000 {
		d, err := open.Acquire(cx, tb10, "k", 1)
		if err != nil || !d.Allowed || !d.Degraded || d.RetryAfter >= 0 || d.ResetAfter >= 0 {
			t.Fatalf("fail-open acquire: %+v, %v", d, err)
		}
	}
	if d, err := open.Peek(cx, tb10, "k"); err != nil || !d.Allowed || !d.Degraded {
		t.Errorf("fail-open peek: %+v, %v", d, err)
	}
	allowed, ds, err := open.Multi(cx, []sluice.Item{{Limit: tb10, Key: "a"}, {Limit: tb10, Key: "b"}})
	if err != nil || !allowed || len(ds) != 2 || !ds[1].Degraded {
		t.Errorf("fail-open multi: %v %+v %v", allowed, ds, err)
	}
	// The start check's, and one more once the connection broke.
	if n := dials.Load(); n != 2 {
		t.Errorf("%d attempts to connect within the backoff, want 2", n)
	}
	// Operations that decide nothing report the outage.
	for name, err := range map[string]error{
		"refund": second(open.Refund(cx, tb10, "k", 1)),
		"reset":  second(open.Reset(cx, tb10, "k")),
		"ping":   open.Ping(cx),
		"stats":  second(open.Stats(cx)),
		"hello":  second(open.Hello(cx)),
		"scan":   third(open.Scan(cx, "", 0, 1)),
	} {
		if !errors.Is(err, sluice.ErrUnavailable) || !strings.Contains(err.Error(), "the next attempt to connect is in") {
			t.Errorf("%s: %v", name, err)
		}
	}

	closed := dialGone(t, sluice.WithFailurePolicy(sluice.FailClosed), sluice.WithBackoff(20*time.Millisecond, 40*time.Millisecond))
	for range 10 {
		d, err := closed.Acquire(cx, tb10, "k", 1)
		if err != nil || d.Allowed || !d.Degraded || d.RetryAfter < 0 || d.RetryAfter > 40*time.Millisecond {
			t.Fatalf("fail-closed acquire: %+v, %v", d, err)
		}
	}
	// The backoff grows, attempt after attempt, up to its maximum.
	var last time.Duration
	for range 4 {
		time.Sleep(45 * time.Millisecond)
		d, _ := closed.Acquire(cx, tb10, "k", 1) // a new attempt, which fails
		last = d.RetryAfter
	}
	if last <= 20*time.Millisecond || last > 40*time.Millisecond {
		t.Errorf("retry after %v after several failed attempts, want the maximum 40ms", last)
	}
}

// sidecarOfVersion is a fake sidecar of protocol version v: it answers HELLO
// with v, a frame of a newer version with BadVersion, closing the
// connection as the real one does, and any other frame with the result
// answer appends. seen, if not nil, gets the version of every frame but
// HELLO's.
func sidecarOfVersion(t *testing.T, v uint8, seen chan<- uint8, answer func(b []byte, op proto.Opcode) []byte) string {
	t.Helper()
	return fakeSidecar(t, func(fc *fakeConn) {
		for {
			h, frame, ok := fc.next()
			if !ok {
				return
			}
			op := proto.Opcode(frame[proto.HeaderLen])
			b, start := proto.BeginFrameVersion(nil, min(h.Version, v), proto.KindResponse, h.ID)
			if op == proto.OpHello {
				fc.nc.Write(proto.EndFrame(proto.AppendHelloResult(b, &proto.Hello{Version: v,
					MaxFrame: proto.MaxFrameLen, MaxBatch: proto.MaxBatch, MaxKey: proto.MaxKeyLen, MaxMulti: proto.MaxMulti}), start, 1))
				continue
			}
			if seen != nil {
				seen <- h.Version
			}
			if h.Version > v {
				b = proto.AppendError(b, 0, proto.StatusBadVersion, fmt.Sprintf("version %d, this side speaks 1 to %d", h.Version, v))
				fc.nc.Write(proto.EndFrame(b, start, 1))
				return
			}
			fc.nc.Write(proto.EndFrame(answer(b, op), start, 1))
		}
	})
}

// A sidecar of protocol version 2 (the release before leases) refuses a
// frame of version 3 with BadVersion and closes the connection, as the real
// one does. The client writes each frame in the oldest version that holds
// it, so everything that sidecar knows keeps working: a spec limit's
// acquire goes in version 1, a named limit's or a shadow request in
// version 2; only what version 3 added needs version 3. A named limit's
// request carries its deadline (version 4) only to a sidecar whose HELLO
// says it speaks version 4.
func TestClient_olderSidecar(t *testing.T) {
	const sidecarVersion = 2
	versions := make(chan uint8, 16)
	path := sidecarOfVersion(t, sidecarVersion, versions, func(b []byte, op proto.Opcode) []byte {
		d := proto.Decision{Allowed: true, Remaining: 1, Limit: 2, RetryAfter: -1}
		return proto.AppendDecision(b, op, &d)
	})
	c := dial(t, path, sluice.WithFailurePolicy(sluice.FailError))
	ctx := context.Background()
	spec := func(s string) sluice.Limit {
		l, err := sluice.ParseLimit(s)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	for _, tc := range []struct {
		name    string
		limit   sluice.Limit
		opts    []sluice.RequestOption
		version uint8
	}{
		{"spec", spec("token_bucket:max=2,refill_time=1s"), nil, 1},
		{"named", spec("login"), nil, 2},
		{"shadow request", spec("gcra:burst=1,count=1,period=1s"), []sluice.RequestOption{sluice.Shadow()}, 2},
		{"shadow spec", spec("gcra:burst=1,count=1,period=1s,shadow=true"), nil, 2},
		{"sliding_log", spec("sliding_log:limit=2,window=1s"), nil, 3},
	} {
		d, err := c.Acquire(ctx, tc.limit, "k", 1, tc.opts...)
		if got := <-versions; got != tc.version {
			t.Errorf("%s: sent in version %d, want %d", tc.name, got, tc.version)
		}
		if tc.version <= sidecarVersion && (err != nil || !d.Allowed) {
			t.Errorf("%s: %+v, %v; the older sidecar answers it", tc.name, d, err)
		}
		if tc.version > sidecarVersion && !errors.Is(err, sluice.ErrBadVersion) {
			t.Errorf("%s: %v, want sluice.ErrBadVersion from the older sidecar", tc.name, err)
		}
	}
}

// A named limit's ACQUIRE, PEEK and REFUND ask for each limit of a list
// (flag ALL, version 7) only of a sidecar whose HELLO says version 7: to
// one of version 6 they go in version 4, as before.
func TestClient_listAllOnlyToVersion7(t *testing.T) {
	for _, v := range []uint8{6, proto.ListVersion} {
		versions := make(chan uint8, 16)
		path := sidecarOfVersion(t, v, versions, func(b []byte, op proto.Opcode) []byte {
			d := proto.Decision{Allowed: true, Remaining: 1, Limit: 2, RetryAfter: -1}
			return proto.AppendDecision(b, op, &d)
		})
		c := dial(t, path, sluice.WithFailurePolicy(sluice.FailError))
		login := sluice.Limit{Name: "login"}
		want := map[uint8]uint8{6: 4, proto.ListVersion: proto.ListVersion}[v]
		for _, call := range []func() (sluice.Decision, error){
			func() (sluice.Decision, error) { return c.Acquire(ctx(t), login, "k", 1) },
			func() (sluice.Decision, error) { return c.Peek(ctx(t), login, "k") },
			func() (sluice.Decision, error) { return c.Refund(ctx(t), login, "k", 1) },
		} {
			d, err := call()
			if got := <-versions; got != want || err != nil || !d.Allowed || d.Limits != nil {
				t.Errorf("sidecar of version %d: sent in version %d (want %d): %+v, %v", v, got, want, d, err)
			}
		}
	}
}

// DialContext's deadline bounds the start check; a sidecar that accepts
// and answers nothing fails it.
func TestDialContext_deadline(t *testing.T) {
	path := serveUnix(t, "sock", func(nc net.Conn, wg *sync.WaitGroup, track func(...net.Conn)) {
		track(nc)
		wg.Go(func() { (&fakeConn{nc: nc}).wait() })
	})
	cx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := sluice.DialContext(cx, path, sluice.WithLogger(quiet))
	if !errors.Is(err, sluice.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), path) {
		t.Errorf("DialContext of a silent sidecar: %v", err)
	}
	if took := time.Since(start); took > 900*time.Millisecond {
		t.Errorf("DialContext with a 50ms deadline took %v", took)
	}
	_, err = sluice.Dial(path, sluice.WithLogger(quiet))
	if !errors.Is(err, sluice.ErrUnavailable) || !strings.Contains(err.Error(), "no answer to the ping within 1s") {
		t.Errorf("Dial of a silent sidecar: %v", err)
	}
}

// Dial's start check gives its first connection the check's whole time,
// not only the dial timeout of a reconnection: a sidecar slow to accept
// (a busy host) is found, where a 100 ms connect attempt gave up.
func TestDial_slowConnect(t *testing.T) {
	_, sock := startSluiced(t)
	slow := func(ctx context.Context, path string) (net.Conn, error) {
		select {
		case <-time.After(300 * time.Millisecond): // three dial timeouts
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}
	c, err := sluice.Dial(sock, sluice.WithLogger(quiet), sluice.WithDial(slow), sluice.WithTimeout(time.Minute))
	if err != nil {
		t.Fatalf("Dial of a sidecar slow to accept: %v", err)
	}
	defer c.Close()
	if d, err := c.Acquire(context.Background(), tb10, "k", 1); err != nil || !d.Allowed || d.Degraded {
		t.Errorf("after a slow start: %+v, %v", d, err)
	}
}
