package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/shm"
)

// Defaults for a Config's zero fields.
const (
	DefaultStatePath    = "var/sluice.state"
	DefaultSlots        = 1 << 21 // 2,097,152 slots: about 1.5M buckets at a load of 0.7 (128 MiB at 64 bytes)
	DefaultSlotSize     = shm.MinSlotSize
	DefaultSyncInterval = time.Second
)

// Config is what the sidecar needs to run.
type Config struct {
	StatePath    string        // the state file; created if missing
	Slots        uint64        // slot count of a new state file
	SlotSize     int           // slot size of a new state file: 64, 128 or 256
	SyncInterval time.Duration // how often the table is synced to disk
	Logger       *slog.Logger  // nil: slog.Default()
}

func (c *Config) withDefaults() Config {
	d := *c
	if d.StatePath == "" {
		d.StatePath = DefaultStatePath
	}
	if d.Slots == 0 {
		d.Slots = DefaultSlots
	}
	if d.SlotSize == 0 {
		d.SlotSize = DefaultSlotSize
	}
	if d.SyncInterval == 0 {
		d.SyncInterval = DefaultSyncInterval
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	return d
}

// ErrGeometryMismatch is returned when an existing state file's geometry
// differs from the one the Config asks for.
var ErrGeometryMismatch = errors.New("server: state file geometry differs from the configuration")

// openState opens the state file, creating it (and its directory) if it
// does not exist. An existing file keeps its geometry; if the configuration
// asks for another, that is an error naming both, not a silent choice.
func openState(c Config, explicitGeometry bool) (*shm.Table, bool, error) {
	t, err := shm.Open(c.StatePath)
	if errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(c.StatePath), 0o750); err != nil {
			return nil, false, err
		}
		t, err = shm.Create(c.StatePath, shm.Options{SlotCount: c.Slots, SlotSize: c.SlotSize})
		return t, true, err
	}
	if err != nil {
		return nil, false, err
	}
	g := t.Geometry()
	if explicitGeometry && (g.SlotCount != c.Slots || g.SlotSize != c.SlotSize) {
		t.Close()
		return nil, false, fmt.Errorf("%w: %s has %d slots of %d bytes, configured %d slots of %d bytes",
			ErrGeometryMismatch, c.StatePath, g.SlotCount, g.SlotSize, c.Slots, c.SlotSize)
	}
	return t, false, nil
}

// Run opens (or creates) the state file and serves until ctx is cancelled,
// then syncs, marks the file clean and returns nil. It returns an error if
// the state file cannot be opened or the final sync fails.
func Run(ctx context.Context, cfg Config) error {
	explicit := cfg.Slots != 0 || cfg.SlotSize != 0
	c := cfg.withDefaults()
	log := c.Logger
	t, created, err := openState(c, explicit)
	if err != nil {
		return err
	}
	e := engine.New(t)
	g, st := t.Geometry(), t.Stats()
	log.Info("sluiced started", "state", c.StatePath, "created", created, "slots", g.SlotCount,
		"slot_size", g.SlotSize, "file_bytes", g.FileSize, "used_slots", st.Used,
		"torn_slots_reset", st.Torn, "sync_interval", c.SyncInterval)

	tick := time.NewTicker(c.SyncInterval)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-tick.C:
			if err := t.Sync(); err != nil {
				log.Error("sync failed; the file stays marked dirty", "err", err)
			}
		}
	}
	st = e.Table().Stats()
	if err := t.Close(); err != nil {
		log.Error("sluiced stopped; final sync failed", "err", err)
		return err
	}
	log.Info("sluiced stopped", "state", c.StatePath, "used_slots", st.Used, "syncs", st.Syncs, "sync_errors", st.SyncErrors)
	return nil
}
