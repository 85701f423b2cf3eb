//go:build linux

package server

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/proto"
	"golang.org/x/sys/unix"
)

// Ensure the epoll transport serves connections without a goroutine each
// (with a loop that sleeps as soon as it is idle: the other tests poll).
func TestLoop_noGoroutinePerConnection(t *testing.T) {
	sc := start(t, Config{Transport: TransportEpoll, Loops: 1, LoopSpin: -1})
	before := runtime.NumGoroutine()
	var cs []*client
	for range 200 {
		c := dial(t, sc)
		if r := c.acquire("k", tb10, 0, 0); r.Status != proto.StatusOK {
			t.Fatalf("acquire: %+v", r)
		}
		cs = append(cs, c)
	}
	if n := runtime.NumGoroutine() - before; n > 20 {
		t.Errorf("200 open connections added %d goroutines", n)
	}
	for _, c := range cs {
		if r := c.acquire("k", tb10, 0, 0); r.Status != proto.StatusOK {
			t.Fatalf("acquire: %+v", r)
		}
	}
}

// Ensure many clients pipelining at once, on both protocols, each get every
// answer, in order, from few loops.
func TestLoop_manyPipeliningClients(t *testing.T) {
	sc := start(t, Config{Transport: TransportEpoll, Loops: 2})
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			c, err := net.Dial("unix", sc.cfg.SocketPath)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			var batch []byte
			for id := range uint32(500) {
				b, start := proto.BeginFrame(nil, proto.KindRequest, id)
				b = proto.AppendItem(b, proto.OpAcquire, 0, tb10, 0, 0, fmt.Appendf(nil, "n%d", i))
				batch = append(batch, proto.EndFrame(b, start, 1)...)
			}
			go c.Write(batch)
			cl := &client{t: t, c: c}
			for id := range uint32(500) {
				h, rs, err := cl.tryRecv()
				if err != nil || h.ID != id || len(rs) != 1 || rs[0].Status != proto.StatusOK {
					t.Errorf("client %d: answer %d: id %d, %+v, %v", i, id, h.ID, rs, err)
					return
				}
			}
		})
		wg.Go(func() {
			c, err := net.Dial("unix", sc.cfg.RESPSocket)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			var batch bytes.Buffer
			for j := range 500 {
				fmt.Fprintf(&batch, "ECHO r%d-%d\r\n", i, j)
			}
			go c.Write(batch.Bytes())
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			rd := bufio.NewReader(c)
			for j := range 500 {
				var out bytes.Buffer
				if err := readReply(rd, &out); err != nil {
					t.Errorf("RESP client %d: reply %d: %v", i, j, err)
					return
				}
				if want := fmt.Sprintf("r%d-%d", i, j); !strings.Contains(out.String(), "\r\n"+want+"\r\n") {
					t.Errorf("RESP client %d: reply %d is %q, want %s", i, j, out.String(), want)
					return
				}
			}
		})
	}
	wg.Wait()
}

// Ensure shutdown answers every request a connection had sent, then closes
// it: the loop reads what has arrived before closing.
func TestLoop_drainAnswersWhatWasSent(t *testing.T) {
	sc := start(t, Config{Transport: TransportEpoll})
	c := dial(t, sc)
	c.do(proto.AppendPing) // served
	var batch []byte
	for range 50 {
		batch = append(batch, frameOf(1, proto.AppendPing(nil))...)
	}
	if _, err := c.c.Write(batch); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() { defer close(stopped); sc.stop(t) }()
	for i := range 50 {
		if _, rs, err := c.tryRecv(); err != nil || len(rs) != 1 || rs[0].Status != proto.StatusOK {
			t.Fatalf("answer %d: %+v, %v", i, rs, err)
		}
	}
	if _, _, err := c.tryRecv(); err != io.EOF {
		t.Errorf("after the answers: %v, want the end of the stream", err)
	}
	<-stopped
}

// Ensure a client that stops reading is no longer read from while its
// answers wait (the output bound holds), and is served again once it reads.
func TestLoop_slowReaderResumes(t *testing.T) {
	sc := start(t, Config{Transport: TransportEpoll})
	c, err := net.Dial("unix", sc.cfg.RESPSocket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// 20000 PINGs of 6 bytes answer 140 kB: more than the socket takes.
	const n = 20000
	go c.Write(bytes.Repeat([]byte("PING\r\n"), n))
	time.Sleep(100 * time.Millisecond)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadFull(c, make([]byte, n*len("+PONG\r\n")))
	if err != nil {
		t.Fatalf("read %d bytes: %v", got, err)
	}
}

// feedInline is the largest input feedLoop writes before the loop has the
// connection: well under a Unix socket pair's send buffer.
const feedInline = 32 << 10

// feedLoop is feed over the epoll transport: the handler runs in an event
// loop on one end of a socket pair; the input ends with a half-close.
func feedLoop(t *testing.T, s *server, ls *loops, open func(*server, net.Conn) (*stream, func()), in []byte) []byte {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) net.Conn {
		f := os.NewFile(uintptr(fd), "pair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	client, srv := conn(fds[0]).(*net.UnixConn), conn(fds[1])
	defer client.Close()
	done := make(chan struct{})
	write := func() {
		client.SetWriteDeadline(time.Now().Add(time.Minute)) // generous: a busy machine, not the server, is slow
		client.Write(in)
		client.CloseWrite()
	}
	// An input the socket's buffer holds is written before the loop gets the
	// connection: the server's idle timeout is short (fuzzServer), and a
	// writer that a busy machine starts late would find it closed.
	small := len(in) <= feedInline
	if small {
		write()
	}
	st, handle := open(s, srv)
	ls.next().add(st, handle, func() { close(done) })
	if !small {
		go write()
	}
	client.SetReadDeadline(time.Now().Add(time.Minute))
	out, _ := io.ReadAll(client)
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the loop did not close the connection for input %q", in)
	}
	return out
}

// FuzzServeLoop feeds arbitrary bytes to both protocols' handlers in an
// event loop, and checks they answer as they do on a goroutine.
func FuzzServeLoop(f *testing.F) {
	f.Add(frameOf(1, proto.AppendItem(nil, proto.OpAcquire, 0, tb10, 1, 0, []byte("k"))))
	f.Add(frameOf(2, append(proto.AppendPing(nil), proto.AppendStats(nil)...)))
	f.Add([]byte("*4\r\n$9\r\nRL.REDUCE\r\n$1\r\nk\r\n$2\r\n10\r\n$2\r\n60\r\n"))
	f.Add([]byte("CL.THROTTLE k 4 1 1\r\nPING\r\nECHO x\r\n"))
	f.Add([]byte{0xff, 0xff, 0xff, 0x7f, 1, 1})
	f.Fuzz(func(t *testing.T, in []byte) {
		s, s2 := fuzzServer(t), fuzzServer(t)
		ls, err := startLoops(s, 1)
		if err != nil {
			t.Fatal(err)
		}
		defer ls.stop()
		for _, p := range []struct {
			name  string
			open  func(*server, net.Conn) (*stream, func())
			serve func(*server, net.Conn)
		}{{"native", openNative, serveNative}, {"RESP", openRESP, serveRESP}} {
			got := feedLoop(t, s, ls, p.open, bytes.Clone(in))
			want := feed(t, s2, p.serve, bytes.Clone(in))
			if varies(in, want) {
				continue
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s: the loop answered %q, a goroutine %q", p.name, got, want)
			}
		}
		if err := s.engine.Verify(); err != nil {
			t.Fatal(err)
		}
	})
}

// varies reports whether answers to in may differ between two servers fed
// the same bytes: those that report connection ids or the server's
// counters.
func varies(in, out []byte) bool {
	l := bytes.ToLower(in)
	for _, w := range []string{"client", "hello", "info"} {
		if bytes.Contains(l, []byte(w)) {
			return true
		}
	}
	return bytes.Contains(out, []byte("buffered_bytes"))
}

// Ensure a client that never stops sending (and reads its answers) does not
// starve another connection of the same loop.
func TestLoop_floodDoesNotStarve(t *testing.T) {
	sc := start(t, Config{Transport: TransportEpoll, Loops: 1})
	flood, err := net.Dial("unix", sc.cfg.RESPSocket)
	if err != nil {
		t.Fatal(err)
	}
	defer flood.Close()
	stop := make(chan struct{})
	defer close(stop)
	go io.Copy(io.Discard, flood)
	go func() {
		batch := bytes.Repeat([]byte("PING\r\n"), 10000)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := flood.Write(batch); err != nil {
				return
			}
		}
	}()
	time.Sleep(50 * time.Millisecond)
	c := dial(t, sc)
	for range 50 {
		began := time.Now()
		if r := c.acquire("k", tb10, 0, 0); r.Status != proto.StatusOK {
			t.Fatalf("acquire: %+v", r)
		}
		if d := time.Since(began); d > time.Second {
			t.Fatalf("an acquire beside a flooding client took %v", d)
		}
	}
}
