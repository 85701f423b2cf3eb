package compare

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
)

// Ensure memory-ext counts each bucket's block from the table (a log of N
// entries takes ceil(N/8) cells) and, with Redis, one sorted set per key of
// the log's length.
func TestRunMemoryExtSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	// Enough entries that Redis's growth stands out of the noise of its
	// own bookkeeping (client buffers): 400 left a log of 100 entries on
	// 4 keys, whose used_memory delta came out negative on a busy machine.
	cfg := ExtConfig{Keys: 40, Members: 4000, Dir: shortDir(t)}
	if bin, err := exec.LookPath("redis-server"); err == nil {
		cfg.RedisServer = bin
	}
	r, err := RunMemoryExt(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	cells := map[string]uint64{"token_bucket (no block)": 0, "sliding_log N=10": 2, "sliding_log N=100": 13,
		"sliding_log N=1000": 125, "window_counters K=60": 8, "concurrency N=10": 3}
	for _, c := range r.Cases {
		if c.Error != "" {
			t.Errorf("%s: %s", c.Name, c.Error)
			continue
		}
		want, ok := cells[c.Name]
		if !ok {
			t.Errorf("unexpected case %q", c.Name)
			continue
		}
		if c.Live != uint64(c.Keys) || c.ArenaUsed != want*uint64(c.Keys) || c.BlockBytes != float64(want*64) {
			t.Errorf("%s: %d live of %d keys, %d cells used (%v B each), want %d cells each", c.Name, c.Live, c.Keys, c.ArenaUsed, c.BlockBytes, want)
		}
		if c.Entries > 0 && c.Keys != max(min(cfg.Keys, cfg.Members/c.Entries), 1) {
			t.Errorf("%s: %d keys", c.Name, c.Keys)
		}
		if c.Entries > 0 && cfg.RedisServer != "" {
			for _, rm := range []*ExtRedis{c.Redis, c.RedisInt} {
				if rm == nil || rm.Keys != int64(c.Keys) || rm.BytesPerKey <= 0 {
					t.Errorf("%s: redis %+v", c.Name, rm)
				}
			}
		}
	}
	var md bytes.Buffer
	if err := r.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"`sliding_log:limit=1000,window=1h`", "`concurrency:limit=10,lease=1h`", r.Machine.CPU} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md.String())
		}
	}
}
