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
	srv := redistest.Start(t)
	s := newStore(t, Options{Addrs: []string{srv.Addr}})
	path := filepath.Join(t.TempDir(), "state.leases")
	j, err := OpenJournal(path, 8)
	if err != nil {
		t.Fatal(err)
	}
	ls := NewLeases(s, LeaseOptions{Size: 10, TTL: time.Hour, Journal: j})
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
	// The process dies: the leases stay in the journal.
	ls.mu.Lock()
	ls.closed = true
	ls.mu.Unlock()
	close(ls.stop)
	ls.swept.Wait()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}

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
