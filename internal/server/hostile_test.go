package server

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/proto"
	"github.com/sluicehq/sluice/shm"
)

// Ensure a client that sends requests and never reads the answers is cut off
// by the write deadline, with bounded memory, while another client is
// served.
func TestHostile_neverReads(t *testing.T) {
	sc := start(t, Config{WriteTimeout: 200 * time.Millisecond})
	good := dial(t, sc)
	bad, err := net.Dial("unix", sc.cfg.SocketPath)
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	var batch []byte
	for range 1000 {
		batch = append(batch, frameOf(1, proto.AppendItem(nil, proto.OpPeek, 0, tb10, 0, 0, []byte("k")))...)
	}
	cut := make(chan error, 1)
	go func() {
		for {
			bad.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if _, err := bad.Write(batch); err != nil {
				cut <- err
				return
			}
		}
	}()
	for range 20 {
		if r := good.acquire("k", tb10, 0, 0); r.Status != proto.StatusOK {
			t.Fatalf("good client: %+v", r)
		}
	}
	select {
	case <-cut:
	case <-time.After(15 * time.Second):
		t.Fatal("a client that never reads was not cut off")
	}
}

// Ensure connections beyond MaxConns are refused one by one, memory stays
// bounded, and a client already connected keeps being served.
func TestHostile_connectionFlood(t *testing.T) {
	sc := start(t, Config{MaxConns: 4})
	good := dial(t, sc)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	busy := 0
	for range 300 {
		c, err := net.Dial("unix", sc.cfg.SocketPath)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		b := make([]byte, 64)
		if n, _ := c.Read(b); n > 0 {
			busy++
		}
	}
	if busy < 290 {
		t.Errorf("%d of 300 extra connections answered Busy", busy)
	}
	if r := good.acquire("k", tb10, 1, 0); r.Status != proto.StatusOK {
		t.Errorf("connected client after the flood: %+v", r)
	}
}

// fuzzServer is a server over a heap table, without listeners, for feeding
// connections directly.
func fuzzServer(t testing.TB) *server {
	tb, err := shm.NewHeap(shm.Options{SlotCount: 256, SlotSize: 128})
	if err != nil {
		t.Fatal(err)
	}
	// Short deadlines: a pipe cannot be half-closed, so each input ends when
	// the handler gives up waiting for more.
	c := Config{Logger: quiet(), IdleTimeout: 20 * time.Millisecond, FrameTimeout: 20 * time.Millisecond, WriteTimeout: time.Second}
	c = c.withDefaults()
	c.Now = func() int64 { return t0 }
	return &server{cfg: c, log: c.Logger, engine: engine.New(tb), now: c.Now}
}

// feed runs a connection handler on one end of a pipe, writes in to the
// other end, and returns everything the handler answered before closing.
func feed(t *testing.T, s *server, serve func(*server, net.Conn), in []byte) []byte {
	client, srv := net.Pipe()
	done := make(chan struct{})
	go func() { defer close(done); serve(s, srv) }()
	go func() {
		client.SetWriteDeadline(time.Now().Add(2 * time.Second))
		client.Write(in)
	}()
	client.SetReadDeadline(time.Now().Add(3 * time.Second))
	out, _ := io.ReadAll(client)
	client.Close()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("handler did not return for input %q", in)
	}
	return out
}

// FuzzServe feeds arbitrary bytes to both protocols' connection handlers:
// they never panic or hang, always answer or close, and the table stays
// sound.
func FuzzServe(f *testing.F) {
	f.Add(frameOf(1, proto.AppendItem(nil, proto.OpAcquire, 0, tb10, 1, 0, []byte("k"))))
	f.Add(frameOf(2, append(proto.AppendPing(nil), proto.AppendStats(nil)...)))
	f.Add(frameOf(1, proto.AppendScan(nil, 0, 5, nil)))
	f.Add([]byte("*4\r\n$9\r\nRL.REDUCE\r\n$1\r\nk\r\n$2\r\n10\r\n$2\r\n60\r\n"))
	f.Add([]byte("CL.THROTTLE k 4 1 1\r\nINFO\r\nCOMMAND\r\n"))
	f.Add([]byte{0xff, 0xff, 0xff, 0x7f, 1, 1})
	f.Fuzz(func(t *testing.T, in []byte) {
		s := fuzzServer(t)
		feed(t, s, serveNative, bytes.Clone(in))
		feed(t, s, serveRESP, bytes.Clone(in))
		if err := s.engine.Verify(); err != nil {
			t.Fatal(err)
		}
	})
}

// Ensure slowloris does not work: a request trickling in a byte at a time is
// cut off FrameTimeout after it started, although each byte comes well
// within that time; another client is served meanwhile.
func TestHostile_slowloris(t *testing.T) {
	sc := start(t, Config{FrameTimeout: 300 * time.Millisecond})
	good := dial(t, sc)
	slow, err := net.Dial("unix", sc.cfg.SocketPath)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	frame := frameOf(1, proto.AppendItem(nil, proto.OpAcquire, 0, tb10, 1, 0, []byte("k")))
	start := time.Now()
	cut := false
	for _, b := range frame {
		if _, err := slow.Write([]byte{b}); err != nil {
			cut = true
			break
		}
		if r := good.acquire("g", tb10, 0, 0); r.Status != proto.StatusOK {
			t.Fatalf("good client: %+v", r)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !cut {
		slow.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err := slow.Read(make([]byte, 64))
		cut = err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
	}
	if !cut {
		t.Fatalf("a frame trickling in for %v was not cut off", time.Since(start))
	}
}
