package server

import (
	"errors"
	"net"
	"os"
	"path/filepath"
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
		if got := s.allowed(c); got != tc.want {
			t.Errorf("uids %v gids %v: allowed=%v, want %v", tc.uids, tc.gids, got, tc.want)
		}
	}
	if (&server{cfg: Config{AllowUIDs: []uint32{uid}}, log: quiet()}).allowed(&net.TCPConn{}) {
		t.Errorf("a connection without credentials was allowed")
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
