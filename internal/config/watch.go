package config

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Result is the outcome of a reload, the label of the reload counter.
type Result uint8

const (
	Reloaded Result = iota // the new file validated and is in force ("ok")
	Rejected               // the file could not be read or did not validate; the old config stays ("error")
	numResults
)

func (r Result) String() string {
	if r == Reloaded {
		return "ok"
	}
	return "error"
}

// DefaultInterval is how often a Watcher reads the file to see whether it
// changed.
const DefaultInterval = time.Second

// Watcher keeps a Holder's Set in step with a config file. Set its fields,
// then call Run; Reload may be called from any goroutine meanwhile.
type Watcher struct {
	Path   string  // the config file
	Holder *Holder // receives each new Set
	// Logger receives one line per reload (info) or rejected file (error);
	// nil discards them.
	Logger *slog.Logger
	// Interval is how often Run reads the file and reloads it if its
	// content (SHA-256) changed; 0 means DefaultInterval, a negative value
	// never (reload on Signals only). Reading a file of a few kilobytes
	// each second costs nothing, and it sees every change, including a
	// rewrite within the file system's timestamp granularity, an editor's
	// rename over the file and a ConfigMap's symlink swap.
	Interval time.Duration
	// Signals, if not nil, asks Run to reload the file now, even if it
	// did not change (the command sends SIGHUP here).
	Signals <-chan os.Signal
	// Check, if not nil, is what a file must pass besides parsing to be
	// loaded: a Set it refuses is rejected like an invalid file.
	Check func(*Set) error
	// OnReload, if not nil, is called after every reload with its result
	// and, when rejected, the reason (the command feeds metrics and
	// sd_notify with it). It runs on the reloading goroutine.
	OnReload func(Result, error)

	mu      sync.Mutex // serialises reloads
	lastSum [32]byte   // the content last loaded or rejected
	lastErr string     // the last rejection, so an unchanged bad file is logged once
	counts  [numResults]atomic.Uint64
}

// Run polls the file and serves Signals until ctx is done, then returns
// nil. The Holder's Set is already loaded (the command loads the file once
// before serving, so a bad file at start-up is fatal); Run records its
// content as the current one.
func (w *Watcher) Run(ctx context.Context) error {
	w.mu.Lock()
	w.lastSum = w.Holder.Load().Sum()
	w.mu.Unlock()
	var tick <-chan time.Time
	if w.Interval >= 0 {
		iv := w.Interval
		if iv == 0 {
			iv = DefaultInterval
		}
		t := time.NewTicker(iv)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick:
			w.reload(false)
		case <-w.Signals:
			w.reload(true)
		}
	}
}

// Reload reads and validates the file and, if it is valid, makes it the
// Holder's Set, even if its content did not change. It returns why the
// file was rejected, or nil.
func (w *Watcher) Reload() error { return w.reload(true) }

// Count returns the number of reloads with result r since the Watcher was
// made.
func (w *Watcher) Count(r Result) uint64 { return w.counts[r].Load() }

// reload loads the file if force is set or its content changed since the
// last reload.
func (w *Watcher) reload(force bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	data, err := readFile(w.Path)
	var s *Set
	if err == nil {
		sum := sha256.Sum256(data)
		if !force && sum == w.lastSum {
			return nil
		}
		w.lastSum = sum
		s, err = Parse(w.Path, data)
		if err == nil && w.Check != nil {
			err = w.Check(s)
		}
	}
	if err != nil {
		// A file that stays missing or unreadable is counted and logged
		// once, not at each poll.
		msg := err.Error()
		if !force && msg == w.lastErr {
			return err
		}
		w.lastErr = msg
		w.counts[Rejected].Add(1)
		w.logger().Error("config file rejected; the previous config stays in force", "path", w.Path, "err", err)
		if w.OnReload != nil {
			w.OnReload(Rejected, err)
		}
		return err
	}
	w.lastErr = ""
	old := w.Holder.Swap(s)
	added, removed, changed := s.Changes(old)
	w.counts[Reloaded].Add(1)
	w.logger().Info("config reloaded", "path", w.Path, "limits", s.Len(),
		"added", added, "removed", removed, "changed", changed)
	if w.OnReload != nil {
		w.OnReload(Reloaded, nil)
	}
	return nil
}

var discard = slog.New(slog.DiscardHandler)

func (w *Watcher) logger() *slog.Logger {
	if w.Logger == nil {
		return discard
	}
	return w.Logger
}
