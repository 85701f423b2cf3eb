// Package redistest starts real Redis servers for tests: a single
// redis-server on a Unix socket, and a Redis Cluster of three masters with
// one replica each on loopback TCP ports. Every server runs in its own
// temporary directory without persistence and is killed when the test ends
// (t.Cleanup).
//
// The tests that use it need redis-server and redis-cli on PATH (Debian:
// redis-server and redis-tools); without them Start and StartCluster fail
// the test with a message saying what to install, rather than skip it.
//
// # Concurrency
//
// A Server or a Cluster belongs to the test goroutine that started it; its
// address fields may be read from any goroutine.
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/sidecartest"

	"github.com/redis/go-redis/v9"
)

// startTimeout bounds how long a server may take to accept connections.
const startTimeout = 10 * time.Second

// Server is one redis-server process.
type Server struct {
	// Network and Addr are what go-redis's Options take: "unix" and a
	// socket path for Start, "tcp" and 127.0.0.1:port for cluster nodes.
	Network, Addr string
	// Dir is the server's working directory; its log is Dir/redis.log.
	Dir string

	args []string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
}

// lookPath returns the path of a Redis binary or fails the test.
func lookPath(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not installed; the Redis tests need it (Debian: apt-get install redis-server redis-tools)", name)
	}
	return p
}

// tempDir returns a new temporary directory with a short path (a Unix
// socket path must stay under 108 bytes), removed at cleanup.
var tempDir = sidecartest.ShortDir

// baseArgs are the options every test server runs with: no persistence,
// in the foreground, logging to a file in its directory.
func baseArgs(dir string) []string {
	return []string{
		"--dir", dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--logfile", filepath.Join(dir, "redis.log"),
		"--protected-mode", "no",
	}
}

// Start starts a redis-server listening only on a Unix socket in a new
// temporary directory, with extra command-line options appended (for
// example "--requirepass", "secret"), and waits until it answers PING. The
// server is killed at cleanup.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	dir := tempDir(t)
	sock := filepath.Join(dir, "redis.sock")
	s := &Server{Network: "unix", Addr: sock, Dir: dir}
	s.args = append(baseArgs(dir), "--port", "0", "--unixsocket", sock, "--unixsocketperm", "700")
	s.args = append(s.args, extra...)
	s.start(t)
	t.Cleanup(s.kill)
	return s
}

// start runs the server with s.args and waits for it to answer.
func (s *Server) start(t testing.TB) {
	t.Helper()
	cmd := exec.Command(lookPath(t, "redis-server"), s.args...)
	cmd.Dir = s.Dir
	if err := cmd.Start(); err != nil {
		t.Fatalf("cannot start redis-server: %v", err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func(done chan struct{}) { cmd.Wait(); close(done) }(s.done)
	if err := s.waitReady(); err != nil {
		s.kill()
		t.Fatalf("redis-server at %s did not start: %v\n%s", s.Addr, err, s.Log())
	}
}

// waitReady polls PING until the server answers or startTimeout passes.
func (s *Server) waitReady() error {
	deadline := time.Now().Add(startTimeout)
	c := s.client()
	defer c.Close()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		var re redis.Error
		if err == nil || errors.As(err, &re) { // an error reply (NOAUTH) is an answer too
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("the process exited")
		default:
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// client returns a go-redis client for this server alone, with no retries.
func (s *Server) client() *redis.Client {
	return redis.NewClient(&redis.Options{
		Network: s.Network, Addr: s.Addr, MaxRetries: -1,
		// Generous: a test's own commands are not what it times, and a busy
		// machine (a load of 20) took more than a second to answer.
		DialTimeout: 30 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second,
		Protocol: 2, DisableIdentity: true,
	})
}

// Client returns a go-redis client for this server alone, closed at cleanup.
// It carries no password: a test of AUTH builds its own.
func (s *Server) Client(t testing.TB) *redis.Client {
	c := s.client()
	t.Cleanup(func() { c.Close() })
	return c
}

// Kill stops the server with SIGKILL, as a crash would, and waits for the
// process to exit. Killing a stopped server does nothing.
func (s *Server) Kill() { s.kill() }

func (s *Server) kill() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
	s.cmd = nil
}

// Pause stops the server with SIGSTOP: it keeps its connections and its
// data but answers nothing, as a server stalled by its host would, until
// Resume (SIGKILL, at cleanup, ends a paused server too).
func (s *Server) Pause() { s.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() { s.cmd.Process.Signal(syscall.SIGCONT) }

// Stall makes the server answer nothing for d, as one slow command does
// (DEBUG SLEEP), with CLIENT PAUSE d ALL: every command that arrives
// meanwhile, from any connection, waits and runs when the pause ends. It
// returns once the stall has begun (Redis has answered the pause), which
// is certain however loaded the machine, and a channel closed when the
// stall is over: Redis answers again.
func (s *Server) Stall(t testing.TB, d time.Duration) <-chan struct{} {
	t.Helper()
	c := s.client()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.Do(ctx, "CLIENT", "PAUSE", d.Milliseconds(), "ALL").Err(); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
	over := make(chan struct{})
	go func() {
		// The pause began before the reply: it ends by d from now. Redis
		// lets the waiting commands run at its next tick after that (up
		// to 100 ms later), so the stall is over when a PING is answered.
		time.Sleep(d)
		c := s.client()
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c.Ping(ctx)
		close(over)
	}()
	return over
}

// Restart starts a killed server again at the same address with the same
// options. Its data is gone: nothing is persisted.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.kill()
	if s.Network == "unix" {
		os.Remove(s.Addr)
	}
	s.start(t)
}

// Running reports whether the server's process is alive.
func (s *Server) Running() bool {
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// Log returns the server's log file, for failure messages.
func (s *Server) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
	return string(b)
}

// info returns the fields of INFO section (or CLUSTER INFO when section is
// "cluster-info") as a map.
func (s *Server) info(ctx context.Context, section string) (map[string]string, error) {
	c := s.client()
	defer c.Close()
	var text string
	var err error
	if section == "cluster-info" {
		text, err = c.ClusterInfo(ctx).Result()
	} else {
		text, err = c.Info(ctx, section).Result()
	}
	if err != nil {
		return nil, err
	}
	m := make(map[string]string)
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		if k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":"); ok {
			m[k] = v
		}
	}
	return m, nil
}

// freePorts returns n distinct loopback TCP ports that were free a moment
// ago (the listeners are closed before returning, so another process could
// take one: StartCluster retries on a failed start).
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// QuietClientLogs silences go-redis's own log lines (a refused dial to a
// server a test killed on purpose is logged once per attempt). It affects
// the whole process: call it from TestMain.
func QuietClientLogs() { redis.SetLogger(quiet{}) }

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// FreePort returns a loopback TCP port that was free a moment ago, for an
// extra listener such as --tls-port.
func FreePort(t testing.TB) int {
	t.Helper()
	return freePorts(t, 1)[0]
}
