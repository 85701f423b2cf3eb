package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// SentinelMaster is the master name the Sentinel of StartSentinel monitors.
const SentinelMaster = "sluice"

// Sentinel is a Redis master with one replica, watched by one Sentinel
// (quorum 1, down-after 500 ms), all on loopback TCP ports.
type Sentinel struct {
	Master, Replica *Server
	// Sentinel is the Sentinel process; its Addr is what a client is given
	// with MasterName SentinelMaster.
	Sentinel *Server
}

// StartSentinel starts a master, its replica and a Sentinel watching them,
// and waits until the replica is in sync and the Sentinel knows both.
// Every process is killed at cleanup.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	bin := lookPath(t, "redis-server")
	ports := freePorts(t, 3)
	tcp := func(port int, extra ...string) *Server {
		dir := tempDir(t)
		s := &Server{Network: "tcp", Addr: "127.0.0.1:" + strconv.Itoa(port), Dir: dir}
		s.args = append(baseArgs(dir), "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--repl-diskless-sync-delay", "0")
		s.args = append(s.args, extra...)
		if err := s.startErr(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.kill)
		return s
	}
	st := &Sentinel{}
	st.Master = tcp(ports[0])
	st.Replica = tcp(ports[1], "--replicaof", "127.0.0.1", strconv.Itoa(ports[0]))

	// A Sentinel rewrites its configuration file: it needs one of its own.
	dir := tempDir(t)
	conf := filepath.Join(dir, "sentinel.conf")
	text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nlogfile %s\n"+
		"sentinel monitor %s 127.0.0.1 %d 1\n"+
		"sentinel down-after-milliseconds %s 500\n"+
		"sentinel failover-timeout %s 2000\n",
		ports[2], dir, filepath.Join(dir, "redis.log"), SentinelMaster, ports[0], SentinelMaster, SentinelMaster)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &Server{Network: "tcp", Addr: "127.0.0.1:" + strconv.Itoa(ports[2]), Dir: dir}
	cmd := exec.Command(bin, conf, "--sentinel")
	cmd.Dir = dir
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func(done chan struct{}) { cmd.Wait(); close(done) }(s.done)
	t.Cleanup(s.kill)
	if err := s.waitReady(); err != nil {
		t.Fatalf("the Sentinel did not start: %v\n%s", err, s.Log())
	}
	st.Sentinel = s
	if err := st.wait(func(ctx context.Context) error {
		rep, err := st.Replica.info(ctx, "replication")
		if err != nil || rep["master_link_status"] != "up" {
			return fmt.Errorf("replica link %q (%v)", rep["master_link_status"], err)
		}
		c := s.client()
		defer c.Close()
		replicas, err := c.Do(ctx, "SENTINEL", "REPLICAS", SentinelMaster).Slice()
		if err != nil || len(replicas) != 1 {
			return fmt.Errorf("the Sentinel knows %d replicas (%v)", len(replicas), err)
		}
		return nil
	}); err != nil {
		t.Fatalf("the Sentinel setup did not settle: %v\n%s", err, s.Log())
	}
	return st
}

// MasterAddr returns the master's address as the Sentinel reports it.
func (st *Sentinel) MasterAddr(ctx context.Context) (string, error) {
	c := st.Sentinel.client()
	defer c.Close()
	a, err := c.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SentinelMaster).StringSlice()
	if err != nil || len(a) != 2 {
		return "", fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME: %v %v", a, err)
	}
	return a[0] + ":" + a[1], nil
}

// KillMasterAndWait kills the master with SIGKILL and waits until the
// Sentinel has promoted the replica. It returns how long that took.
func (st *Sentinel) KillMasterAndWait(t testing.TB) time.Duration {
	t.Helper()
	start := time.Now()
	st.Master.Kill()
	if err := st.wait(func(ctx context.Context) error {
		addr, err := st.MasterAddr(ctx)
		if err != nil || addr != st.Replica.Addr {
			return fmt.Errorf("master %s (%v)", addr, err)
		}
		rep, err := st.Replica.info(ctx, "replication")
		if err != nil || rep["role"] != "master" {
			return fmt.Errorf("replica's role %q (%v)", rep["role"], err)
		}
		return nil
	}); err != nil {
		t.Fatalf("the Sentinel did not promote the replica: %v\n%s", err, st.Sentinel.Log())
	}
	return time.Since(start)
}

// wait polls check until it returns nil or clusterTimeout passes.
func (st *Sentinel) wait(check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	var last error
	for ctx.Err() == nil {
		if last = check(ctx); last == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return last
}
