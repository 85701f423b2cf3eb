package compare

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/shm"
)

// ExtConfig configures the memory comparison of the algorithms that keep a
// block in the state file's arena (sluice-bench memory-ext).
type ExtConfig struct {
	// Keys is the most keys of a case; Members bounds a sliding log's
	// entries over all keys, so a case of N entries per key has
	// min(Keys, Members/N) keys.
	Keys, Members int
	Dir           string    // scratch directory for the state files and Redis's socket
	RedisServer   string    // redis-server binary; "" skips Redis
	Progress      io.Writer // where progress goes; nil for none
}

// ExtReport is the memory of a live bucket of each extended algorithm in
// Sluice, beside Redis's sorted set for the same sliding log.
type ExtReport struct {
	Machine Machine   `json:"machine"`
	Keys    int       `json:"keys"`
	Members int       `json:"members"`
	Cases   []ExtCase `json:"cases"`
	Notes   []string  `json:"notes,omitempty"`
	Seconds float64   `json:"seconds"`
}

// ExtCase is one limit: Sluice's accounting after filling Keys buckets, and
// Redis's for the sliding logs.
type ExtCase struct {
	Name    string `json:"name"`  // sliding_log N=10, ...
	Limit   string `json:"limit"` // as sluiced's limits are written
	Entries int    `json:"entries"`
	Keys    int    `json:"keys"`
	Words   int    `json:"block_words"` // int64 words of the block; 0 for none

	SlotCount  uint64 `json:"sluice_slots"`
	SlotSize   uint64 `json:"sluice_slot_size"`
	Live       uint64 `json:"sluice_live"`        // buckets live after the inserts (Engine.Live)
	ArenaCells uint64 `json:"sluice_arena_cells"` // the arena's size, as provisioned
	ArenaUsed  uint64 `json:"sluice_arena_used"`  // cells allocated to blocks (Stats().ArenaUsed)
	FileBytes  int64  `json:"sluice_file_bytes"`
	// SlotBytes is the slot table and its tags (a byte per slot) over the
	// live buckets (64-byte slots at a load of 0.75: 86.7); BlockBytes the arena's used cells over them;
	// PerBucket their sum.
	SlotBytes  float64 `json:"sluice_slot_bytes_per_bucket"`
	BlockBytes float64 `json:"sluice_block_bytes_per_bucket"`
	PerBucket  float64 `json:"sluice_bytes_per_bucket"`

	// Redis is the sorted set as CALLR's limiter fills it (members are
	// times printed with nine decimals); RedisInt with integer members
	// (Unix ns), the most compact unique member, which a listpack stores as
	// an integer.
	Redis    *ExtRedis `json:"redis,omitempty"`
	RedisInt *ExtRedis `json:"redis_int,omitempty"`
	Error    string    `json:"error,omitempty"`
}

// ExtRedis is INFO memory's used_memory before and after the same log in
// Redis: one sorted set per key.
type ExtRedis struct {
	Encoding    string  `json:"encoding"` // OBJECT ENCODING of a key
	UsedBefore  int64   `json:"used_before"`
	UsedAfter   int64   `json:"used_after"`
	Keys        int64   `json:"keys"` // DBSIZE after
	BytesPerKey float64 `json:"bytes_per_key"`
}

// extHour keeps every bucket and key live while the inserts run.
const extHour = int64(time.Hour)

// extCase is a limit of the comparison and how a key's bucket is filled.
type extCase struct {
	name, spec string
	entries    int // the sliding log's entries per key; 0 for the others
	limit      bucket.Limit
	fill       func(e *engine.Engine, l *engine.Limit, key []byte, at int64) error
}

// acquireEach fills a bucket with n requests of cost 1, every gap ns from at.
func acquireEach(n int, gap int64) func(*engine.Engine, *engine.Limit, []byte, int64) error {
	return func(e *engine.Engine, l *engine.Limit, key []byte, at int64) error {
		var d bucket.Decision
		for j := range n {
			if err := e.Acquire(&d, key, l, 1, engine.At(at+int64(j)*gap), 0); err != nil {
				return err
			}
			if !d.Allowed {
				return fmt.Errorf("request %d denied", j)
			}
		}
		return nil
	}
}

func extCases() []extCase {
	log := func(n int) extCase {
		return extCase{
			name: "sliding_log N=" + strconv.Itoa(n), spec: fmt.Sprintf("sliding_log:limit=%d,window=1h", n), entries: n,
			limit: bucket.Limit{Algorithm: bucket.SlidingLog, Max: int64(n), Window: extHour},
			fill:  acquireEach(n, int64(time.Millisecond)),
		}
	}
	return []extCase{
		{
			name: "token_bucket (no block)", spec: "token_bucket:max=100,refill=1h,amount=10",
			limit: bucket.Limit{Algorithm: bucket.TokenBucket, Max: 100, RefillTime: extHour, RefillAmount: 10},
			fill:  acquireEach(1, 0),
		},
		log(10), log(100), log(1000),
		{
			name: "window_counters K=60", spec: "window_counters:limit=1000,window=1h,counters=60",
			limit: bucket.Limit{Algorithm: bucket.WindowCounters, Max: 1000, Window: extHour, Counters: 60},
			fill:  acquireEach(10, int64(time.Minute)), // ten of the counters hold a count
		},
		{
			name: "concurrency N=10", spec: "concurrency:limit=10,lease=1h",
			limit: bucket.Limit{Algorithm: bucket.Concurrency, Max: 10, Lease: extHour},
			fill: func(e *engine.Engine, l *engine.Limit, key []byte, at int64) error {
				var d bucket.Decision
				for j := range 10 { // every lease held
					if id, err := e.Lease(&d, key, l, engine.At(at+int64(j)), at+int64(j)); err != nil || id == 0 {
						return fmt.Errorf("lease %d: id %d, %v", j, id, err)
					}
				}
				return nil
			},
		},
	}
}

// extKey is key i of the comparison, in Sluice and in Redis.
func extKey(buf []byte, i int) []byte {
	return strconv.AppendInt(append(buf[:0], "bench:"...), int64(i), 10)
}

// RunMemoryExt fills each case's keys in a new state file of its own (slots
// for the keys at SizedLoad, an arena that holds their blocks) with
// the engine, and the sliding logs' in a redis-server as sorted sets, and
// reports what a live bucket costs in each.
func RunMemoryExt(ctx context.Context, cfg ExtConfig) (*ExtReport, error) {
	began := time.Now()
	if cfg.Keys < 1 || cfg.Members < 1 {
		return nil, errors.New("memory-ext: keys and members must be positive")
	}
	r := &ExtReport{Machine: readMachine(), Keys: cfg.Keys, Members: cfg.Members}
	prog := func(s string) {
		if cfg.Progress != nil {
			fmt.Fprintln(cfg.Progress, "memory-ext:", s)
		}
	}
	var rc *redis.Client
	if cfg.RedisServer != "" {
		rs := &redisServer{bin: cfg.RedisServer, dir: cfg.Dir}
		if err := rs.start(ctx); err != nil {
			r.Notes = append(r.Notes, "Redis skipped: "+err.Error())
		} else {
			defer rs.close()
			r.Machine.Redis = rs.version
			rc = redis.NewClient(&redis.Options{Network: "unix", Addr: rs.socketPath(), PoolSize: 1, Protocol: 2, DisableIdentity: true})
			defer rc.Close()
		}
	} else {
		r.Notes = append(r.Notes, "Redis skipped: no redis-server")
	}
	for _, ec := range extCases() {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		c := ExtCase{Name: ec.name, Limit: ec.spec, Entries: ec.entries, Keys: cfg.Keys}
		if ec.entries > 0 {
			c.Keys = max(min(cfg.Keys, cfg.Members/ec.entries), 1)
		}
		prog(fmt.Sprintf("%s: %d keys in Sluice", ec.name, c.Keys))
		if err := measureSluiceExt(cfg.Dir, ec, &c); err != nil {
			c.Error = "sluice: " + err.Error()
		}
		if ec.entries > 0 && rc != nil {
			prog(fmt.Sprintf("%s: %d keys in Redis", ec.name, c.Keys))
			var err error
			if c.Redis, err = measureRedisZSet(ctx, rc, ec.entries, c.Keys, false); err == nil {
				c.RedisInt, err = measureRedisZSet(ctx, rc, ec.entries, c.Keys, true)
			}
			if err != nil && c.Error == "" {
				c.Error = "redis: " + err.Error()
			}
		}
		r.Cases = append(r.Cases, c)
	}
	r.Seconds = time.Since(began).Seconds()
	return r, nil
}

// extStart is the time of every case's first request.
var extStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()

func measureSluiceExt(dir string, ec extCase, c *ExtCase) error {
	l, err := engine.NewLimit(ec.limit)
	if err != nil {
		return err
	}
	c.Words = ec.limit.ExtWords()
	o := shm.Options{SlotCount: slotsFor(c.Keys)}
	cells := uint64(c.Words+7) / 8 // 64-byte cells of 8 words
	o.ArenaCells = max(uint64(c.Keys)*cells, shm.DefaultArenaCells(o.SlotCount))
	path := filepath.Join(dir, "ext.state")
	os.Remove(path)
	tb, err := shm.Create(path, o, extStart)
	if err != nil {
		return err
	}
	defer os.Remove(path)
	e := engine.New(tb)
	defer e.Close()
	buf := make([]byte, 0, 32)
	for i := range c.Keys {
		if err := ec.fill(e, &l, extKey(buf, i), extStart); err != nil {
			return fmt.Errorf("key %d: %w", i, err)
		}
	}
	st, g := e.Stats(), e.Geometry()
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	c.SlotCount, c.SlotSize, c.ArenaCells, c.ArenaUsed, c.FileBytes = st.SlotCount, uint64(g.SlotSize), st.ArenaCells, st.ArenaUsed, fi.Size()
	if c.Live, err = e.Live(engine.At(extStart + int64(time.Minute)*10)); err != nil {
		return err
	}
	if c.Live != uint64(c.Keys) {
		return fmt.Errorf("%d buckets live after filling %d keys", c.Live, c.Keys)
	}
	c.SlotBytes = float64(c.SlotCount*(c.SlotSize+1)) / float64(c.Live) // each slot and its tag
	c.BlockBytes = float64(c.ArenaUsed*shm.CellSize) / float64(c.Live)
	c.PerBucket = c.SlotBytes + c.BlockBytes
	return nil
}

// measureRedisZSet stores keys sliding logs of n entries as CALLR's limiter
// does: each admission a ZADD to the key's sorted set, scored by its time
// and named by it (seconds with nine decimals, as `date +%s.%N` prints; with
// intMembers, Unix ns as an integer), and the key given an expiry.
func measureRedisZSet(ctx context.Context, rc *redis.Client, n, keys int, intMembers bool) (*ExtRedis, error) {
	const batch = 1000 // commands per pipeline
	if err := rc.FlushAll(ctx).Err(); err != nil {
		return nil, fmt.Errorf("FLUSHALL: %w", err)
	}
	if err := rc.Do(ctx, "MEMORY", "PURGE").Err(); err != nil {
		return nil, fmt.Errorf("MEMORY PURGE: %w", err)
	}
	before, err := usedMemory(ctx, rc)
	if err != nil {
		return nil, err
	}
	p := rc.Pipeline()
	queued := 0
	flush := func() error {
		if queued == 0 {
			return nil
		}
		_, err := p.Exec(ctx)
		queued = 0
		return err
	}
	buf := make([]byte, 0, 32)
	for i := range keys {
		key := string(extKey(buf, i))
		for j := range n {
			at := extStart + int64(j)*int64(time.Millisecond) + int64(i) // distinct per key, like real arrivals
			var member any = fmt.Sprintf("%d.%09d", at/1e9, at%1e9)
			if intMembers {
				member = at
			}
			p.ZAdd(ctx, key, redis.Z{Score: float64(at) / 1e9, Member: member})
			if queued++; queued == batch {
				if err := flush(); err != nil {
					return nil, err
				}
			}
		}
		p.Expire(ctx, key, time.Hour)
		if queued++; queued == batch {
			if err := flush(); err != nil {
				return nil, err
			}
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	after, err := usedMemory(ctx, rc)
	if err != nil {
		return nil, err
	}
	dbsize, err := rc.DBSize(ctx).Result()
	if err != nil {
		return nil, err
	}
	key := string(extKey(buf, 0))
	card, err := rc.ZCard(ctx, key).Result()
	if err != nil {
		return nil, err
	}
	if dbsize != int64(keys) || card != int64(n) {
		return nil, fmt.Errorf("%d keys of %d entries (the first), want %d of %d", dbsize, card, keys, n)
	}
	enc, err := rc.ObjectEncoding(ctx, key).Result()
	if err != nil {
		return nil, err
	}
	return &ExtRedis{Encoding: enc, UsedBefore: before, UsedAfter: after, Keys: dbsize, BytesPerKey: float64(after-before) / float64(dbsize)}, nil
}

// WriteJSON writes the report as JSON.
func (r *ExtReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteMarkdown writes the report as Markdown.
func (r *ExtReport) WriteMarkdown(w io.Writer) error {
	b := &strings.Builder{}
	fmt.Fprintf(b, "# Memory per live bucket: sliding_log, window_counters, concurrency\n\n")
	m := r.Machine
	redisV := "not run"
	if v := redisVersion(m.Redis); v != "" {
		redisV = "Redis " + v
	}
	fmt.Fprintf(b, "%s, %d cores, %s, %s, %s; %s; `make bench-ext` (`sluice-bench memory-ext -keys %d -members %d`), %.0f s.\n\n",
		m.CPU, m.Cores, m.Kernel, m.Go, redisV, m.Date, r.Keys, r.Members, r.Seconds)
	fmt.Fprintf(b, "| limit | keys | Sluice block | Sluice bytes per bucket: slot + block | Redis sorted set, CALLR's members: bytes per key (encoding) | Redis / Sluice | Redis, integer members | Redis / Sluice |\n|---|--:|---|--:|--:|--:|--:|--:|\n")
	for _, c := range r.Cases {
		block := "none"
		if c.Words > 0 {
			block = fmt.Sprintf("%d words, %.0f B", c.Words, c.BlockBytes)
		}
		sl := "-"
		if c.PerBucket > 0 {
			sl = fmt.Sprintf("**%.0f** (%.1f + %.0f)", c.PerBucket, c.SlotBytes, c.BlockBytes)
		}
		redisCells := func(rm *ExtRedis) (string, string) {
			if rm == nil {
				return "", ""
			}
			return fmt.Sprintf("**%.0f** (%s)", rm.BytesPerKey, rm.Encoding), ratio(rm.BytesPerKey, c.PerBucket)
		}
		rd, rr := redisCells(c.Redis)
		ri, rir := redisCells(c.RedisInt)
		fmt.Fprintf(b, "| `%s` | %d | %s | %s | %s | %s | %s | %s |\n", c.Limit, c.Keys, block, sl, rd, rr, ri, rir)
	}
	fmt.Fprintf(b, "\nPer entry of a sliding log: ")
	first := true
	for _, c := range r.Cases {
		if c.Entries == 0 || c.PerBucket <= 0 {
			continue
		}
		if !first {
			fmt.Fprintf(b, "; ")
		}
		first = false
		fmt.Fprintf(b, "N=%d: Sluice %.1f B", c.Entries, c.PerBucket/float64(c.Entries))
		if c.Redis != nil && c.RedisInt != nil {
			fmt.Fprintf(b, ", Redis %.1f B (integer members %.1f B)", c.Redis.BytesPerKey/float64(c.Entries), c.RedisInt.BytesPerKey/float64(c.Entries))
		}
	}
	fmt.Fprintf(b, ".\n\n")
	fmt.Fprintf(b, "**Sluice**: each case fills its keys in a new state file of its own with the engine (the sidecar's code, in process): slots for the keys at the load state files are sized for (0.75), an arena provisioned for their blocks. "+
		"A sliding log of N gets N admissions 1 ms apart, window_counters ten admissions a minute apart, concurrency every lease taken; every bucket is then live (`Engine.Live`). "+
		"The figure is the slot table's bytes and its tags' (a byte per slot) over the live buckets (64-byte slots at 0.75: 86.7) plus the arena's used cells (`Stats().ArenaUsed` × 64 B) over them: a block of w words takes ceil(w/8) cells. "+
		"Both are allocated up front: the file is sized for its slot count and arena when it is created (`--slots`, `--arena-cells`), whatever the buckets hold.\n\n")
	fmt.Fprintf(b, "**Redis**: the same keys, a sorted set each, filled as CALLR's published Redis + Lua limiter fills it: one `ZADD` per admission, scored by its time and named by it (seconds with nine decimals, unique per admission), and an `EXPIRE` on the key; the figure is `INFO memory`'s `used_memory` growth over `DBSIZE`, from an empty server after `MEMORY PURGE`, allocator overhead, key names and the expiry index included. "+
		"The integer-member column names each admission by its Unix ns as an integer instead, the most compact unique member (a listpack stores it as an integer). "+
		"A sorted set of at most 128 entries is a listpack; past that, a skiplist and a dict (`zset-max-listpack-entries`, default settings).\n")
	for _, c := range r.Cases {
		if c.Error != "" {
			fmt.Fprintf(b, "\n- %s: %s\n", c.Name, c.Error)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(b, "\n- %s\n", n)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
