package config

import (
	"context"
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
// changed: a change is applied a quarter to half a second after it is
// written (two reads must agree).
const DefaultInterval = 250 * time.Millisecond

// Watcher keeps a Holder's Set in step with a config file. Set its fields,
// then call Run; Reload may be called from any goroutine meanwhile.
//
// A reload of Run's (the file's content changed) applies what the file
// adds and changes, never what it removes: a limit the file no longer
// defines stays in force, kept (Set.Kept), until a reload on demand
// (Reload, Signals). A program rewriting the file in place is seen between
// two writes, and a request on a name it was about to write back must not
// fail; removing a limit makes its requests fail, so it takes a deliberate
// act. A changed content is also applied only once two reads an Interval
// apart find it the same, so that a file seen half-written is not applied.
type Watcher struct {
	Path   string  // the config file
	Holder *Holder // receives each new Set
	// Logger receives one line per reload (info), rejected file (error)
	// or limit newly kept (warn); nil discards them.
	Logger *slog.Logger
	// Interval is how often Run reads the file and reloads it if its
	// content (SHA-256) changed and stayed the same for one more Interval;
	// 0 means DefaultInterval, a negative value never (reload on Signals
	// only). Reading a file of a few kilobytes four times a second costs nothing,
	// and it sees every change, including a rewrite within the file
	// system's timestamp granularity, an editor's rename over the file and
	// a ConfigMap's symlink swap.
	Interval time.Duration
	// ReadTimeout bounds one read of the file (0: DefaultReadTimeout): a
	// read that takes longer is abandoned, and the reload rejected.
	ReadTimeout time.Duration
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

	once    sync.Once
	turn    chan struct{} // holds a token while a reload runs: reloads take turns
	lastSum [32]byte      // the content last loaded or rejected
	pending [32]byte      // a changed content seen once, applied if the next poll sees it again
	seen    bool          // pending is set
	lastErr string        // the last rejection, so an unchanged bad file is logged once
	counts  [numResults]atomic.Uint64
	reading atomic.Bool                  // a read of the file is running
	read    func(string) ([]byte, error) // readFile; tests replace it
}

// Run polls the file and serves Signals until ctx is done, then returns
// nil, without waiting for a read of the file that has not returned. The
// Holder's Set is already loaded (the command loads the file once before
// serving, so a bad file at start-up is fatal); Run records its content as
// the current one.
func (w *Watcher) Run(ctx context.Context) error {
	if !w.lock(ctx) {
		return nil
	}
	w.lastSum = w.Holder.Load().Sum()
	w.unlock()
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
			w.reload(ctx, false)
		case <-w.Signals:
			w.reload(ctx, true)
		}
	}
}

// Reload reads and validates the file and, if it is valid, makes it the
// Holder's Set as it is, even if its content did not change: the limits it
// no longer defines are removed, kept ones included. It returns why the
// file was rejected, or nil; it returns ctx's error, changing nothing, if
// ctx is done before the file is read.
func (w *Watcher) Reload(ctx context.Context) error { return w.reload(ctx, true) }

// Count returns the number of reloads with result r since the Watcher was
// made.
func (w *Watcher) Count(r Result) uint64 { return w.counts[r].Load() }

// lock waits for the turn to reload, or for ctx to be done (false).
func (w *Watcher) lock(ctx context.Context) bool {
	w.once.Do(func() { w.turn = make(chan struct{}, 1) })
	select {
	case w.turn <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (w *Watcher) unlock() { <-w.turn }

// reload loads the file if force is set, or if its content changed since
// the last reload and is the content the previous call saw.
func (w *Watcher) reload(ctx context.Context, force bool) error {
	if !w.lock(ctx) {
		return ctx.Err()
	}
	defer w.unlock()
	read := w.read
	if read == nil {
		read = readFile
	}
	data, err := readWithin(ctx, w.Path, w.ReadTimeout, &w.reading, read)
	var side []byte
	if err == nil {
		side, err = readOverrides(ctx, w.Path, w.ReadTimeout, nil, readFile)
	}
	if ctx.Err() != nil {
		return ctx.Err() // stopping: nothing to report
	}
	var s *Set
	if err == nil {
		sum := contentSum(data, side)
		switch {
		case force:
		case sum == w.lastSum:
			w.seen = false
			return nil
		case !w.seen || sum != w.pending:
			w.pending, w.seen = sum, true // applied if the next poll reads it again
			return nil
		}
		w.lastSum, w.seen = sum, false
		s, err = ParseWith(w.Path, data, side)
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
	old := w.Holder.Load()
	var kept []string
	if !force {
		s, kept = s.keep(old)
	}
	w.Holder.Swap(s)
	added, removed, changed := s.Changes(old)
	w.counts[Reloaded].Add(1)
	w.logger().Info("config reloaded", "path", w.Path, "limits", s.Len(),
		"added", added, "removed", removed, "changed", changed, "kept", s.Kept())
	if len(kept) > 0 {
		w.logger().Warn("the config file no longer defines these limits: they stay in force until the file is reloaded on demand (SIGHUP)",
			"path", w.Path, "limits", kept)
	}
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
