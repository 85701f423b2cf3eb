package compare

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A process is a server the benchmark starts and stops itself.
type process struct {
	name   string
	cmd    *exec.Cmd
	stderr bytes.Buffer
	done   chan struct{}
	err    error // Wait's result, once done is closed
}

// startProcess runs argv, its output kept for error messages, and waits up
// to 10 s for ready to succeed.
func startProcess(ctx context.Context, name string, argv []string, ready func() error) (*process, error) {
	p := &process{name: name, done: make(chan struct{})}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Stdout = &p.stderr
	p.cmd.Stderr = &p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the benchmark
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := ready()
		if err == nil {
			return p, nil
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("%s exited before it was ready (%v): %s", name, p.err, strings.TrimSpace(p.stderr.String()))
		case <-ctx.Done():
			p.stop()
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("%s not ready after 10s: %v: %s", name, err, strings.TrimSpace(p.stderr.String()))
		}
	}
}

// stop asks the process to end (SIGTERM) and kills it after 10 s.
func (p *process) stop() error {
	if p == nil {
		return nil
	}
	select {
	case <-p.done:
		return nil
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
	var ee *exec.ExitError
	if p.err != nil && !errors.As(p.err, &ee) {
		return fmt.Errorf("%s: %w", p.name, p.err)
	}
	return nil
}

// dialable reports whether a Unix or TCP listener answers.
func dialable(network, addr string) func() error {
	return func() error {
		c, err := net.DialTimeout(network, addr, time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	}
}

// freeLoopbackPort returns a TCP port on 127.0.0.1 that was free a moment
// ago.
func freeLoopbackPort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// sluiced runs the sidecar on a private state file and sockets.
type sluiced struct {
	bin, dir  string
	slots     uint64
	transport string // --transport, or "" for the default
	proc      *process
}

func (s *sluiced) statePath() string  { return filepath.Join(s.dir, "sluice.state") }
func (s *sluiced) socketPath() string { return filepath.Join(s.dir, "sluice.sock") }
func (s *sluiced) respPath() string   { return filepath.Join(s.dir, "sluice-resp.sock") }

// restart stops the sidecar, removes its state file and starts it again:
// the next cell starts from an empty table.
func (s *sluiced) restart(ctx context.Context) error {
	if err := s.proc.stop(); err != nil {
		return err
	}
	s.proc = nil
	if err := os.Remove(s.statePath()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	args := []string{s.bin,
		"--state", s.statePath(), "--socket", s.socketPath(), "--resp-socket", s.respPath(),
		"--slots", strconv.FormatUint(s.slots, 10), "--socket-mode", "0600",
	}
	if s.transport != "" {
		args = append(args, "--transport", s.transport)
	}
	p, err := startProcess(ctx, "sluiced", args, func() error {
		if err := dialable("unix", s.socketPath())(); err != nil {
			return err
		}
		return dialable("unix", s.respPath())()
	})
	s.proc = p
	return err
}

func (s *sluiced) close() error { err := s.proc.stop(); s.proc = nil; return err }

// redisServer runs Debian's redis-server on a private Unix socket and a
// loopback port, persistence off.
type redisServer struct {
	bin, dir string
	port     int
	proc     *process
	version  string
}

func (r *redisServer) socketPath() string { return filepath.Join(r.dir, "redis.sock") }
func (r *redisServer) tcpAddr() string    { return "127.0.0.1:" + strconv.Itoa(r.port) }

func (r *redisServer) start(ctx context.Context) error {
	port, err := freeLoopbackPort()
	if err != nil {
		return err
	}
	r.port = port
	out, err := exec.Command(r.bin, "--version").Output()
	if err != nil {
		return fmt.Errorf("%s --version: %w", r.bin, err)
	}
	r.version = strings.TrimSpace(string(out))
	r.proc, err = startProcess(ctx, "redis-server", []string{r.bin,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--unixsocket", r.socketPath(), "--unixsocketperm", "700",
		"--save", "", "--appendonly", "no", "--daemonize", "no",
		"--dir", r.dir, "--logfile", "", "--loglevel", "warning",
	}, func() error {
		if err := dialable("unix", r.socketPath())(); err != nil {
			return err
		}
		return dialable("tcp", r.tcpAddr())()
	})
	return err
}

func (r *redisServer) close() error { err := r.proc.stop(); r.proc = nil; return err }
