package global

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/redistest"
)

// Ensure that the leases a process dies holding (it never closes its
// Leases) are returned by the next process on the same journal: their
// unused tokens, once, and only theirs.
func TestJournal(t *testing.T) {
	s, ls, j, path := journaled(t)
	ctx := context.Background()
	tb, gcra := tokenBucket(100, hour), bucket.Limit{Algorithm: bucket.GCRA, Burst: 99, Count: 1, Period: hour}
	for range 3 {
		if d, err := ls.Decide(ctx, tb, "a", 1); err != nil || !d.Allowed {
			t.Fatal(d, err)
		}
	}
	if d, err := ls.Decide(ctx, gcra, "b", 4); err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	if got := globalRemaining(t, s, tb, "a") + globalRemaining(t, s, gcra, "b"); got != 180 {
		t.Fatalf("%d left in Redis with two leases of 10 out, want 180", got)
	}
	die(t, ls, j)
	j2, err := OpenJournal(path, 0) // the size is the file's
	if err != nil {
		t.Fatal(err)
	}
	defer j2.Close()
	if n := j2.Pending(); n != 2 {
		t.Fatalf("%d leases pending in the journal, want 2", n)
	}
	n, err := j2.Recover(ctx, s)
	if err != nil || n != 7+6 {
		t.Fatalf("Recover returned %d tokens, %v; want 13", n, err)
	}
	if a, b := globalRemaining(t, s, tb, "a"), globalRemaining(t, s, gcra, "b"); a != 97 || b != 96 {
		t.Fatalf("after the recovery: %d and %d left in Redis, want 97 and 96 (what was admitted is spent)", a, b)
	}
	if n, err := j2.Recover(ctx, s); n != 0 || err != nil || j2.Pending() != 0 {
		t.Fatalf("a second Recover returned %d, %v: a lease is returned once", n, err)
	}
}

// journaled returns a Store on a Redis of its own, and Leases of 10 tokens
// for an hour journaled in j, a journal of 8 records at path.
func journaled(t *testing.T) (*Store, *Leases, *Journal, string) {
	t.Helper()
	srv := redistest.Start(t)
	s := newStore(t, Options{Addrs: []string{srv.Addr}})
	path := filepath.Join(t.TempDir(), "state.leases")
	j, err := OpenJournal(path, 8)
	if err != nil {
		t.Fatal(err)
	}
	return s, NewLeases(s, LeaseOptions{Size: 10, TTL: time.Hour, Journal: j}), j, path
}

// die stops ls as a process killed with kill -9 does: its leases are not
// returned and stay in its journal j, which it closes.
func die(t *testing.T, ls *Leases, j *Journal) {
	t.Helper()
	ls.mu.Lock()
	ls.closed = true
	ls.mu.Unlock()
	close(ls.stop)
	ls.swept.Wait()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
}

// Ensure that a window_counters lease is journaled with every word of its
// limit (its counters and count_denied): the next process returns its
// unused tokens to the same bucket, once.
func TestJournal_windowCounters(t *testing.T) {
	s, ls, j, path := journaled(t)
	ctx := context.Background()
	// Sub-windows of a day: the lease, which ends with its sub-window,
	// outlives the test.
	wc := bucket.Limit{Algorithm: bucket.WindowCounters, Max: 100, Window: 48 * hour, Counters: 2, CountDenied: true}
	for range 3 {
		if d, err := ls.Decide(ctx, wc, "w", 1); err != nil || !d.Allowed {
			t.Fatal(d, err)
		}
	}
	if got := globalRemaining(t, s, wc, "w"); got != 90 {
		t.Fatalf("%d left in Redis with a lease of 10 out, want 90", got)
	}
	die(t, ls, j)
	j2, err := OpenJournal(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer j2.Close()
	if n, err := j2.Recover(ctx, s); err != nil || n != 7 {
		t.Fatalf("Recover returned %d tokens, %v; want the lease's 7", n, err)
	}
	if got := globalRemaining(t, s, wc, "w"); got != 97 {
		t.Fatalf("after the recovery %d left in Redis, want 97 (what was admitted is spent)", got)
	}
	if n, err := j2.Recover(ctx, s); n != 0 || err != nil {
		t.Fatalf("a second Recover returned %d, %v: a lease is returned once", n, err)
	}
}

// Ensure that a journal of version 1 is read: its leases are returned; it
// then journals what version 1 can hold (not a window_counters lease),
// and is made a version-2 journal once it is opened with nothing held.
func TestJournal_version1(t *testing.T) {
	s, ls, j, path := journaled(t)
	ctx := context.Background()
	tb := tokenBucket(100, hour)
	if d, err := ls.Decide(ctx, tb, "a", 1); err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	die(t, ls, j)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[8] = 1 // what a sidecar of version 1 left: the same words, none after the key
	rec := b[journalHeader:]
	clear(rec[offCounters:recordSize])
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}

	j1, err := OpenJournal(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if j1.version != 1 || j1.Pending() != 1 {
		t.Fatalf("version %d with %d pending, want a journal of version 1 holding one lease", j1.version, j1.Pending())
	}
	wc := bucket.Limit{Algorithm: bucket.WindowCounters, Max: 100, Window: 48 * hour, Counters: 2}
	if i := j1.put(&wc, "w", 5, "1", time.Now()); i != -1 {
		t.Errorf("a version-1 journal took a window_counters lease (record %d): it cannot hold its counters", i)
	}
	if n, err := j1.Recover(ctx, s); err != nil || n != 9 {
		t.Fatalf("Recover of a version-1 journal returned %d tokens, %v; want 9", n, err)
	}
	if got := globalRemaining(t, s, tb, "a"); got != 99 {
		t.Fatalf("%d left in Redis after the recovery, want 99", got)
	}
	if err := j1.Close(); err != nil {
		t.Fatal(err)
	}
	j2, err := OpenJournal(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer j2.Close()
	if b, _ := os.ReadFile(path); j2.version != JournalVersion || b[8] != JournalVersion {
		t.Fatalf("a version-1 journal with nothing held is of version %d (header %d) once opened, want %d", j2.version, b[8], JournalVersion)
	}
	if i := j2.put(&wc, "w", 5, "1", time.Now()); i == -1 {
		t.Error("the upgraded journal did not take a window_counters lease")
	}
}

// Ensure that a journal of another version, or not a journal, is refused
// with a clear error, and left as it is.
func TestJournal_bad(t *testing.T) {
	dir := t.TempDir()
	j, err := OpenJournal(filepath.Join(dir, "ok"), 4)
	if err != nil {
		t.Fatal(err)
	}
	j.Close()
	b, _ := os.ReadFile(filepath.Join(dir, "ok"))
	b[8] = 9 // version 9
	os.WriteFile(filepath.Join(dir, "v9"), b, 0o600)
	os.WriteFile(filepath.Join(dir, "text"), []byte("not a journal at all, but long enough to be read as one........."), 0o600)
	os.WriteFile(filepath.Join(dir, "short"), []byte("SLUICELJ"), 0o600)
	for _, name := range []string{"v9", "text", "short"} {
		if _, err := OpenJournal(filepath.Join(dir, name), 4); !errors.Is(err, ErrJournal) {
			t.Errorf("%s: %v, want ErrJournal", name, err)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}
