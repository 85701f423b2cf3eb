package engine

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/proto"
)

// Ensure the clock never starts below the time the state file recorded
// (the wall clock went back an hour across a restart), and advances with
// the monotonic clock.
func TestClock(t *testing.T) {
	ahead := time.Now().Add(time.Hour).UnixNano()
	now := Clock(ahead)
	a := now()
	if a < ahead {
		t.Errorf("clock %d starts below the recorded %d", a, ahead)
	}
	time.Sleep(2 * time.Millisecond)
	if b := now(); b-a < int64(2*time.Millisecond) || b-a > int64(time.Second) {
		t.Errorf("clock advanced %v in 2 ms", time.Duration(b-a))
	}
	if w := Clock(0)(); w < time.Now().Add(-time.Second).UnixNano() {
		t.Errorf("with nothing recorded the clock is not the wall clock: %d", w)
	}
}

// Ensure Do decides each operation as its method does, and answers a shadow
// request's denial as allowed, counted as shadowed, having consumed what
// the denial consumed.
func TestDo(t *testing.T) {
	e := newEngine(t, 64)
	l := lim(bucket.Limit{Algorithm: bucket.TokenBucket, Max: 2, RefillTime: 60 * sec, RefillAmount: 2})
	key := []byte("k")
	now := int64(1_700_000_000) * sec
	var res Result
	do := func(r Request) error {
		t.Helper()
		r.Key, r.Limit, r.Time = key, l, At(now)
		return e.Do(&r, &res)
	}
	if err := do(Request{Op: proto.OpAcquire, N: 2}); err != nil || !res.Decision.Allowed || res.Decision.Remaining != 0 || res.Shadowed {
		t.Fatalf("acquire 2: %+v, %v", res, err)
	}
	if err := do(Request{Op: proto.OpAcquire, N: 1, Shadow: true}); err != nil || !res.Decision.Allowed || !res.Shadowed ||
		res.Decision.RetryAfter != -1 || res.Decision.Remaining != 0 {
		t.Fatalf("shadow acquire of an empty bucket: %+v, %v", res, err)
	}
	if err := do(Request{Op: proto.OpAcquire, N: 1}); err != nil || res.Decision.Allowed || res.Shadowed {
		t.Fatalf("acquire of an empty bucket: %+v, %v", res, err)
	}
	if err := do(Request{Op: proto.OpRefund, N: 1}); err != nil || res.Decision.Remaining != 1 {
		t.Fatalf("refund 1: %+v, %v", res, err)
	}
	if err := do(Request{Op: proto.OpPeek}); err != nil || !res.Decision.Allowed || res.Decision.Remaining != 1 {
		t.Fatalf("peek: %+v, %v", res, err)
	}
	if err := do(Request{Op: proto.OpReset}); err != nil || !res.Existed {
		t.Fatalf("reset: %+v, %v", res, err)
	}
	if err := do(Request{Op: proto.OpLease}); !errors.Is(err, ErrNotConcurrency) {
		t.Fatalf("lease of a token bucket: %v", err)
	}
	if err := do(Request{Op: proto.OpScan}); !errors.Is(err, proto.ErrUnknownOpcode) {
		t.Fatalf("scan: %v", err)
	}
	if err := do(Request{Op: proto.OpAcquire, N: -1}); !errors.Is(err, ErrNegativeCost) {
		t.Fatalf("negative cost: %v", err)
	}
}

// Ensure Wire reads the wire's flags: STRICT and SMYTE for the algorithms,
// SHADOW, and AT, which alone moves the request's time off the clock.
func TestRequestWire(t *testing.T) {
	var r Request
	r.Time = At(100)
	r.Wire(proto.OpAcquire, []byte("k"), 3, proto.FlagStrict|proto.FlagShadow, 7)
	if r.Op != proto.OpAcquire || string(r.Key) != "k" || r.N != 3 || r.Flags != bucket.Strict || !r.Shadow || r.Time.At != 100 {
		t.Fatalf("%+v", r)
	}
	r.Wire(proto.OpPeek, []byte("k"), 0, proto.FlagSmyte|proto.FlagAt, 7)
	if r.Flags != bucket.Smyte || r.Shadow || r.Time.At != 7 || r.Time.Now != 100 {
		t.Fatalf("%+v", r)
	}
}

// Ensure every error of the engine has its status, and an error of no
// status is internal.
func TestStatus(t *testing.T) {
	for _, c := range []struct {
		err  error
		want proto.Status
	}{
		{ErrTableFull, proto.StatusTableFull}, {ErrArenaFull, proto.StatusTableFull},
		{ErrEmptyKey, proto.StatusInvalidKey}, {ErrKeyTooLong, proto.StatusInvalidKey},
		{fmt.Errorf("%w: -1", ErrNegativeCost), proto.StatusInvalidCost},
		{ErrTooManyItems, proto.StatusTooManyItems},
		{ErrContended, proto.StatusContended}, {&LockedError{Pid: 1}, proto.StatusContended},
		{ErrTime, proto.StatusMalformed},
		{ErrLeaseOnly, proto.StatusInvalidLimit}, {ErrNotConcurrency, proto.StatusInvalidLimit},
		{proto.ErrUnknownOpcode, proto.StatusUnknownOpcode},
		{errors.New("disk on fire"), proto.StatusInternal},
	} {
		if got := Status(c.err); got != c.want {
			t.Errorf("Status(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
