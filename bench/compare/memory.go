package compare

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/clients/go/sluice"
	"github.com/sluicehq/sluice/shm"
)

// Memory is the cost of a live bucket: the same keys, each acquired once
// under a limit that keeps them live (nothing refills or expires during
// the measurement), in Sluice and in Redis.
type Memory struct {
	Keys int `json:"keys"`

	SluiceFileBytes int64   `json:"sluice_file_bytes"` // the state file's size
	SluiceSlots     uint64  `json:"sluice_slots"`
	SluiceSlotSize  uint64  `json:"sluice_slot_size"`
	SluiceLive      uint64  `json:"sluice_live"` // used slots after the inserts
	SluicePerBucket float64 `json:"sluice_bytes_per_bucket"`
	// SluiceArenaBytes is the file's arena (--arena-cells cells of 64
	// bytes), where sliding_log, window_counters and concurrency buckets
	// keep their state: allocated with the file, unused by token buckets.
	SluiceArenaBytes int64 `json:"sluice_arena_bytes"`

	Redis []RedisMemory `json:"redis,omitempty"`
	Error string        `json:"error,omitempty"` // why a part is missing
}

// RedisMemory is INFO memory's used_memory before and after inserting the
// keys with one script.
type RedisMemory struct {
	Script      string  `json:"script"`
	UsedBefore  int64   `json:"used_before"`
	UsedAfter   int64   `json:"used_after"`
	Keys        int64   `json:"keys"` // DBSIZE after
	BytesPerKey float64 `json:"bytes_per_key"`
}

// memoryLimits keep every bucket live for an hour: the inserts take
// seconds, so no key refills to fresh (Sluice) or expires (Redis) before
// it is counted.
var memoryLimits = Limits{TBMax: 100, TBRefill: time.Hour, TBAmount: 10, GCRABurst: 100, GCRACount: 10, GCRAPeriod: time.Hour, FWLimit: 100, FWWindow: time.Hour}

// fill calls do(i) for every i in [0, n) from workers goroutines and
// returns the first error.
func fill(n, workers int, do func(worker, i int) error) error {
	var next atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := do(w, i); err != nil {
					once.Do(func() { first = err })
					next.Store(int64(n))
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

func measureSluiceMemory(ctx context.Context, srv *sluiced, keys []string, m *Memory) error {
	if err := srv.restart(ctx); err != nil {
		return err
	}
	c, err := sluice.Dial(srv.socketPath(), sluice.WithFailurePolicy(sluice.FailError), sluice.WithTimeout(10*time.Second))
	if err != nil {
		return err
	}
	defer c.Close()
	l := memoryLimits
	lim := sluice.TokenBucket(l.TBMax, l.TBRefill, l.TBAmount)
	err = fill(len(keys), 64, func(_, i int) error {
		_, err := c.Acquire(ctx, lim, keys[i], 1)
		return err
	})
	if err != nil {
		return fmt.Errorf("sluice: insert: %w", err)
	}
	st, err := c.Stats(ctx)
	if err != nil {
		return err
	}
	fi, err := os.Stat(srv.statePath())
	if err != nil {
		return err
	}
	m.SluiceFileBytes, m.SluiceSlots, m.SluiceSlotSize, m.SluiceLive = fi.Size(), st["slot_count"], st["slot_size"], st["used_slots"]
	if m.SluiceLive == 0 {
		return errors.New("sluice: no live bucket after the inserts")
	}
	m.SluicePerBucket = float64(m.SluiceFileBytes) / float64(m.SluiceLive)
	m.SluiceArenaBytes = int64(st["arena_cells"]) * shm.CellSize
	return nil
}

func measureRedisMemory(ctx context.Context, t *redisTarget, keys []string, m *Memory) error {
	const conns, depth = 4, 64
	saved := t.limits
	t.limits = memoryLimits
	defer func() { t.limits = saved }()
	rc := t.client(1)
	defer rc.Close()
	for _, k := range []LimitKind{TokenBucket, GCRA} {
		if err := t.Reset(ctx); err != nil {
			return err
		}
		if err := rc.Do(ctx, "MEMORY", "PURGE").Err(); err != nil {
			return fmt.Errorf("redis MEMORY PURGE: %w", err)
		}
		before, err := usedMemory(ctx, rc)
		if err != nil {
			return err
		}
		cs := make([]Conn, conns)
		for i := range cs {
			if cs[i], err = t.Dial(ctx, k); err != nil {
				return err
			}
			defer cs[i].Close()
		}
		batches := (len(keys) + depth - 1) / depth
		err = fill(batches, conns, func(w, b int) error {
			lo, hi := b*depth, min((b+1)*depth, len(keys))
			_, err := cs[w].Do(ctx, keys[lo:hi])
			return err
		})
		if err != nil {
			return fmt.Errorf("redis: insert: %w", err)
		}
		after, err := usedMemory(ctx, rc)
		if err != nil {
			return err
		}
		n, err := rc.DBSize(ctx).Result()
		if err != nil {
			return err
		}
		if n == 0 {
			return errors.New("redis: no key after the inserts")
		}
		name := "token_bucket.lua (hash + expiry)"
		if k == GCRA {
			name = "gcra.lua (string + expiry)"
		}
		m.Redis = append(m.Redis, RedisMemory{Script: name, UsedBefore: before, UsedAfter: after, Keys: n, BytesPerKey: float64(after-before) / float64(n)})
	}
	return nil
}
