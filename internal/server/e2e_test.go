package server

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/proto"
)

var tb10 = proto.TokenBucketLimit(10, time.Hour, 1)

// Ensure every operation works end to end over the socket.
func TestServer_operations(t *testing.T) {
	sc := start(t, Config{})
	c := dial(t, sc)

	if r := c.do(proto.AppendPing); r.Status != proto.StatusOK || r.Code != proto.OpPing {
		t.Errorf("ping: %+v", r)
	}
	if r := c.do(proto.AppendHello); r.Status != proto.StatusOK || r.Hello.Version != proto.Version ||
		r.Hello.SlotCount != 4096 || r.Hello.SlotSize != 128 || r.Hello.MaxMulti != proto.MaxMulti {
		t.Errorf("hello: %+v", r.Hello)
	}
	for i := range 3 {
		r := c.acquire("login:alice", tb10, 1, 0)
		if r.Status != proto.StatusOK || !r.Decision.Allowed || r.Decision.Remaining != int64(9-i) || r.Decision.Limit != 10 {
			t.Errorf("acquire %d: %+v", i, r.Decision)
		}
	}
	r := c.do(func(b []byte) []byte {
		return proto.AppendItem(b, proto.OpPeek, 0, tb10, 0, 0, []byte("login:alice"))
	})
	if !r.Decision.Allowed || r.Decision.Remaining != 7 {
		t.Errorf("peek: %+v, want 7 remaining as it stands", r.Decision)
	}
	r = c.do(func(b []byte) []byte {
		return proto.AppendItem(b, proto.OpRefund, 0, tb10, 2, 0, []byte("login:alice"))
	})
	if r.Decision.Remaining != 9 {
		t.Errorf("refund 2 onto 7: %+v", r.Decision)
	}
	if r := c.acquire("login:alice", tb10, 11, 0); r.Decision.Allowed || r.Decision.RetryAfter != -1 {
		t.Errorf("cost above max: %+v", r.Decision)
	}
	if r := c.acquire("login:alice", tb10, 10, 0); r.Decision.Allowed || r.Decision.RetryAfter != int64(time.Hour) {
		t.Errorf("cost 10 with 9 left: %+v", r.Decision)
	}
	r = c.do(func(b []byte) []byte { return proto.AppendItem(b, proto.OpReset, 0, tb10, 0, 0, []byte("login:alice")) })
	if r.Status != proto.StatusOK || !r.Existed {
		t.Errorf("reset: %+v", r)
	}
	if r := c.acquire("login:alice", tb10, 1, 0); r.Decision.Remaining != 9 {
		t.Errorf("after reset: %+v", r.Decision)
	}
	// MULTI: all or nothing.
	one := proto.TokenBucketLimit(1, time.Hour, 1)
	items := []proto.MultiItem{{Limit: tb10, Cost: 1, Key: []byte("ip:1")}, {Limit: one, Cost: 1, Key: []byte("acct:bob")}}
	r = c.do(func(b []byte) []byte { return proto.AppendMulti(b, 0, 0, items) })
	if r.Status != proto.StatusOK || !r.Allowed || r.NDecisions != 2 || r.Decisions[0].Remaining != 9 {
		t.Errorf("multi: %+v", r)
	}
	r = c.do(func(b []byte) []byte { return proto.AppendMulti(b, 0, 0, items) })
	if r.Allowed || !r.Decisions[0].Allowed || r.Decisions[1].Allowed {
		t.Errorf("second multi: %+v", r)
	}
	if r := c.acquire("ip:1", tb10, 1, 0); r.Decision.Remaining != 8 {
		t.Errorf("a denied multi consumed: %+v", r.Decision)
	}
	// SCAN by prefix.
	r = c.do(func(b []byte) []byte { return proto.AppendScan(b, 0, 100, []byte("login:")) })
	if r.Status != proto.StatusOK || r.NEntries != 1 {
		t.Fatalf("scan: %+v", r)
	}
	alg, _, key, _, err := proto.NextScanEntry(r.Entries)
	if err != nil || alg != proto.TokenBucket || string(key) != "login:alice" {
		t.Errorf("scan entry: %v %q %v", alg, key, err)
	}
	// STATS.
	r = c.do(proto.AppendStats)
	stats := map[string]uint64{}
	for b := r.Stats; len(b) > 0; {
		name, v, rest, err := proto.NextStat(b)
		if err != nil {
			t.Fatal(err)
		}
		stats[string(name)] = v
		b = rest
	}
	// login:alice (its slot reused after the reset), ip:1, acct:bob.
	if stats["slot_count"] != 4096 || stats["inserts"] != 3 || stats["connections"] != 1 || stats["ops"] == 0 {
		t.Errorf("stats: %v", stats)
	}
}

// Ensure errors come back as typed statuses and the connection stays usable.
func TestServer_errors(t *testing.T) {
	sc := start(t, Config{})
	c := dial(t, sc)
	cases := []struct {
		op   func([]byte) []byte
		want proto.Status
	}{
		{func(b []byte) []byte {
			return proto.AppendItem(b, proto.OpAcquire, 0, proto.Limit{Algorithm: proto.GCRA, P: [3]int64{1, 0, 1}}, 1, 0, []byte("k"))
		}, proto.StatusInvalidLimit},
		{func(b []byte) []byte { return proto.AppendItem(b, proto.OpAcquire, 0, tb10, -1, 0, []byte("k")) }, proto.StatusInvalidCost},
		{func(b []byte) []byte {
			return proto.AppendItem(b, proto.OpAcquire, 0, proto.FixedWindowLimit(5, time.Microsecond), 1, 0, []byte("k"))
		}, proto.StatusInvalidLimit},
	}
	for i, cs := range cases {
		if r := c.do(cs.op); r.Status != cs.want || len(r.Message) == 0 {
			t.Errorf("case %d: status %v %q, want %v", i, r.Status, r.Message, cs.want)
		}
	}
	if r := c.acquire("k", tb10, 1, 0); r.Status != proto.StatusOK {
		t.Errorf("connection unusable after errors: %+v", r)
	}
}

// Ensure scan on a table without inline keys is refused clearly.
func TestServer_scanUnsupported(t *testing.T) {
	sc := start(t, Config{Slots: 64, SlotSize: 64})
	c := dial(t, sc)
	if r := c.do(func(b []byte) []byte { return proto.AppendScan(b, 0, 10, nil) }); r.Status != proto.StatusUnsupported {
		t.Errorf("scan on 64-byte slots: %v %q", r.Status, r.Message)
	}
}

// Ensure pipelined frames (many in one write) and batched frames (many
// operations in one frame) are answered in order.
func TestServer_pipelineAndBatch(t *testing.T) {
	sc := start(t, Config{})
	c := dial(t, sc)
	// 50 frames of 3 acquires each, written at once.
	var all []byte
	for f := range 50 {
		b, start := proto.BeginFrame(all, proto.KindRequest, uint32(1000+f))
		for range 3 {
			b = proto.AppendItem(b, proto.OpAcquire, 0, proto.TokenBucketLimit(1000, time.Hour, 1), 1, 0, []byte("pipe"))
		}
		all = proto.EndFrame(b, start, 3)
	}
	if _, err := c.c.Write(all); err != nil {
		t.Fatal(err)
	}
	want := int64(999)
	for f := range 50 {
		h, rs := c.recv()
		if h.ID != uint32(1000+f) || len(rs) != 3 {
			t.Fatalf("frame %d: id %d, %d results", f, h.ID, len(rs))
		}
		for _, r := range rs {
			if r.Decision.Remaining != want {
				t.Fatalf("frame %d: remaining %d, want %d", f, r.Decision.Remaining, want)
			}
			want--
		}
	}
}

// Ensure no over-admission: 64 clients hammer one key; exactly the
// bucket's capacity is admitted.
func TestServer_concurrentClients(t *testing.T) {
	sc := start(t, Config{})
	const clients, each, capacity = 64, 20, 500
	l := proto.GCRALimit(capacity-1, 1, time.Hour)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range clients {
		c := dial(t, sc)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if r := c.acquire("hot", l, 1, 0); r.Decision.Allowed {
					admitted.Add(1)
				} else if r.Status != proto.StatusOK {
					t.Errorf("status %v", r.Status)
				}
			}
		}()
	}
	wg.Wait()
	if n := admitted.Load(); n != capacity {
		t.Errorf("admitted %d of %d, want exactly %d", n, clients*each, capacity)
	}
}

// Ensure a restart keeps every bucket: the state file survives.
func TestServer_restartKeepsState(t *testing.T) {
	sc := start(t, Config{})
	c := dial(t, sc)
	for range 7 {
		c.acquire("day:1.2.3.4", proto.FixedWindowLimit(20, 24*time.Hour), 1, 0)
	}
	sc.stop(t)
	if _, err := os.Stat(sc.cfg.SocketPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left behind after shutdown: %v", err)
	}
	cfg := sc.cfg
	cfg.Now, cfg.Ready = nil, nil
	cfg.Now = sc.clock.Load
	sc2 := start(t, cfg)
	if r := dial(t, sc2).acquire("day:1.2.3.4", proto.FixedWindowLimit(20, 24*time.Hour), 1, 0); r.Decision.Remaining != 12 {
		t.Errorf("after restart: remaining %d, want 12", r.Decision.Remaining)
	}
}

// Ensure malformed input gets an error answer and closes that connection,
// while another client keeps being served.
func TestServer_malformed(t *testing.T) {
	sc := start(t, Config{})
	good := dial(t, sc)
	cases := map[string][]byte{
		"bad version":  {8, 0, 0, 0, 9, 1, 1, 0, 1, 0, 0, 0},
		"huge length":  {0xff, 0xff, 0xff, 0x7f, 1, 1, 1, 0, 1, 0, 0, 0},
		"unknown op":   frameOf(1, []byte{0xee}),
		"truncated op": frameOf(1, []byte{byte(proto.OpAcquire), 0, 1}),
		"bad flags":    frameOf(1, proto.AppendItem(nil, proto.OpAcquire, 0x80, tb10, 1, 0, []byte("k"))),
		"empty key":    frameOf(1, proto.AppendItem(nil, proto.OpAcquire, 0, tb10, 1, 0, nil)),
		"response":     respFrame(),
	}
	for name, frame := range cases {
		t.Run(name, func(t *testing.T) {
			c := dial(t, sc)
			c.c.Write(frame)
			_, rs, err := c.tryRecv()
			if err != nil || len(rs) == 0 || rs[0].Status == proto.StatusOK {
				t.Fatalf("answer: %v %+v", err, rs)
			}
			if !c.closed() {
				t.Errorf("connection left open after malformed input")
			}
			if r := good.acquire("k", tb10, 1, 0); r.Status != proto.StatusOK {
				t.Errorf("other client: %+v", r)
			}
		})
	}
}

// frameOf wraps raw operation bytes in a request frame of count operations.
func frameOf(count int, ops []byte) []byte {
	b, start := proto.BeginFrame(nil, proto.KindRequest, 7)
	return proto.EndFrame(append(b, ops...), start, count)
}

func respFrame() []byte {
	b, start := proto.BeginFrame(nil, proto.KindResponse, 7)
	return proto.EndFrame(proto.AppendPong(b), start, 1)
}

// Ensure connections beyond MaxConns are answered Busy and closed.
func TestServer_maxConns(t *testing.T) {
	sc := start(t, Config{MaxConns: 2})
	a, b := dial(t, sc), dial(t, sc)
	a.do(proto.AppendPing)
	b.do(proto.AppendPing)
	c := dial(t, sc)
	_, rs, err := c.tryRecv()
	if err != nil || len(rs) != 1 || rs[0].Status != proto.StatusBusy {
		t.Fatalf("third connection: %v %+v", err, rs)
	}
	if r := a.do(proto.AppendPing); r.Status != proto.StatusOK {
		t.Errorf("first connection after a rejection: %+v", r)
	}
}

// Ensure an idle connection is closed after IdleTimeout and a frame that
// stalls half-way after FrameTimeout.
func TestServer_timeouts(t *testing.T) {
	sc := start(t, Config{IdleTimeout: 100 * time.Millisecond, FrameTimeout: 100 * time.Millisecond})
	idle := dial(t, sc)
	slow := dial(t, sc)
	slow.c.Write([]byte{40, 0, 0}) // the start of a header, then nothing
	for _, c := range []*client{idle, slow} {
		c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("connection not closed by the server: %v", err)
		}
	}
}

// Ensure the socket rules: the mode is applied, a second server on the same
// socket is refused without removing the live socket, a stale socket is
// replaced, and a path too long for sun_path is a clear error.
func TestServer_socketRules(t *testing.T) {
	sc := start(t, Config{SocketMode: 0o600})
	fi, err := os.Stat(sc.cfg.SocketPath)
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Mode().Type() != os.ModeSocket {
		t.Fatalf("socket %v %v", fi.Mode(), err)
	}
	dir := shortDir(t)
	err = Run(t.Context(), Config{StatePath: filepath.Join(dir, "other"), SocketPath: sc.cfg.SocketPath, Slots: 16, RESPSocket: "-", Logger: quiet()})
	if !errors.Is(err, ErrSocketInUse) || !strings.HasSuffix(err.Error(), "another sluiced is serving this socket: "+sc.cfg.SocketPath) {
		t.Errorf("second server on a live socket: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "other")); err == nil {
		t.Error("the second server's failed start left the state file it created")
	}
	if r := dial(t, sc).do(proto.AppendPing); r.Status != proto.StatusOK {
		t.Errorf("live socket harmed: %+v", r)
	}

	stale := filepath.Join(dir, "stale.sock")
	ln, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close() // as a crashed server leaves it
	sc2 := start(t, Config{StatePath: filepath.Join(dir, "state2"), SocketPath: stale})
	if r := dial(t, sc2).do(proto.AppendPing); r.Status != proto.StatusOK {
		t.Errorf("server on a stale socket: %+v", r)
	}

	long := filepath.Join(dir, strings.Repeat("x", 120))
	if err := Run(t.Context(), Config{StatePath: filepath.Join(dir, "s3"), SocketPath: long, Slots: 16, RESPSocket: "-", Logger: quiet()}); !errors.Is(err, ErrSocketPath) {
		t.Errorf("long socket path: %v", err)
	}
	notSock := filepath.Join(dir, "file")
	os.WriteFile(notSock, []byte("keep"), 0o600)
	if err := Run(t.Context(), Config{StatePath: filepath.Join(dir, "s4"), SocketPath: notSock, Slots: 16, RESPSocket: "-", Logger: quiet()}); !errors.Is(err, ErrSocketPath) {
		t.Errorf("socket path that is a regular file: %v", err)
	}
	if b, _ := os.ReadFile(notSock); !bytes.Equal(b, []byte("keep")) {
		t.Errorf("regular file at the socket path was touched")
	}
}

// Ensure AT (client timestamps) drives time for the request.
func TestServer_clientTime(t *testing.T) {
	sc := start(t, Config{})
	c := dial(t, sc)
	l := proto.TokenBucketLimit(2, time.Minute, 2)
	at := int64(1_000_000_000_000)
	for i, want := range []int64{1, 0} {
		if r := c.acquire("k", l, 1, at); r.Decision.Remaining != want {
			t.Errorf("step %d: %+v", i, r.Decision)
		}
	}
	if r := c.acquire("k", l, 1, at+int64(time.Minute)); !r.Decision.Allowed || r.Decision.Remaining != 1 {
		t.Errorf("a minute later in client time: %+v", r.Decision)
	}
}

// Ensure a batch of SCANs never makes a response frame larger than
// MaxFrameLen: each SCAN returns what fits, with a cursor to resume from.
func TestServer_scanBudget(t *testing.T) {
	sc := start(t, Config{Slots: 20000, SlotSize: 256})
	c := dial(t, sc)
	key := func(i int) []byte { return []byte(fmt.Sprintf("%0190d", i)) } // 190-byte keys
	const keys = 9000
	for i := 0; i < keys; i += 100 {
		c.send(100, func(b []byte) []byte {
			for j := i; j < i+100; j++ {
				b = proto.AppendItem(b, proto.OpAcquire, 0, tb10, 1, 0, key(j))
			}
			return b
		})
		c.recv()
	}
	// 8 scans of up to 1000 entries of ~200 bytes: 1.6 MB if unbounded.
	c.send(8, func(b []byte) []byte {
		for range 8 {
			b = proto.AppendScan(b, 0, 1000, nil)
		}
		return b
	})
	h, rs := c.recv()
	if h.Length > proto.MaxFrameLen {
		t.Fatalf("response frame of %d bytes", h.Length)
	}
	seen := 0
	for _, r := range rs {
		if r.Status != proto.StatusOK && r.Status != proto.StatusMalformed {
			t.Errorf("scan status %v %s", r.Status, r.Message)
		}
		seen += r.NEntries
	}
	if seen == 0 {
		t.Errorf("no entries returned")
	}
	// Paging with one SCAN per frame visits every bucket exactly once.
	got := map[string]int{}
	for cursor := uint64(0); ; {
		r := c.do(func(b []byte) []byte { return proto.AppendScan(b, cursor, 1000, nil) })
		if r.Status != proto.StatusOK {
			t.Fatalf("scan: %v %s", r.Status, r.Message)
		}
		for e := r.Entries; len(e) > 0; {
			_, _, k, rest, err := proto.NextScanEntry(e)
			if err != nil {
				t.Fatal(err)
			}
			got[string(k)]++
			e = rest
		}
		if cursor = r.Next; cursor == 0 {
			break
		}
	}
	if len(got) != keys {
		t.Errorf("paged scan saw %d buckets, want %d", len(got), keys)
	}
	for k, n := range got {
		if n != 1 {
			t.Fatalf("%s seen %d times", k, n)
		}
	}
}

// Ensure that serving a request allocates nothing, on the native and the
// Redis protocol (the whole process is counted: client and server).
func TestServer_noAllocs(t *testing.T) {
	sc := start(t, Config{Now: func() int64 { return 1_700_000_000 * 1e9 }})
	c := dial(t, sc)
	req := frameOf(1, proto.AppendItem(nil, proto.OpAcquire, 0, proto.GCRALimit(1e9, 1e9, time.Second), 1, 0, []byte("user:1")))
	resp := make([]byte, 12+2+41)
	roundTrip := func(conn net.Conn, req, resp []byte) {
		if _, err := conn.Write(req); err != nil {
			t.Fatal(err)
		}
		for n := 0; n < len(resp); {
			m, err := conn.Read(resp[n:])
			if err != nil {
				t.Fatal(err)
			}
			n += m
		}
	}
	roundTrip(c.c, req, resp) // warm the connection's buffers and limit cache
	if n := testing.AllocsPerRun(200, func() { roundTrip(c.c, req, resp) }); n > 0.05 {
		t.Errorf("native acquire: %v allocs per request", n)
	}
	rc, err := net.Dial("unix", sc.cfg.RESPSocket)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	cmd := []byte("*4\r\n$9\r\nRL.REDUCE\r\n$1\r\nk\r\n$10\r\n1000000000\r\n$2\r\n60\r\n")
	reply := make([]byte, len(":1000000000\r\n"))
	roundTrip(rc, cmd, reply)
	if n := testing.AllocsPerRun(200, func() { roundTrip(rc, cmd, reply[:len(":999999999\r\n")]) }); n > 0.05 {
		t.Errorf("RL.REDUCE: %v allocs per request", n)
	}
}

// Ensure that a request on a named limit allocates nothing either: finding
// the config's compiled limits is a load and a comparison.
func TestServer_noAllocsNamed(t *testing.T) {
	set, err := config.Parse("sluice.yaml", []byte("limits:\n  api: {limit: \"gcra:burst=1000000000,count=1000000000,period=1s\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	sc := start(t, Config{Now: func() int64 { return 1_700_000_000 * 1e9 }, Limits: config.NewHolder(set)})
	c := dial(t, sc)
	req := frameOf(1, proto.AppendItem(nil, proto.OpAcquire, 0, proto.Named("api"), 1, 0, []byte("user:1")))
	c.c.Write(req)
	c.recv() // warm the connection's buffers
	buf := make([]byte, 0, 256)
	if n := testing.AllocsPerRun(200, func() {
		if _, err := c.c.Write(req); err != nil {
			t.Fatal(err)
		}
		buf = buf[:0]
		for {
			frame, _, _, err := proto.SplitFrame(buf)
			if err != nil {
				t.Fatal(err)
			}
			if frame != nil {
				return
			}
			m, err := c.c.Read(buf[len(buf):cap(buf)])
			if err != nil {
				t.Fatal(err)
			}
			buf = buf[:len(buf)+m]
		}
	}); n > 0.05 {
		t.Errorf("native acquire by name: %v allocs per request", n)
	}
}

// Ensure a stopping sidecar removes its socket file only if it is still the
// one it bound: a socket another process has put at the path since stays.
func TestServer_stopKeepsAReplacedSocket(t *testing.T) {
	sc := start(t, Config{RESPSocket: "-"})
	if err := os.Remove(sc.cfg.SocketPath); err != nil {
		t.Fatal(err)
	}
	other, err := net.Listen("unix", sc.cfg.SocketPath)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	sc.stop(t)
	if _, err := os.Lstat(sc.cfg.SocketPath); err != nil {
		t.Fatalf("the replacement socket was removed: %v", err)
	}
	c, err := net.Dial("unix", sc.cfg.SocketPath)
	if err != nil {
		t.Fatalf("the replacement socket does not answer: %v", err)
	}
	c.Close()
}

// Ensure a clean stop leaves the state file and nothing else: the sockets
// and their instance locks are gone (the *.sock.lock files stayed), and a
// server started afterwards on the same sockets takes them again.
func TestServer_stopLeavesOnlyTheState(t *testing.T) {
	dir := shortDir(t)
	cfg := Config{StatePath: filepath.Join(dir, "state"), SocketPath: filepath.Join(dir, "sock"),
		RESPSocket: filepath.Join(dir, "resp.sock")}
	for range 2 {
		sc := start(t, cfg)
		if r := dial(t, sc).do(proto.AppendPing); r.Status != proto.StatusOK {
			t.Fatalf("ping: %+v", r)
		}
		sc.stop(t)
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		if len(names) != 1 || names[0] != "state" {
			t.Errorf("after a clean stop the directory holds %v, want only the state file", names)
		}
	}
}
