package sidecartest

import (
	"context"
	"errors"
	"testing"
)

// Ensure Start returns once run is ready, or run's error if it returns
// first, and Stop cancels run and returns what it returned, once.
func TestStartStop(t *testing.T) {
	bad := errors.New("no socket")
	if _, err := Start(func(context.Context, func()) error { return bad }); !errors.Is(err, bad) {
		t.Errorf("Start of a run that fails: %v", err)
	}
	done := errors.New("stopped")
	s, err := Start(func(ctx context.Context, ready func()) error {
		ready()
		<-ctx.Done()
		return done
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); !errors.Is(err, done) {
		t.Errorf("Stop: %v", err)
	}
	if err := s.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if dir := ShortDir(t); len(dir) > 64 {
		t.Errorf("ShortDir: %q", dir)
	}
}
