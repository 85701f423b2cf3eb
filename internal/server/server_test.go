package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/shm"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Ensure that Run creates the state file, syncs it on every interval, and on
// cancellation closes it cleanly: it reopens without a scan and with the
// syncs counted.
func TestRun_lifecycle(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "state")
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() {
			done <- Run(ctx, Config{StatePath: path, Slots: 1000, SyncInterval: time.Second, Logger: quiet()})
		}()
		time.Sleep(3500 * time.Millisecond)
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
	})
	tb, err := shm.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	if st := tb.Stats(); st.Syncs != 3 || st.Torn != 0 {
		t.Errorf("after 3.5 intervals: %+v, want 3 syncs and no repairs", st)
	}
	if g := tb.Geometry(); g.SlotCount != 1000 || g.SlotSize != 64 {
		t.Errorf("geometry %+v", g)
	}
}

// Ensure that a configured geometry that differs from the file's is an error,
// and that an unconfigured one takes the file's.
func TestRun_geometryMismatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state")
	tb, err := shm.Create(path, shm.Options{SlotCount: 100})
	if err != nil {
		t.Fatal(err)
	}
	tb.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Run(ctx, Config{StatePath: path, Slots: 200, Logger: quiet()}); !errors.Is(err, ErrGeometryMismatch) {
		t.Errorf("Run with other geometry: %v", err)
	}
	if err := Run(ctx, Config{StatePath: path, Logger: quiet()}); err != nil {
		t.Errorf("Run with the file's geometry: %v", err)
	}
}

// Ensure that a second instance on the same state file is refused.
func TestRun_secondInstance(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state")
	tb, err := shm.Create(path, shm.Options{SlotCount: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	if err := Run(context.Background(), Config{StatePath: path, Logger: quiet()}); !errors.Is(err, shm.ErrLocked) {
		t.Errorf("second instance: %v, want ErrLocked", err)
	}
}
