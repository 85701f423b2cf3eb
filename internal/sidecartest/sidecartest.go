// Package sidecartest holds what the tests of several packages need to run
// a sidecar: a directory short enough for socket paths, a server run on a
// goroutine from the moment it is ready until it is stopped, and the test
// binary run again as a sidecar in a process of its own (to kill it).
//
// It imports the standard library only, so that the tests of
// internal/server can use it as well as those of the packages above it.
package sidecartest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// ShortDir returns a new directory under the system's temporary one,
// removed at the end of the test: a short path, as socket paths are limited
// to 108 bytes (sun_path) and t.TempDir's can be longer.
func ShortDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// StopTimeout bounds how long Stop waits for a server to return.
const StopTimeout = 10 * time.Second

// Server is a server run on a goroutine.
type Server struct {
	cancel context.CancelFunc
	done   chan error
}

// Start calls run on a goroutine with a context that Stop cancels and a
// function it must call once it serves (server.Config.Ready), and returns
// when it has; if run returns first, Start returns its error.
func Start(run func(ctx context.Context, ready func()) error) (*Server, error) {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{cancel: cancel, done: make(chan error, 1)}
	ready := make(chan struct{})
	go func() { s.done <- run(ctx, func() { close(ready) }) }()
	select {
	case <-ready:
		return s, nil
	case err := <-s.done:
		cancel()
		return nil, fmt.Errorf("sidecar did not start: %w", err)
	}
}

// Stop cancels the server's context and waits for it to return (Wait).
func (s *Server) Stop() error {
	s.Cancel()
	return s.Wait()
}

// Cancel cancels the server's context: it begins to stop.
func (s *Server) Cancel() { s.cancel() }

// Wait returns what run returned, or an error if it has not returned
// within StopTimeout. Once it has returned, Wait returns nil.
func (s *Server) Wait() error {
	if s.done == nil {
		return nil
	}
	select {
	case err := <-s.done:
		s.done = nil
		return err
	case <-time.After(StopTimeout):
		return errors.New("sidecar did not stop")
	}
}

// childEnv names the directory that a test binary run by StartChild
// serves.
const childEnv = "SLUICE_SIDECARTEST_SERVE"

// StartTimeout bounds how long StartChild waits for the child's socket.
const StartTimeout = 20 * time.Second

// Child runs the sidecar when this process is one that StartChild started:
// it calls serve with the directory to serve and a context that SIGTERM
// ends, and returns the process's exit status and true. A package whose
// tests call StartChild calls Child first thing in its TestMain.
func Child(serve func(ctx context.Context, dir string) error) (int, bool) {
	dir := os.Getenv(childEnv)
	if dir == "" {
		return 0, false
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1, true
	}
	return 0, true
}

// StartChild runs this test binary again as a sidecar serving dir (see
// Child), with env added to its environment, and returns it once
// dir/sock accepts connections. It is killed when the test ends, if it
// still runs.
func StartChild(t testing.TB, dir string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childEnv+"="+dir), env...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sock := filepath.Join(dir, "sock")
	for deadline := time.Now().Add(StartTimeout); ; time.Sleep(2 * time.Millisecond) {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return cmd
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("the sidecar process did not start")
		}
	}
}
