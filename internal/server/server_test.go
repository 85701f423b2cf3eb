package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice/proto"
	"github.com/sluicehq/sluice/shm"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Ensure that Run creates the state file with the configured geometry and
// on shutdown closes it cleanly: it reopens without a scan.
func TestRun_lifecycle(t *testing.T) {
	sc := start(t, Config{Slots: 1000, SlotSize: 64})
	if r := dial(t, sc).acquire("k", tb10, 1, 0); r.Status != proto.StatusOK {
		t.Fatalf("acquire: %+v", r)
	}
	sc.stop(t)
	tb, err := shm.Open(sc.cfg.StatePath)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	if st := tb.Stats(); st.Torn != 0 || st.Inserts != 1 || st.Syncs == 0 {
		t.Errorf("after a clean stop: %+v, want no repairs, 1 insert and a final sync", st)
	}
	if g := tb.Geometry(); g.SlotCount != 1000 || g.SlotSize != 64 {
		t.Errorf("geometry %+v", g)
	}
}

// Ensure that a configured geometry that differs from the file's is an error,
// and that an unconfigured one takes the file's.
func TestRun_geometryMismatch(t *testing.T) {
	dir := shortDir(t)
	path := filepath.Join(dir, "state")
	tb, err := shm.Create(path, shm.Options{SlotCount: 100}, 0)
	if err != nil {
		t.Fatal(err)
	}
	tb.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	sock := filepath.Join(dir, "sock")
	if err := Run(ctx, Config{StatePath: path, SocketPath: sock, Slots: 200, RESPSocket: "-", Logger: quiet()}); !errors.Is(err, ErrGeometryMismatch) {
		t.Errorf("Run with other geometry: %v", err)
	}
	if err := Run(ctx, Config{StatePath: path, SocketPath: sock, RESPSocket: "-", Logger: quiet()}); err != nil {
		t.Errorf("Run with the file's geometry: %v", err)
	}
}

// Ensure that a second instance on the same state file is refused.
func TestRun_secondInstance(t *testing.T) {
	dir := shortDir(t)
	path := filepath.Join(dir, "state")
	tb, err := shm.Create(path, shm.Options{SlotCount: 100}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	if err := Run(context.Background(), Config{StatePath: path, SocketPath: filepath.Join(dir, "sock"), RESPSocket: "-", Logger: quiet()}); !errors.Is(err, shm.ErrLocked) {
		t.Errorf("second instance: %v, want ErrLocked", err)
	}
}

// Ensure a restart after the wall clock went back keeps time moving forward:
// the state file records the server time, and the next start continues from
// it, so a bucket drained before the restart is not refilled by the step.
func TestRun_clockNeverGoesBack(t *testing.T) {
	dir := shortDir(t)
	cfg := Config{StatePath: filepath.Join(dir, "state"), SocketPath: filepath.Join(dir, "sock"), RESPSocket: "-", Slots: 64}
	sc := start(t, cfg)
	sc.stop(t)
	tb, err := shm.Open(cfg.StatePath)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := tb.HighTime()
	tb.Close()
	if h != sc.clock.Load() {
		t.Errorf("recorded %d, want the server time %d", h, sc.clock.Load())
	}
}

// Ensure a bit flipped in the recorded high time cannot move the server's
// clock forward and refill buckets: a 10-per-day bucket drained before a
// restart stays drained after a restart on a file whose newer high mark
// now reads years ahead (an unchecksummed high time did).
func TestRun_flippedHighTimeMintsNothing(t *testing.T) {
	dir := shortDir(t)
	cfg := Config{StatePath: filepath.Join(dir, "state"), SocketPath: filepath.Join(dir, "sock"), RESPSocket: "-",
		Slots: 64, SyncInterval: time.Millisecond, Logger: quiet()}
	day := proto.TokenBucketLimit(10, 24*time.Hour, 10)
	serve := func(fn func(c *client)) {
		ctx, cancel := context.WithCancel(context.Background())
		ready := make(chan struct{})
		c := cfg
		c.Ready = func() { close(ready) }
		done := make(chan error, 1)
		go func() { done <- Run(ctx, c) }()
		select {
		case <-ready:
		case err := <-done:
			t.Fatal(err)
		}
		fn(dialPath(t, cfg.SocketPath))
		time.Sleep(5 * time.Millisecond) // a sync records the high time
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	admitted := 0
	take := func(c *client) {
		for range 20 {
			if r := c.acquire("signup:1.2.3.4", day, 1, 0); r.Decision.Allowed {
				admitted++
			}
		}
	}
	serve(take)
	f, err := os.OpenFile(cfg.StatePath, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	hdr := make([]byte, shm.HeaderSize)
	f.ReadAt(hdr, 0)
	for _, off := range []int{0x0d8, 0x0d8 + 16} { // both high marks (shm/format.go): the newer one is among them
		hdr[off+7] ^= 0x08 // 2^59 ns, about 18 years ahead
	}
	f.WriteAt(hdr, 0)
	f.Close()
	serve(take)
	if admitted != 10 {
		t.Errorf("admitted %d over two runs for a limit of 10 per day", admitted)
	}
}

// Ensure Validate speaks of Config fields (sluiced has no --frame-timeout
// flag to name), and that ValidateGiven refuses a zero only where it was
// given.
func TestConfig_validateNamesFields(t *testing.T) {
	err := (&Config{FrameTimeout: -time.Second}).Validate()
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "FrameTimeout" || !errors.Is(err, ErrConfig) ||
		err.Error() != "FrameTimeout -1s: want a duration from 1ms to 24h0m0s" {
		t.Errorf("Validate: %v", err)
	}
	if err := (&Config{}).Validate(); err != nil {
		t.Errorf("zero Config: %v", err)
	}
	given := func(f string) bool { return f == "LockWait" }
	if err := (&Config{}).ValidateGiven(given); !errors.As(err, &ce) || ce.Field != "LockWait" {
		t.Errorf("ValidateGiven with LockWait 0: %v", err)
	}
	if err := (&Config{LockWait: time.Second}).ValidateGiven(given); err != nil {
		t.Errorf("ValidateGiven: %v", err)
	}
}
