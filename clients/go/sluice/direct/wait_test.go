package direct_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clients/go/sluice"
	"github.com/sluicehq/sluice/clients/go/sluice/direct"
	"github.com/sluicehq/sluice/internal/locktest"
)

// heldLimit is the limit of the bucket the lock-wait tests hold.
var heldLimit = sluice.TokenBucket(10, time.Hour, 1)

// Ensure the direct client's waits for a lock that a stopped process keeps
// end at the context's deadline, or at Options.LockWait without one, with
// an error naming the holder that matches direct.ErrLocked and the socket
// client's ErrContended; that a multi that gave up changed nothing; and
// that waiting costs no CPU after the first spin.
func TestDirect_lockWait(t *testing.T) {
	sc := startSidecar(t, t.TempDir(), 0)
	const lockWait = 200 * time.Millisecond
	d, err := direct.Open(sc.state(), direct.Options{LockWait: lockWait})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.Acquire(ctx, heldLimit, "held", 1); err != nil {
		t.Fatal(err)
	}
	pid, goOn := locktest.Stopped(t, sc.state(), "held", heldLimit)
	named := "the bucket is locked by process " + strconv.Itoa(pid) + ", which has held it for at least"
	gaveUp := func(what string, wait time.Duration, op func() error) {
		t.Helper()
		start := time.Now()
		err := op()
		took := time.Since(start)
		var le *direct.LockedError
		if !errors.Is(err, direct.ErrLocked) || !errors.Is(err, sluice.ErrContended) || !errors.As(err, &le) || le.Pid != pid {
			t.Errorf("%s: %v, want ErrLocked naming pid %d", what, err, pid)
		} else if !strings.Contains(err.Error(), named) {
			t.Errorf("%s: %q does not say %q", what, err, named)
		}
		if took < wait || took > wait+5*time.Second {
			t.Errorf("%s gave up after %v, want about %v", what, took, wait)
		}
	}
	gaveUp("acquire", lockWait, func() error { _, err := d.Acquire(ctx, heldLimit, "held", 1); return err })
	deadline, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
	defer cancel()
	gaveUp("acquire with a deadline", 400*time.Millisecond, func() error { _, err := d.Acquire(deadline, heldLimit, "held", 1); return err })
	gaveUp("multi", lockWait, func() error {
		_, _, err := d.Multi(ctx, []sluice.Item{{Limit: heldLimit, Key: "untouched", Cost: 1}, {Limit: heldLimit, Key: "held", Cost: 1}})
		return err
	})
	gaveUp("reset", lockWait, func() error { _, err := d.Reset(ctx, heldLimit, "held"); return err })

	// 64 waiting at once, for a second.
	const waiters = 64
	long, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, waiters)
	for range waiters {
		wg.Go(func() {
			_, err := d.Peek(long, heldLimit, "held")
			errs <- err
		})
	}
	if share, cpu, wall := locktest.CPUShare(t, time.Second); share > locktest.MaxCPUShare {
		t.Errorf("%d waiting decisions used %v of CPU in %v (%.0f%%), want a small part", waiters, cpu, wall, 100*share)
	} else {
		t.Logf("%d waiting decisions used %v of CPU in %v (%.1f%%)", waiters, cpu, wall, 100*share)
	}
	goOn()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("a waiter: %v", err)
		}
	}
	if dec, err := d.Peek(ctx, heldLimit, "untouched"); err != nil || dec.Remaining != 10 {
		t.Errorf("the multi's other bucket: %+v, %v; want it untouched", dec, err)
	}
	if dec, err := d.Acquire(ctx, heldLimit, "held", 1); err != nil || dec.Remaining != 8 {
		t.Errorf("acquire after the holder went on: %+v, %v", dec, err)
	}
}
