package shm

import (
	"bytes"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

var (
	powerLossTrials = flag.Int("powerloss.trials", 60, "disk images to try in TestPowerLoss")
	powerLossSeed   = flag.Uint64("powerloss.seed", 0, "seed of TestPowerLoss (0: random)")
)

const pageSize = 4096

// Ensure what a power loss can leave is handled (SQLite's crash-test idea):
// the file as of the last sync, plus a random subset of the pages written
// since, plus possibly one 512-byte sector torn mid-write. Every image opens
// (the file is marked dirty, so it is scanned), every bucket synced before
// the loss is still there, and every bucket holds a state it really had at
// some point, or is marked conservative; the table verifies.
func TestPowerLoss(t *testing.T) {
	seed := *powerLossSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (-powerloss.seed; trials: -powerloss.trials)", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	dir := flipDir(t)
	path := filepath.Join(dir, "state")
	tb, err := Create(path, Options{SlotCount: 1024, SlotSize: 128}, 0)
	if err != nil {
		t.Fatal(err)
	}
	history := map[string]map[int64]bool{} // key -> every value it held
	write := func(k string, v int64) {
		put(t, tb, k, v, math.MaxInt64, 0)
		if history[k] == nil {
			history[k] = map[int64]bool{}
		}
		history[k][v] = true
	}
	key := func(i int) string { return fmt.Sprintf("key-%d", i) }
	for i := range 300 {
		write(key(i), int64(i))
	}
	if err := tb.Sync(); err != nil {
		t.Fatal(err)
	}
	synced, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// After the last sync: updates, and new buckets.
	for i := range 600 {
		write(key(rng.IntN(450)), int64(1000+i))
	}
	current, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tb.Close()
	var changed []int
	for p := 0; p < len(current); p += pageSize {
		if !bytes.Equal(synced[p:p+pageSize], current[p:p+pageSize]) {
			changed = append(changed, p)
		}
	}
	if len(changed) < 4 {
		t.Fatalf("only %d pages changed since the sync", len(changed))
	}
	img := make([]byte, len(current))
	crashed := filepath.Join(dir, "crashed")
	for trial := range *powerLossTrials {
		copy(img, synced)
		for _, p := range changed {
			if rng.IntN(2) == 0 {
				copy(img[p:p+pageSize], current[p:p+pageSize])
			}
		}
		if rng.IntN(2) == 0 { // a sector torn at an 8-byte boundary
			p := changed[rng.IntN(len(changed))] + 512*rng.IntN(pageSize/512)
			cut := p + 8*rng.IntN(64)
			copy(img[p:cut], current[p:cut])
			copy(img[cut:p+512], synced[cut:p+512])
		}
		if err := os.WriteFile(crashed, img, 0o600); err != nil {
			t.Fatal(err)
		}
		tb, err := Open(crashed)
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		for k, values := range history {
			s, ok := tb.lookup(fp(tb, k))
			if !ok {
				var i int
				fmt.Sscanf(k, "key-%d", &i)
				if i < 300 {
					t.Fatalf("trial %d: %s, synced before the loss, is gone", trial, k)
				}
				continue
			}
			if s.Live() && !s.Conservative() && !values[s.State()[0]] {
				t.Fatalf("trial %d: %s holds %d, a value it never had", trial, k, s.State()[0])
			}
			s.Release()
		}
		if err := tb.Verify(); err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		tb.Close()
	}
}
