package server

import (
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/proto"
)

// unixPair returns the server side of a real Unix socket connection.
func unixPair(t *testing.T) net.Conn {
	t.Helper()
	path := filepath.Join(shortDir(t), "p")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Ensure the allow-lists admit a peer by uid or by gid and refuse others.
func TestAllowed(t *testing.T) {
	c := unixPair(t)
	uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
	other := uint32(54321)
	for _, tc := range []struct {
		uids, gids []uint32
		want       bool
	}{
		{nil, nil, true},
		{[]uint32{uid}, nil, true},
		{nil, []uint32{gid}, true},
		{[]uint32{other}, []uint32{gid}, true},
		{[]uint32{other}, nil, false},
		{nil, []uint32{other}, false},
		{[]uint32{other}, []uint32{other}, false},
	} {
		s := &server{cfg: Config{AllowUIDs: tc.uids, AllowGIDs: tc.gids}, log: quiet()}
		if _, _, got := s.admit(c, &listener{path: "sock"}); got != tc.want {
			t.Errorf("uids %v gids %v: allowed=%v, want %v", tc.uids, tc.gids, got, tc.want)
		}
	}
	if _, _, ok := (&server{cfg: Config{AllowUIDs: []uint32{uid}}, log: quiet()}).admit(&net.TCPConn{}, &listener{}); ok {
		t.Errorf("a connection without credentials was allowed")
	}
	s := &server{cfg: Config{MaxConnsPerUID: 2}, log: quiet()}
	if got, counted, ok := s.admit(c, &listener{path: "sock"}); !ok || !counted || got != (peer{uid, true}) {
		t.Errorf("with a per-user cap: peer %+v counted %v ok %v, want uid %d counted", got, counted, ok, uid)
	}
	// Without any: the uid is read all the same (it says who may release
	// the connection's leases), and not counted.
	s = &server{cfg: Config{}, log: quiet()}
	if got, counted, ok := s.admit(c, &listener{path: "sock"}); !ok || counted || got != (peer{uid, true}) {
		t.Errorf("without a cap: peer %+v counted %v ok %v, want uid %d, not counted", got, counted, ok, uid)
	}
	if _, counted, ok := s.admit(&net.TCPConn{}, &listener{}); !ok || counted {
		t.Errorf("a TCP connection under a per-user cap: counted %v ok %v, want served, not counted", counted, ok)
	}
}

// Ensure MaxConnsPerUID refuses a user's connections beyond the cap with
// Busy, and serves them again once one closes.
func TestServer_perUserCap(t *testing.T) {
	sc := start(t, Config{MaxConnsPerUID: 2})
	a, b := dial(t, sc), dial(t, sc)
	for _, c := range []*client{a, b} {
		if r := c.acquire("k", tb10, 1, 0); r.Status != proto.StatusOK {
			t.Fatalf("within the cap: %+v", r)
		}
	}
	third := dial(t, sc)
	if _, rs, err := third.tryRecv(); err != nil || len(rs) != 1 || rs[0].Status != proto.StatusBusy {
		t.Fatalf("third connection: %v %+v, want Busy", err, rs)
	}
	a.c.Close()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		c := dial(t, sc)
		b, start := proto.BeginFrame(nil, proto.KindRequest, 7)
		c.c.Write(proto.EndFrame(proto.AppendItem(b, proto.OpAcquire, 0, tb10, 1, 0, []byte("k")), start, 1)) // refused: EPIPE
		h, rs, err := c.tryRecv()
		if err == nil && h.ID == 7 && len(rs) == 1 && rs[0].Status == proto.StatusOK {
			break // the closed connection's place was given back
		}
		if err == nil && (len(rs) != 1 || rs[0].Status != proto.StatusBusy) {
			t.Fatalf("while the closed connection is being let go: %+v", rs)
		}
		if time.Now().After(deadline) {
			t.Fatal("no connection served after one of the user's closed")
		}
	}
}

// Ensure a refused peer gets Denied (or -ERR on the Redis socket) before it
// can send anything, and is disconnected; and that allow-lists refuse to be
// combined with TCP.
func TestServer_peerDenied(t *testing.T) {
	sc := start(t, Config{AllowUIDs: []uint32{54321}})
	c := dial(t, sc)
	_, rs, err := c.tryRecv()
	if err != nil || len(rs) != 1 || rs[0].Status != proto.StatusDenied {
		t.Fatalf("native: %v %+v", err, rs)
	}
	if !c.closed() {
		t.Errorf("denied connection left open")
	}
	rc, err := net.Dial("unix", sc.cfg.RESPSocket)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	rc.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	n, _ := rc.Read(buf)
	if string(buf[:n]) != "-ERR permission denied\r\n" {
		t.Errorf("RESP: %q", buf[:n])
	}
	dir := shortDir(t)
	err = Run(t.Context(), Config{StatePath: dir + "/s", SocketPath: dir + "/n", RESPSocket: "-",
		RESPAddr: "127.0.0.1:0", AllowUIDs: []uint32{1}, Slots: 16, Logger: quiet()})
	if err == nil {
		t.Errorf("allow-lists with a TCP listener accepted")
	}
}

// Ensure a socket directory writable by every user (without the sticky bit)
// is refused: anyone could replace the socket there.
func TestServer_worldWritableDir(t *testing.T) {
	dir := shortDir(t)
	open := filepath.Join(dir, "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(open, 0o777) // whatever the umask
	err := Run(t.Context(), Config{StatePath: filepath.Join(dir, "s"), SocketPath: filepath.Join(open, "sock"),
		RESPSocket: "-", Slots: 16, Logger: quiet()})
	if !errors.Is(err, ErrSocketPath) {
		t.Errorf("socket in a world-writable directory: %v", err)
	}
}

// Ensure a refused peer can read the refusal even if it writes first: the
// server closed the connection right after writing it, so a client that
// wrote its request before reading its answer got EPIPE (redis-cli printed
// "Broken pipe" instead of "ERR permission denied").
func TestServer_refusalReachesAWriter(t *testing.T) {
	sc := start(t, Config{AllowUIDs: []uint32{54321}})
	for _, path := range []string{sc.cfg.SocketPath, sc.cfg.RESPSocket} {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(time.Minute))
		answer, err := io.ReadAll(c) // the refusal, then the end of the server's writing
		if err != nil || len(answer) == 0 {
			t.Fatalf("%s: the refusal: %q, %v", path, answer, err)
		}
		if _, err := c.Write([]byte("PING\r\n")); err != nil {
			t.Errorf("%s: a request written after the refusal arrived: %v", path, err)
		}
		c.Close()
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatal("redis-cli is not installed (apt-get install redis-tools)")
	}
	for i := range 20 {
		out, _ := exec.Command(cli, "-s", sc.cfg.RESPSocket, "PING").CombinedOutput()
		if got := strings.TrimSpace(string(out)); got != "ERR permission denied" {
			t.Fatalf("redis-cli run %d as a refused peer printed %q", i, got)
		}
	}
}
