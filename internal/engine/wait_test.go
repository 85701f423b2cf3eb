package engine

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bucket"
)

// twoHolders returns an owner engine over a new state file and an engine
// attached to it: another holder, as a direct client's.
func twoHolders(t *testing.T) (owner, att *Engine) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state")
	owner, err := Open(path, Options{Slots: 256}, t0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { owner.Close() })
	if att, err = Attach(path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { att.Close() })
	return owner, att
}

// bucketBefore creates a bucket under l whose slot comes before that of
// key's bucket, which exists, and returns its key: a Multi over both locks
// it first.
func bucketBefore(t *testing.T, e *Engine, key string, l *Limit) string {
	t.Helper()
	for i := 0; ; i++ {
		k := fmt.Sprint("before-", i)
		if _, err := acquire(e, []byte(k), l, 1, t0, 0); err != nil {
			t.Fatal(err)
		}
		if slotOf(t, e, k, l) < slotOf(t, e, key, l) {
			return k
		}
	}
}

// slotOf returns the slot of key's bucket under l, which exists.
func slotOf(t *testing.T, e *Engine, key string, l *Limit) uint64 {
	t.Helper()
	sl, ok, err := e.t.Lookup(e.fingerprint([]byte(key), l), nil)
	if !ok || err != nil {
		t.Fatalf("no bucket %q: %v", key, err)
	}
	defer sl.Release()
	return sl.Index()
}

// Ensure an operation that waits longer than its Time.Wait for a lock
// another holder keeps fails with a LockedError naming the holder's
// process, and changes nothing: a Multi or an Each over that bucket and
// others leaves the others as they were (and locked by no one), and the
// bucket is decided as usual once released.
func TestWait_changesNothing(t *testing.T) {
	tb, slog := tokenBucket(10, 3600, 1), slidingLog(10, 3600)
	owner, att := twoHolders(t)
	// The held bucket, one whose slot comes before its (a Multi has locked
	// that one when it waits), and one of an extended algorithm.
	for _, k := range []string{"held", "log"} {
		if _, err := acquire(owner, []byte(k), map[string]*Limit{"held": tb, "log": slog}[k], 1, t0, 0); err != nil {
			t.Fatal(err)
		}
	}
	before := bucketBefore(t, owner, "held", tb)
	release, err := att.Hold([]byte("held"), tb, t0)
	if err != nil {
		t.Fatal(err)
	}
	const wait = 50 * time.Millisecond
	at := Time{Now: t0, At: t0, Wait: wait}
	items := []Item{{Key: []byte("new"), Limit: tb, Cost: 1}, {Key: []byte(before), Limit: tb, Cost: 1},
		{Key: []byte("held"), Limit: tb, Cost: 1}, {Key: []byte("log"), Limit: slog, Cost: 1}}
	var d bucket.Decision
	for _, op := range []struct {
		name string
		do   func() error
	}{
		{"acquire", func() error { return owner.Acquire(&d, []byte("held"), tb, 1, at, 0) }},
		{"peek", func() error { return owner.Peek(&d, []byte("held"), tb, at) }},
		{"refund", func() error { return owner.Refund(&d, []byte("held"), tb, 1, at, 0) }},
		{"reset", func() error { _, err := owner.Reset([]byte("held"), tb, at); return err }},
		{"multi", func() error { _, _, err := owner.Multi(nil, items, at); return err }},
		{"each", func() error { _, err := owner.Each(nil, items[:3], at); return err }},
	} {
		start := time.Now()
		err := op.do()
		var le *LockedError
		if !errors.As(err, &le) || !errors.Is(err, ErrLocked) || le.Pid != os.Getpid() || le.Held < wait/2 {
			t.Errorf("%s: %v, want a LockedError naming this process", op.name, err)
		}
		if took := time.Since(start); took < wait || took > wait+5*time.Second {
			t.Errorf("%s gave up after %v, want about %v", op.name, took, wait)
		}
	}
	reservedLeft(t, owner, "new", tb)
	// The others were left as they were (one request taken), and unlocked.
	for _, c := range []struct {
		key       string
		l         *Limit
		remaining int64
	}{{"new", tb, 10}, {before, tb, 9}, {"log", slog, 9}} {
		if d, err := peek(owner, []byte(c.key), c.l, t0); err != nil || d.Remaining != c.remaining {
			t.Errorf("the multi's bucket %q: %+v, %v; want %d remaining", c.key, d, err, c.remaining)
		}
	}
	release()
	if d, err := acquire(owner, []byte("held"), tb, 1, t0, 0); err != nil || d.Remaining != 8 {
		t.Errorf("acquire once released: %+v, %v", d, err)
	}
	if _, ok, err := owner.Multi(nil, items, at); err != nil || !ok {
		t.Errorf("multi once released: %v, %v", ok, err)
	}
	if err := owner.Verify(); err != nil {
		t.Error(err)
	}
}

// reservedLeft fails the test if key's bucket under l has a slot that a
// Multi reserved and did not end.
func reservedLeft(t *testing.T, e *Engine, key string, l *Limit) {
	t.Helper()
	if sl, ok, _ := e.t.Lookup(e.fingerprint([]byte(key), l), nil); ok {
		if !sl.Live() && sl.FreshAt() != math.MinInt64 {
			t.Errorf("a reservation of %q was left by a multi that gave up", key)
		}
		sl.Release()
	}
}

// Ensure a Multi (and an Each) that finds its slots, then gives up waiting
// for one of them while it locks them in order, releases the ones it had
// locked and ends its reservations.
func TestWait_multiReleases(t *testing.T) {
	tb := tokenBucket(10, 3600, 1)
	owner, att := twoHolders(t)
	if _, err := acquire(owner, []byte("held"), tb, 1, t0, 0); err != nil {
		t.Fatal(err)
	}
	before := bucketBefore(t, owner, "held", tb)
	items := []Item{{Key: []byte("new"), Limit: tb, Cost: 1}, {Key: []byte(before), Limit: tb, Cost: 1}, {Key: []byte("held"), Limit: tb, Cost: 1}}
	at := Time{Now: t0, At: t0, Wait: 50 * time.Millisecond}
	for _, each := range []bool{false, true} {
		var release func()
		multiFound = func() {
			var err error
			if release, err = att.Hold([]byte("held"), tb, t0); err != nil {
				t.Error(err)
			}
		}
		_, _, err := owner.multi(nil, items, at, each)
		multiFound = func() {}
		if !errors.Is(err, ErrLocked) {
			t.Fatalf("each %v: %v, want ErrLocked", each, err)
		}
		reservedLeft(t, owner, "new", tb)
		// The slot locked before the held one is free again.
		if err := owner.Peek(new(bucket.Decision), []byte(before), tb, at); err != nil {
			t.Errorf("each %v: the bucket locked before the held one: %v", each, err)
		}
		release()
	}
	if err := owner.Verify(); err != nil {
		t.Error(err)
	}
}
