package sluice

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/sidecartest"
)

// unixPair returns the two ends of a Unix socket connection.
func unixPair(t *testing.T) (client, server *net.UnixConn) {
	t.Helper()
	l, err := net.Listen("unix", filepath.Join(sidecartest.ShortDir(t), "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		accepted <- c
	}()
	c, err := net.Dial("unix", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		t.Fatal("no connection accepted")
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.UnixConn), s.(*net.UnixConn)
}

// Only a connection with a descriptor is read and written raw.
func TestRawIO_onlyUnixSockets(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if newRawIO(a) != nil {
		t.Error("raw reads and writes on a pipe without a descriptor")
	}
	c, _ := unixPair(t)
	if newRawIO(c) == nil {
		t.Error("no raw reads and writes on a Unix socket")
	}
}

// The reading role and the writing role use one connection at once: a
// stream far larger than the socket's buffers, echoed by the peer, comes
// back whole and in order, writes waiting for room and reads for data.
func TestRawIO_readWhileWriting(t *testing.T) {
	c, s := unixPair(t)
	go io.Copy(s, s) // echo
	r := newRawIO(c)
	want := make([]byte, 8<<20)
	for i := range want {
		want[i] = byte(i * 7 / 3)
	}
	written := make(chan error, 1)
	go func() {
		for b := want; len(b) > 0; {
			n := min(len(b), 100_000)
			if err := r.write(b[:n]); err != nil {
				written <- err
				return
			}
			b = b[n:]
		}
		written <- nil
	}()
	got := make([]byte, 0, len(want))
	buf := make([]byte, 64<<10)
	for len(got) < len(want) {
		n, err := r.read(buf)
		if err != nil {
			t.Fatalf("after %d bytes: %v", len(got), err)
		}
		got = append(got, buf[:n]...)
	}
	sameStream(t, written, got, want)
}

// sameStream checks that the writer, which reports on written, succeeded
// and that got is what it wrote, want.
func sameStream(t *testing.T, written <-chan error, got, want []byte) {
	t.Helper()
	if err := <-written; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("the bytes that arrived differ from those written")
	}
}

// A write larger than the socket's buffer waits for the peer to read.
func TestRawIO_writeWaitsForRoom(t *testing.T) {
	c, s := unixPair(t)
	r := newRawIO(c)
	want := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	written := make(chan error, 1)
	go func() { written <- r.write(want) }()
	got, err := io.ReadAll(io.LimitReader(s, int64(len(want))))
	if err != nil {
		t.Fatal(err)
	}
	sameStream(t, written, got, want)
}

// Deadlines, the end of the stream and a closed peer are reported as
// net.Conn reports them, which is what the connection's failure handling
// looks for.
func TestRawIO_errors(t *testing.T) {
	c, s := unixPair(t)
	r := newRawIO(c)
	buf := make([]byte, 16)

	if n, err := r.read(buf[:0]); n != 0 || err != nil {
		t.Errorf("read into no room: %d, %v; want 0 and no error", n, err)
	}

	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := r.read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("read past its deadline: %v, want a deadline's error", err)
	}
	c.SetReadDeadline(time.Time{})

	c.SetWriteDeadline(time.Now().Add(20 * time.Millisecond))
	if err := r.write(make([]byte, 16<<20)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("write to a peer that does not read, past its deadline: %v, want a deadline's error", err)
	}
	c.SetWriteDeadline(time.Time{})

	c, s = unixPair(t)
	r = newRawIO(c)
	s.Write([]byte("last"))
	s.Close()
	if n, err := r.read(buf); err != nil || string(buf[:n]) != "last" {
		t.Errorf("read of what the peer wrote before closing: %q, %v", buf[:n], err)
	}
	if _, err := r.read(buf); err != io.EOF {
		t.Errorf("read after the peer closed: %v, want io.EOF", err)
	}
	if err := r.write([]byte("x")); !closedByPeer(err) {
		t.Errorf("write after the peer closed: %v, want a broken pipe", err)
	}
}

// The write deadline moves only when less than writeTimeout-writeSlack is
// left, not at each write: a write may wait at least that long, and
// moving it costs a timer's update.
func TestConn_writeDeadline(t *testing.T) {
	c, s := unixPair(t)
	go io.Copy(io.Discard, s)
	cn := &conn{nc: c, raw: newRawIO(c)}
	start := time.Now()
	if err := cn.write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	set := cn.writeBy
	if set.Before(start.Add(writeTimeout)) {
		t.Fatalf("write deadline %v after the write's start, want at least %v", set.Sub(start), writeTimeout)
	}
	if err := cn.write([]byte("b")); err != nil {
		t.Fatal(err)
	}
	if !cn.writeBy.Equal(set) {
		t.Error("the write deadline moved for a write well within it")
	}
	cn.writeBy = time.Now().Add(writeTimeout - writeSlack - time.Millisecond)
	before := time.Now()
	if err := cn.write([]byte("c")); err != nil {
		t.Fatal(err)
	}
	if cn.writeBy.Before(before.Add(writeTimeout)) {
		t.Error("the write deadline did not move for a write with less than writeTimeout-writeSlack left")
	}
}
