package server

import (
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/proto"
)

// The environment of a test binary run as another user (asUser): it sends
// each frame of peerFramesEnv (hex, comma-separated) on one connection to
// peerSockEnv, and prints each response frame in hex, one a line.
const (
	peerSockEnv   = "SLUICE_TEST_PEER_SOCK"
	peerFramesEnv = "SLUICE_TEST_PEER_FRAMES"
)

// peerChild is the other user's side, run from TestMain.
func peerChild() (code int, ok bool) {
	sock := os.Getenv(peerSockEnv)
	if sock == "" {
		return 0, false
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1, true
	}
	defer c.Close()
	var buf []byte
	for _, f := range strings.Split(os.Getenv(peerFramesEnv), ",") {
		b, err := hex.DecodeString(f)
		if err == nil {
			_, err = c.Write(b)
		}
		for err == nil {
			var frame, rest []byte
			if frame, rest, _, err = proto.SplitFrame(buf); frame != nil {
				fmt.Println(hex.EncodeToString(frame))
				buf = append([]byte(nil), rest...)
				break
			}
			tmp := make([]byte, 4096)
			var n int
			n, err = c.Read(tmp)
			buf = append(buf, tmp[:n]...)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1, true
		}
	}
	return 0, true
}

// nobody is the uid and gid the other user runs as.
const nobody = 65534

// asUser sends one frame per op to sc as the user nobody, from a copy of
// the test binary, and returns the first result of each response. The
// server's socket must let that user in.
func asUser(t *testing.T, sc *sidecar, ops ...func(b []byte) []byte) []proto.Result {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("running as another user needs root")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := shortDir(t)
	os.Chmod(dir, 0o755) // the other user runs the binary from here
	bin := filepath.Join(dir, "peer.test")
	src, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := os.OpenFile(bin, os.O_WRONLY|os.O_CREATE, 0o755)
	if err == nil {
		_, err = io.Copy(dst, src)
		dst.Close()
	}
	src.Close()
	if err != nil {
		t.Fatal(err)
	}
	var frames []string
	for i, op := range ops {
		b, start := proto.BeginFrameVersion(nil, proto.Version, proto.KindRequest, uint32(i+1))
		frames = append(frames, hex.EncodeToString(proto.EndFrame(op(b), start, 1)))
	}
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), peerSockEnv+"="+sc.cfg.SocketPath, peerFramesEnv+"="+strings.Join(frames, ","))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the other user's process: %v\n%s", err, stderr.String())
	}
	var rs []proto.Result
	for _, line := range strings.Fields(string(out)) {
		frame, err := hex.DecodeString(line)
		if err != nil {
			t.Fatal(err)
		}
		var r proto.Result
		if _, err := proto.DecodeResult(frame[proto.HeaderLen:], &r); err != nil {
			t.Fatal(err)
		}
		r.Message = append([]byte(nil), r.Message...)
		rs = append(rs, r)
	}
	if len(rs) != len(ops) {
		t.Fatalf("%d results for %d requests", len(rs), len(ops))
	}
	return rs
}

// leaseOps are the LEASE, RELEASE and PEEK of one key under one limit.
type leaseOps struct {
	l   proto.Limit
	key []byte
}

func (k leaseOps) lease(b []byte) []byte { return proto.AppendLease(b, 0, k.l, k.key) }

func (k leaseOps) release(id uint64) func(b []byte) []byte {
	return func(b []byte) []byte { return proto.AppendRelease(b, 0, k.l, id, k.key) }
}

func (k leaseOps) peek(b []byte) []byte {
	return proto.AppendItem(b, proto.OpPeek, 0, k.l, 0, 0, k.key)
}

// Ensure lease ids tell nothing of one another: a connection holding a
// lease cannot release others' by trying the ids around its own (with
// sequential ids, a second connection released two leases of a limit of 3
// by trying id-1 and id-2, then took two more: 5 holders); at no point are
// more leases held than the limit.
func TestServer_leaseIDsUnguessable(t *testing.T) {
	sc := start(t, Config{})
	jobs := leaseOps{proto.ConcurrencyLimit(3, 30*time.Second), []byte("jobs")}
	victim, attacker := dial(t, sc), dial(t, sc)
	var held []uint64
	for _, c := range []*client{victim, victim, attacker} {
		r := c.do(jobs.lease)
		if r.Status != proto.StatusOK || !r.Decision.Allowed {
			t.Fatalf("lease: %+v", r)
		}
		held = append(held, r.Lease)
	}
	own := held[2]
	for d := uint64(1); d <= 2000; d++ {
		for _, guess := range []uint64{own - d, own + d, d} {
			if guess == own {
				continue
			}
			if r := attacker.do(jobs.release(guess)); r.Status != proto.StatusOK || r.Released {
				t.Fatalf("the attacker's guess %d (its own lease %d%+d) released a lease: %+v", guess, own, int64(guess-own), r)
			}
		}
	}
	for range 2 {
		if r := attacker.do(jobs.lease); r.Decision.Allowed {
			t.Fatalf("a lease beyond the limit of 3 was granted: %+v", r)
		}
	}
	if r := victim.do(jobs.peek); r.Decision.Remaining != 0 {
		t.Fatalf("after the attack: %+v, want every slot held by its holder", r)
	}
	for _, id := range held[:2] {
		if r := victim.do(jobs.release(id)); !r.Released {
			t.Fatalf("the victim could not release its lease %d: %+v", id, r)
		}
	}

	// Ids drawn one after another, on one connection and on two, are far
	// apart: 2^40 is a chance of 2^-23 per pair for random ids, and a
	// certainty for a counter.
	ids := map[uint64]bool{}
	var last uint64
	for i := range 500 {
		c := victim
		if i%3 == 0 {
			c = attacker
		}
		r := c.do(jobs.lease)
		if !r.Decision.Allowed || r.Lease == 0 || ids[r.Lease] {
			t.Fatalf("lease %d: %+v (seen: %v)", i, r, ids[r.Lease])
		}
		if diff := r.Lease - last; i > 0 && (diff < 1<<40 || -diff < 1<<40) {
			t.Fatalf("lease %d: id %d is %d from the one before", i, r.Lease, int64(diff))
		}
		ids[r.Lease], last = true, r.Lease
		if r := c.do(jobs.release(r.Lease)); !r.Released {
			t.Fatalf("release %d: %+v", i, r)
		}
	}
}

// Ensure a lease is released only by its connection or a process of the
// same user: another user, even knowing its id, is refused with Denied and
// the slot stays held, so it cannot take more than the limit either; a
// process of the holder's user releases it (as sluice release does); an id
// no connection holds is not held, for anyone.
func TestServer_leaseReleaseByAnotherUser(t *testing.T) {
	sc := start(t, Config{SocketMode: 0o666})
	os.Chmod(filepath.Dir(sc.cfg.SocketPath), 0o711) // let the other user reach the socket
	jobs := leaseOps{proto.ConcurrencyLimit(2, 30*time.Second), []byte("jobs")}
	holder := dial(t, sc)
	a, b := holder.do(jobs.lease), holder.do(jobs.lease)
	if !a.Decision.Allowed || !b.Decision.Allowed {
		t.Fatalf("leases: %+v %+v", a, b)
	}
	rs := asUser(t, sc, jobs.release(a.Lease), jobs.lease, jobs.release(a.Lease^1), jobs.peek)
	if r := rs[0]; r.Status != proto.StatusDenied || !strings.Contains(string(r.Message), "held by another user's connection") {
		t.Errorf("another user's release of a held lease: %+v, want Denied", r)
	}
	if r := rs[1]; r.Status != proto.StatusOK || r.Decision.Allowed {
		t.Errorf("another user's lease beyond the limit: %+v, want denied", r)
	}
	if r := rs[2]; r.Status != proto.StatusOK || r.Released {
		t.Errorf("another user's release of an id no one holds: %+v, want not held", r)
	}
	if r := rs[3]; r.Decision.Remaining != 0 {
		t.Errorf("after another user's release: %+v, want both slots held", r)
	}
	same := dial(t, sc) // another process of the holder's user
	if r := same.do(jobs.release(a.Lease)); r.Status != proto.StatusOK || !r.Released || r.Decision.Remaining != 1 {
		t.Errorf("the holder's user's release from another connection: %+v", r)
	}
	if r := holder.do(jobs.release(b.Lease)); !r.Released || r.Decision.Remaining != 2 {
		t.Errorf("the holder's own release: %+v", r)
	}
}
