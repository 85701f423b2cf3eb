package config

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/shm"
)

// spec returns a valid file whose limit "login" has max n.
func validFile(n int) string {
	return fmt.Sprintf("limits:\n  login:\n    limit: \"token_bucket:max=%d,refill_time=1h,refill_amount=1\"\n  api: \"gcra:burst=%d,count=1,period=1s\"\n", n, n)
}

func write(t *testing.T, path, content string) {
	t.Helper()
	// Write a new file and rename it over the old one, as editors and
	// configuration management do, so a reader never sees half a file.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// loaded writes content to dir/sluice.yaml and loads it, as the command
// does before serving; it returns the path and the Holder of its Set.
func loaded(t *testing.T, dir, content string) (string, *Holder) {
	t.Helper()
	path := filepath.Join(dir, "sluice.yaml")
	write(t, path, content)
	s, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, NewHolder(s)
}

// Ensure the file can be rewritten 100 times, valid and invalid
// alternately, while a client loop acquires under the named limits without
// pause (on an engine over a heap table, as the server does): no request
// fails, every valid file is in force after its reload (a new bucket
// reports the new maximum), every invalid one is rejected, counted and
// logged, and the previous config stays.
func TestWatcher_reloadUnderLoad(t *testing.T) {
	path, h := loaded(t, t.TempDir(), validFile(1))
	var logs bytes.Buffer
	var mu sync.Mutex
	results := map[Result]int{}
	w := &Watcher{Path: path, Holder: h, Interval: -1,
		Logger: slog.New(slog.NewTextHandler(&syncWriter{w: &logs}, nil)),
		OnReload: func(r Result, err error) {
			mu.Lock()
			results[r]++
			mu.Unlock()
		}}

	tb, err := shm.NewHeap(shm.Options{SlotCount: 1 << 14})
	if err != nil {
		t.Fatal(err)
	}
	e := engine.New(tb)
	acquire := func(s *Set, name, key string, now int64) (bucket.Decision, error) {
		var d bucket.Decision
		l, ok := s.Lookup(name)
		if !ok {
			return d, fmt.Errorf("no limit %q", name)
		}
		el, err := engine.NewLimit(l.Bucket)
		if err != nil {
			return d, err
		}
		return d, e.Acquire(&d, []byte(key), &el, 1, engine.At(now), 0)
	}
	var stop atomic.Bool
	var lookups, failures atomic.Int64
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				s := h.Load() // one request decides under one Set
				now := int64(1e18) + int64(i)*1e6
				dl, err1 := acquire(s, "login", fmt.Sprint("user", g, "-", i%100), now)
				da, err2 := acquire(s, "api", fmt.Sprint("user", g, "-", i%100), now)
				// Both limits come from one file: they always agree.
				if err1 != nil || err2 != nil || dl.Limit != da.Limit-1 {
					failures.Add(1)
				}
				lookups.Add(1)
			}
		})
	}
	for i := 1; i <= 100; i++ {
		if i%2 == 0 {
			write(t, path, validFile(i))
			if err := w.Reload(t.Context()); err != nil {
				t.Fatalf("reload %d: %v", i, err)
			}
			if d, err := acquire(h.Load(), "login", fmt.Sprint("probe", i), 2e18); err != nil || d.Limit != int64(i) || !d.Allowed {
				t.Fatalf("after reload %d: a new bucket's decision %+v, %v", i, d, err)
			}
			continue
		}
		bad := strings.Replace(validFile(i), "refill_time=1h", "refill_time=soon", 1)
		write(t, path, bad)
		err := w.Reload(t.Context())
		if err == nil || !strings.Contains(err.Error(), `refill_time: invalid duration "soon"`) || !strings.Contains(err.Error(), "sluice.yaml:3: limits.login.limit") {
			t.Fatalf("reload %d of a bad file: %v", i, err)
		}
		want := int64(i - 1)
		if i == 1 {
			want = 1
		}
		if l, _ := h.Load().Lookup("login"); l.Bucket.Max != want {
			t.Fatalf("after bad reload %d: login max %d, want the previous %d", i, l.Bucket.Max, want)
		}
	}
	stop.Store(true)
	wg.Wait()
	if failures.Load() != 0 || lookups.Load() == 0 {
		t.Fatalf("%d of %d lookups failed", failures.Load(), lookups.Load())
	}
	if w.Count(Reloaded) != 50 || w.Count(Rejected) != 50 || results[Reloaded] != 50 || results[Rejected] != 50 {
		t.Fatalf("counts ok %d error %d, callbacks %v; want 50 each", w.Count(Reloaded), w.Count(Rejected), results)
	}
	if n := strings.Count(logs.String(), "config reloaded"); n != 50 {
		t.Errorf("%d reload lines, want 50", n)
	}
	if n := strings.Count(logs.String(), "config file rejected"); n != 50 {
		t.Errorf("%d rejection lines, want 50", n)
	}
	t.Logf("%d acquire pairs during 100 reloads", lookups.Load())
}

// Ensure Run reloads a file whose content changed, logs and counts a
// broken file once however long it stays broken, and reloads on a signal
// even when nothing changed.
func TestWatcher_run(t *testing.T) {
	path, h := loaded(t, t.TempDir(), validFile(1))
	sig := make(chan os.Signal, 1)
	w := &Watcher{Path: path, Holder: h, Interval: 5 * time.Millisecond, Signals: sig}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	write(t, path, validFile(7))
	waitFor("the change to be loaded", func() bool { l, _ := h.Load().Lookup("login"); return l.Bucket.Max == 7 })
	write(t, path, "limits: [")
	waitFor("the broken file to be rejected", func() bool { return w.Count(Rejected) == 1 })
	time.Sleep(50 * time.Millisecond) // ten polls of the same broken file
	if n := w.Count(Rejected); n != 1 {
		t.Fatalf("a broken file was counted %d times", n)
	}
	if l, _ := h.Load().Lookup("login"); l.Bucket.Max != 7 {
		t.Fatal("a broken file replaced the config")
	}
	write(t, path, validFile(7))
	waitFor("the repaired file to be loaded", func() bool { return w.Count(Reloaded) == 2 })
	sig <- syscall.SIGHUP
	waitFor("a signal to reload the unchanged file", func() bool { return w.Count(Reloaded) == 3 })
	os.Remove(path)
	waitFor("a missing file to be rejected", func() bool { return w.Count(Rejected) == 2 })
	if l, _ := h.Load().Lookup("login"); l.Bucket.Max != 7 {
		t.Fatal("a missing file replaced the config")
	}
}

// syncWriter serialises writes to a buffer.
type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// Ensure a reload on a change applies a content only once two reads find
// it the same (a file seen half-written is not applied), and keeps in
// force the limits the file no longer defines, logged once, until a reload
// on demand removes them; a name the file defines again is no longer kept.
func TestWatcher_keepsRemovedLimits(t *testing.T) {
	whole := validFile(5)                            // login, then api
	prefix := whole[:strings.Index(whole, "  api:")] // what a writer in place has written so far
	path, h := loaded(t, t.TempDir(), whole)
	var logs bytes.Buffer
	w := &Watcher{Path: path, Holder: h, Interval: -1,
		Logger: slog.New(slog.NewTextHandler(&syncWriter{w: &logs}, nil))}
	poll := func() {
		t.Helper()
		if err := w.reload(t.Context(), false); err != nil {
			t.Fatal(err)
		}
	}
	has := func(name string) bool { _, ok := w.Holder.Load().Lookup(name); return ok }

	if err := os.WriteFile(path, []byte(prefix+"  signup: \"gcra:burst=1,count=1,period=1s\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	poll()
	if has("signup") {
		t.Fatal("a content read once was applied")
	}
	poll()
	if !has("signup") || !has("api") || !slices.Equal(w.Holder.Load().Kept(), []string{"api"}) {
		t.Fatalf("after a change that drops api: signup %v, api %v, kept %v; want api kept",
			has("signup"), has("api"), w.Holder.Load().Kept())
	}
	if err := os.WriteFile(path, []byte(prefix), 0o644); err != nil {
		t.Fatal(err)
	}
	poll()
	poll()
	if !has("signup") || !has("api") || !slices.Equal(w.Holder.Load().Kept(), []string{"api", "signup"}) {
		t.Fatalf("after a change that drops signup too: signup %v, api %v, kept %v; want both kept",
			has("signup"), has("api"), w.Holder.Load().Kept())
	}
	if n := strings.Count(logs.String(), "no longer defines these limits"); n != 2 {
		t.Errorf("%d lines about kept limits, want 2 (api once, then signup):\n%s", n, logs.String())
	}
	if err := os.WriteFile(path, []byte(whole), 0o644); err != nil {
		t.Fatal(err)
	}
	poll()
	poll()
	if !has("api") || !slices.Equal(w.Holder.Load().Kept(), []string{"signup"}) {
		t.Fatalf("the whole file: api %v, kept %v; want signup kept only", has("api"), w.Holder.Load().Kept())
	}
	if err := os.WriteFile(path, []byte(prefix), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := w.Reload(t.Context()); err != nil {
		t.Fatal(err)
	}
	if has("api") || has("signup") || len(w.Holder.Load().Kept()) != 0 {
		t.Fatalf("a reload on demand kept limits (api %v, kept %v)", has("api"), w.Holder.Load().Kept())
	}
	if !strings.Contains(logs.String(), "removed=\"[api signup]\"") {
		t.Errorf("the reload on demand did not log api's removal:\n%s", logs.String())
	}
}
