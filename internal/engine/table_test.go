package engine

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/bucket"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Maintain records the time and syncs once per interval until its context
// ends, and records the time once more as it returns.
func TestMaintain(t *testing.T) {
	e, err := Open(filepath.Join(t.TempDir(), "state"), Options{Slots: 100}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		now := int64(41)
		go func() { e.Maintain(ctx, time.Second, func() int64 { now++; return now }, quiet(), nil); close(done) }()
		time.Sleep(3500 * time.Millisecond)
		cancel()
		<-done
	})
	if st := e.Stats(); st.Syncs != 3 || st.SyncErrors != 0 {
		t.Errorf("after 3.5 intervals: %d syncs, %d errors; want 3 and 0", st.Syncs, st.SyncErrors)
	}
	if o := e.Opened(); !o.HighTimeOK || o.HighTime != 45 {
		t.Errorf("recorded time %d (ok %v), want 45: three rounds and the last", o.HighTime, o.HighTimeOK)
	}
}

// Open creates a missing file (and its directory) with the asked geometry
// or the defaults, and reopens an existing one with its own, refusing an
// explicit geometry that differs.
func TestOpen_geometry(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "dir", "state")
	e, err := Open(path, Options{Slots: 300, SlotSize: 128}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if o := e.Opened(); !o.Created {
		t.Errorf("Opened() = %+v, want Created", o)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	for _, o := range []Options{{}, {Slots: 300}, {SlotSize: 128}, {Slots: 300, SlotSize: 128}} {
		e, err := Open(path, o, 0)
		if err != nil {
			t.Fatalf("Open(%+v): %v", o, err)
		}
		if g := e.Geometry(); g.SlotCount != 300 || g.SlotSize != 128 || e.Opened().Created {
			t.Errorf("Open(%+v): geometry %+v, opened %+v", o, g, e.Opened())
		}
		e.Close()
	}
	for _, o := range []Options{{Slots: 301}, {SlotSize: 64}} {
		if _, err := Open(path, o, 0); !errors.Is(err, ErrGeometryMismatch) {
			t.Errorf("Open(%+v) = %v, want ErrGeometryMismatch", o, err)
		}
	}
}

// Scan reports live buckets with their keys and algorithms, and refuses a
// table that keeps no keys.
func TestScan(t *testing.T) {
	dir := t.TempDir()
	e, err := Open(filepath.Join(dir, "keys"), Options{Slots: 64, SlotSize: 128}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	l := MustLimit(bucket.Limit{Algorithm: bucket.GCRA, Burst: 1, Count: 1, Period: 1e9})
	var d bucket.Decision
	for _, k := range []string{"a", "b", "c"} {
		if err := e.Acquire(&d, []byte(k), &l, 1, At(t0), 0); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bucket.Algorithm{}
	next, err := e.Scan(0, 64, Time{}, func(en *Entry) bool { seen[string(en.Key)] = en.Algorithm; return true })
	if err != nil || next != 0 || len(seen) != 3 || seen["b"] != bucket.GCRA {
		t.Errorf("Scan: next %d, err %v, saw %v", next, err, seen)
	}

	small, err := Open(filepath.Join(dir, "nokeys"), Options{Slots: 64}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	if _, err := small.Scan(0, 64, Time{}, func(*Entry) bool { return true }); !errors.Is(err, ErrNoInlineKeys) {
		t.Errorf("Scan on 64-byte slots = %v, want ErrNoInlineKeys", err)
	}
}
