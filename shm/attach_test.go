package shm

import (
	"errors"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Ensure a table attached to an owner's file shares its buckets and locks:
// goroutines of both, taking turns on one bucket under its slot lock, lose
// no update (neither takes the other's locks over), and buckets created by
// either are one bucket.
func TestAttach_sharesLocks(t *testing.T) {
	owner, path := newFile(t, Options{SlotCount: 64})
	att, err := Attach(path)
	if err != nil {
		t.Fatal(err)
	}
	defer att.Close()
	if att.Owner() || !owner.Owner() {
		t.Fatalf("Owner: attached %v, owner %v", att.Owner(), owner.Owner())
	}
	f := fp(owner, "shared")
	if att.Fingerprint([]byte("shared"), 0) != f {
		t.Fatal("an attached table computes another fingerprint")
	}
	const rounds = 20000
	var wg sync.WaitGroup
	for _, tb := range []*Table{owner, att, owner, att} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				s, _, err := tb.LookupOrInsert(f, 1, nil, 0, nil)
				if err != nil {
					t.Error(err)
					return
				}
				st := s.State()
				st[0]++
				st[1] = st[0] * 3 // a torn or lost update shows as st[1] != 3*st[0]
				s.Commit(math.MaxInt64)
			}
		}()
	}
	wg.Wait()
	s, ok := att.lookup(f)
	if !ok {
		t.Fatal("bucket lost")
	}
	if st := *s.State(); st[0] != 4*rounds || st[1] != 3*st[0] {
		t.Errorf("state %v after %d increments through two tables", st, 4*rounds)
	}
	s.Release()
	if st := owner.Stats(); st.Inserts != 1 || st.Torn != 0 || st.LockedOnOpen != 0 {
		t.Errorf("stats %+v: one bucket, nothing torn, no lock taken over", st)
	}
	if err := att.Sync(); !errors.Is(err, ErrNotOwner) {
		t.Errorf("Sync of an attached table: %v", err)
	}
	if err := att.Verify(); err != nil {
		t.Error(err)
	}
}

// Ensure Attach refuses a file nobody serves, and one of another version.
func TestAttach_refuses(t *testing.T) {
	tb, path := newFile(t, Options{SlotCount: 16})
	tb.Close() // closed cleanly: no owner
	if _, err := Attach(path); !errors.Is(err, ErrNoOwner) {
		t.Errorf("Attach to a file nobody serves: %v", err)
	}
	tb, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	att, err := Attach(path)
	if err != nil {
		t.Fatalf("Attach to a served file: %v", err)
	}
	att.Close()
	tb.Close()
	b, _ := os.ReadFile(path)
	b[offVersion] = 2
	copy(b[offChecksum:], binaryLE(headerSum(b)))
	old := filepath.Join(t.TempDir(), "old")
	os.WriteFile(old, b, 0o600)
	if _, err := Attach(old); !errors.Is(err, ErrVersion) {
		t.Errorf("Attach to a version-2 file: %v", err)
	}
}

// Ensure Attach refuses a file whose owner died (kill -9), and that a lock
// the dead owner held is taken over, not waited for for ever, by a new
// owner that finds it on a file it did not recover... and by an attached
// table, once the dead holder is recognised.
func TestAttach_deadOwner(t *testing.T) {
	if path := os.Getenv("SHM_TEST_OWNER"); path != "" {
		signal.Ignore(syscall.SIGTERM)
		tb, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		s, _ := tb.lookup(fp(tb, "held"))
		_ = s // die holding its lock
		os.WriteFile(path+".ready", nil, 0o600)
		time.Sleep(time.Minute)
		return
	}
	tb, path := newFile(t, Options{SlotCount: 16})
	put(t, tb, "held", 5, math.MaxInt64, 0)
	tb.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestAttach_deadOwner$")
	cmd.Env = append(os.Environ(), "SHM_TEST_OWNER="+path)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, err := os.Stat(path + ".ready"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("the owner did not start")
		}
	}
	att, err := Attach(path)
	if err != nil {
		t.Fatalf("Attach while the owner lives: %v", err)
	}
	defer att.Close()
	cmd.Process.Kill()
	cmd.Wait()
	if _, err := Attach(path); !errors.Is(err, ErrNoOwner) {
		t.Errorf("Attach after the owner died: %v", err)
	}
	done := make(chan bool, 1)
	go func() {
		s, ok := att.lookup(fp(att, "held"))
		if ok {
			c := s.Conservative()
			s.Release() // before the answer: the test may then unmap the table
			done <- c
		}
		close(done)
	}()
	select {
	case conservative := <-done:
		if !conservative {
			t.Errorf("a lock taken over from a dead holder did not repair its slot")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a lock held by a dead process was waited for")
	}
}

func binaryLE(v uint64) []byte {
	b := make([]byte, 8)
	for i := range b {
		b[i] = byte(v >> (8 * i))
	}
	return b
}

// Ensure an owner closing its file waits for the decisions attached tables
// have in progress, and that no attached table starts one afterwards: a
// decision in flight ends before the final sync, and the next one is told
// the owner is gone. A new owner's open waits the same way for tables that
// are still attached to the previous one.
func TestAttach_ownerWaitsForDecisions(t *testing.T) {
	owner, path := newFile(t, Options{SlotCount: 64})
	att, err := Attach(path)
	if err != nil {
		t.Fatal(err)
	}
	defer att.Close()
	if err := att.Enter(); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error)
	go func() { closed <- owner.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while an attached decision was in progress", err)
	case <-time.After(50 * time.Millisecond):
	}
	att.Exit()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if err := att.Enter(); !errors.Is(err, ErrNoOwner) {
		t.Fatalf("Enter after the owner closed = %v, want ErrNoOwner", err)
	}
	if att.OwnerAlive() {
		t.Error("OwnerAlive after the owner closed")
	}

	// A second attached table, then a new owner: the first one's
	// registration is stale (its owner is gone), the second's too.
	next, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	if err := att.Enter(); !errors.Is(err, ErrNoOwner) {
		t.Fatalf("Enter of a table attached to the previous owner = %v, want ErrNoOwner", err)
	}
	again, err := Attach(path)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if err := again.Enter(); err != nil {
		t.Fatalf("Enter on a table attached to the new owner: %v", err)
	}
	again.Exit()
	if !again.OwnerAlive() {
		t.Error("OwnerAlive is false for a table attached to a serving owner")
	}
}

// Ensure a holder that is only stopped (SIGSTOP) keeps its lock: a waiter
// in another table without a Wait budget waits for it, however long, and
// gets the slot as the holder left it once it goes on, not a repaired one.
func TestAttach_stoppedHolderKeepsItsLock(t *testing.T) {
	owner, path := newFile(t, Options{SlotCount: 16})
	put(t, owner, "held", 5, math.MaxInt64, 0)
	_, goOn := holdStopped(t, path, "held")
	got := make(chan [StateWords]int64, 1)
	go func() {
		s, ok := owner.lookup(fp(owner, "held"))
		if !ok || s.Conservative() {
			t.Errorf("after the wait: found %v, conservative %v", ok, ok && s.Conservative())
		}
		st := *s.State()
		s.Release() // before the answer: the test may then unmap the table
		got <- st
	}()
	select {
	case st := <-got:
		t.Fatalf("a stopped holder's lock was taken over (state %v)", st)
	case <-time.After(time.Second): // a hundred liveness checks
	}
	goOn()
	select {
	case st := <-got:
		if st[0] != 42 {
			t.Errorf("state %v, want the holder's write (42)", st)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not get the lock after the holder went on")
	}
}

// Ensure processes that exit without closing their table do not use the
// holders registry up: once every entry is taken, the next table frees
// those of processes that are gone. A lock one of them died holding is
// never taken for the new holder's, whose tag is drawn after theirs.
func TestAttach_registryOfTheDead(t *testing.T) {
	owner, path := newFile(t, Options{SlotCount: 16})
	put(t, owner, "held", 5, math.MaxInt64, 0)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	deadPID := uint32(gone.Process.Pid)
	var deadTags []uint32
	for i := range NumHolders {
		e := owner.holder(i)
		if entryLive(atomic.LoadUint32(u32at(e, 0))) {
			continue // the owner's
		}
		tag := owner.drawTag()
		atomic.StoreUint32(u32at(e, 0), tag)
		atomic.StoreUint32(u32at(e, 4), deadPID)
		deadTags = append(deadTags, tag)
	}
	// One of them died holding the bucket's lock.
	s, _ := owner.lookup(fp(owner, "held"))
	l := u32at(s.p, slotLock)
	atomic.StoreUint32(l, atomic.LoadUint32(l)&^genMask|deadTags[0]<<genShift|lockHeld)

	att, err := Attach(path)
	if err != nil {
		t.Fatalf("Attach with the registry full of dead processes: %v", err)
	}
	defer att.Close()
	if slices.Contains(deadTags, att.gen) {
		t.Fatalf("the new holder took a dead holder's tag %#x", att.gen)
	}
	if n := len(owner.Holders()); n != 2 {
		t.Errorf("%d holders after the prune, want 2 (the owner and the new one)", n)
	}
	done := make(chan bool, 1)
	go func() {
		s, ok := att.lookup(fp(att, "held"))
		c := ok && s.Conservative()
		if ok {
			s.Release() // before the answer: the test may then unmap the table
		}
		done <- c
	}()
	select {
	case repaired := <-done:
		if !repaired {
			t.Error("a lock left by a dead holder was not taken over and repaired")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a lock left by a dead holder is waited for")
	}
}
