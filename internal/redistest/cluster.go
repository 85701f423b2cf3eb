package redistest

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Cluster timing. A node is considered failed after nodeTimeout without an
// answer; its replica is then promoted within about two node timeouts. At
// 500 ms, a busy machine (a load of 16) starved nodes long enough that the
// cluster failed over masters no test had killed.
const (
	nodeTimeout    = 2 * time.Second
	clusterTimeout = 20 * time.Second // for the cluster to form, or a failover to complete
)

// Node is one cluster node.
type Node struct {
	*Server
	ID       string // the node's cluster ID
	Port     int
	MasterID string // for a replica, its master's ID; "" for a master
}

// Cluster is a Redis Cluster of three masters with one replica each, on
// loopback TCP ports, with a node timeout of 2 s and
// cluster-replica-validity-factor 0, so a replica is always promoted when
// its master dies.
type Cluster struct {
	// Nodes in creation order: Nodes[0:3] start as masters, Nodes[3:6] as
	// their replicas (redis-cli assigns them; see MasterID).
	Nodes []*Node
}

// StartCluster starts six redis-server nodes with --cluster-enabled yes,
// joins them with redis-cli --cluster create --cluster-replicas 1, and
// waits until every node reports cluster_state:ok and every replica is in
// sync with its master. Every node is killed at cleanup.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	lookPath(t, "redis-server")
	cli := lookPath(t, "redis-cli")
	var c *Cluster
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		// A port found free may be taken before the node binds it: retry.
		if c, err = startNodes(t); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("cannot start the cluster's nodes: %v", err)
	}
	args := []string{"--cluster", "create"}
	for _, n := range c.Nodes {
		args = append(args, n.Addr)
	}
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	out, err := exec.Command(cli, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	if err := c.waitOK(nil); err != nil {
		t.Fatalf("the cluster did not form: %v\n%s", err, out)
	}
	// The node whose CLUSTER NODES is read learns the replicas by gossip:
	// on a busy machine it may list one as a master still.
	c.waitTopology(t, func() bool { return len(c.Masters()) == 3 }, "the cluster's topology does not show 3 masters and their replicas")
	return c
}

// startNodes starts the six nodes on fresh ports.
func startNodes(t testing.TB) (*Cluster, error) {
	ports := freePorts(t, 12) // a client port and a cluster bus port each
	c := &Cluster{}
	for i := range 6 {
		dir := tempDir(t)
		s := &Server{Network: "tcp", Addr: "127.0.0.1:" + strconv.Itoa(ports[i]), Dir: dir}
		s.args = append(baseArgs(dir),
			"--bind", "127.0.0.1",
			"--port", strconv.Itoa(ports[i]),
			"--cluster-enabled", "yes",
			"--cluster-port", strconv.Itoa(ports[6+i]),
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.Itoa(int(nodeTimeout/time.Millisecond)),
			"--cluster-replica-validity-factor", "0",
			// A replica's first sync starts at once, not after the
			// default 5 s wait for more replicas.
			"--repl-diskless-sync-delay", "0",
		)
		if err := s.startErr(); err != nil {
			for _, n := range c.Nodes {
				n.kill()
			}
			return nil, err
		}
		t.Cleanup(s.kill)
		c.Nodes = append(c.Nodes, &Node{Server: s, Port: ports[i]})
	}
	return c, nil
}

// startErr is start returning an error instead of failing the test.
func (s *Server) startErr() error {
	cmd := exec.Command("redis-server", s.args...)
	cmd.Dir = s.Dir
	if err := cmd.Start(); err != nil {
		return err
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func(done chan struct{}) { cmd.Wait(); close(done) }(s.done)
	if err := s.waitReady(); err != nil {
		s.kill()
		return fmt.Errorf("%s: %v\n%s", s.Addr, err, s.Log())
	}
	return nil
}

// Addrs returns every node's address, masters first: the seeds a Cluster
// client is given.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr
	}
	return addrs
}

// Masters returns the nodes that are masters now, as last read.
func (c *Cluster) Masters() []*Node {
	var ms []*Node
	for _, n := range c.Nodes {
		if n.MasterID == "" && n.Running() {
			ms = append(ms, n)
		}
	}
	return ms
}

// ReplicaOf returns the replica of master m, or nil.
func (c *Cluster) ReplicaOf(m *Node) *Node {
	for _, n := range c.Nodes {
		if n.MasterID == m.ID {
			return n
		}
	}
	return nil
}

// KillMaster kills master m with SIGKILL and returns its replica, which the
// cluster will promote (see WaitFailover).
func (c *Cluster) KillMaster(t testing.TB, m *Node) *Node {
	t.Helper()
	// A replica joins by gossip a moment after it is told to: on a loaded
	// machine the topology read at start may not list it yet.
	c.waitTopology(t, func() bool { return c.ReplicaOf(m) != nil }, "node "+m.Addr+" has no replica")
	r := c.ReplicaOf(m)
	m.Kill()
	return r
}

// WaitFailover waits until replica r has been promoted to master and every
// running node reports cluster_state:ok again, then rereads the topology
// (the killed master is left out: it is no longer anyone's master). It
// returns how long it waited.
func (c *Cluster) WaitFailover(t testing.TB, r *Node) time.Duration {
	t.Helper()
	start := time.Now()
	if err := c.waitOK(r); err != nil {
		t.Fatalf("replica %s was not promoted: %v", r.Addr, err)
	}
	c.waitTopology(t, func() bool { return r.MasterID == "" }, "replica "+r.Addr+" is still listed as a replica")
	return time.Since(start)
}

// waitTopology rereads the topology until ok reports true: the nodes learn
// a change of role by gossip, a moment after the node itself.
func (c *Cluster) waitTopology(t testing.TB, ok func() bool, failure string) {
	t.Helper()
	deadline := time.Now().Add(clusterTimeout)
	for {
		if err := c.readTopology(); err != nil {
			t.Fatal(err)
		}
		if ok() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(failure)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Rejoin restarts a killed node with its cluster configuration: it
// rejoins the cluster as a replica of the master that replaced it. Rejoin
// waits until the cluster is ok and its link to that master is up, and
// rereads the topology.
func (c *Cluster) Rejoin(t testing.TB, n *Node) {
	t.Helper()
	if err := n.startErr(); err != nil {
		t.Fatalf("cannot restart node %s: %v", n.Addr, err)
	}
	// It starts as the master its nodes.conf remembers, then learns
	// from the cluster that its replica took over and follows it.
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	for {
		rep, err := n.info(ctx, "replication")
		if err == nil && rep["role"] == "slave" && rep["master_link_status"] == "up" {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("node %s did not rejoin as a replica: %v %v", n.Addr, rep, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := c.waitOK(nil); err != nil {
		t.Fatalf("node %s did not rejoin: %v", n.Addr, err)
	}
	c.waitTopology(t, func() bool { return n.MasterID != "" }, "node "+n.Addr+" is still listed as a master")
}

// waitOK waits until every running node reports cluster_state:ok with all
// 16384 slots served and, if promoted is not nil, that node is a master;
// and until every running replica's link to its master is up.
func (c *Cluster) waitOK(promoted *Node) error {
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	var last error
	for ctx.Err() == nil {
		if last = c.checkOK(ctx, promoted); last == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("after %v: %v", clusterTimeout, last)
}

func (c *Cluster) checkOK(ctx context.Context, promoted *Node) error {
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		ci, err := n.info(ctx, "cluster-info")
		if err != nil {
			return fmt.Errorf("%s: %v", n.Addr, err)
		}
		if ci["cluster_state"] != "ok" || ci["cluster_slots_ok"] != "16384" {
			return fmt.Errorf("%s: cluster_state %s, %s slots ok", n.Addr, ci["cluster_state"], ci["cluster_slots_ok"])
		}
		rep, err := n.info(ctx, "replication")
		if err != nil {
			return fmt.Errorf("%s: %v", n.Addr, err)
		}
		if n == promoted && rep["role"] != "master" {
			return fmt.Errorf("%s: role %s", n.Addr, rep["role"])
		}
		if rep["role"] == "slave" && rep["master_link_status"] != "up" {
			return fmt.Errorf("%s: link to its master %s", n.Addr, rep["master_link_status"])
		}
	}
	return nil
}

// readTopology reads CLUSTER NODES from a running node and sets every
// node's ID and MasterID.
func (c *Cluster) readTopology() error {
	var text string
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		cl := n.client()
		var err error
		text, err = cl.ClusterNodes(context.Background()).Result()
		cl.Close()
		if err != nil {
			return fmt.Errorf("CLUSTER NODES at %s: %v", n.Addr, err)
		}
		break
	}
	byPort := make(map[string]*Node)
	for _, n := range c.Nodes {
		byPort[strconv.Itoa(n.Port)] = n
	}
	for _, line := range bytes.Split([]byte(text), []byte("\n")) {
		f := strings.Fields(string(line))
		if len(f) < 4 {
			continue
		}
		// <id> <ip:port@cport> <flags> <master> ...
		hostport, _, _ := strings.Cut(f[1], "@")
		_, port, _ := strings.Cut(hostport, ":")
		n := byPort[port]
		if n == nil {
			return fmt.Errorf("CLUSTER NODES lists an unknown node %s", f[1])
		}
		n.ID = f[0]
		n.MasterID = ""
		if strings.Contains(f[2], "slave") && f[3] != "-" {
			n.MasterID = f[3]
		}
	}
	return nil
}
