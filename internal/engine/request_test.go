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

// fakeRemote decides every request as denied (or fails with err), and
// records what it was handed.
type fakeRemote struct {
	got []proto.Opcode
	err error
}

func (f *fakeRemote) Decide(r Request) (Result, error) {
	f.got = append(f.got, r.Op)
	if f.err != nil {
		return Result{}, f.err
	}
	return Result{Decision: bucket.Decision{Allowed: false, Limit: 5, RetryAfter: sec}, Outage: proto.OutageClosed}, nil
}

// Ensure Do hands a request with a Remote to it, never to the table, after
// the checks of a global limit, in their order (its time, then key and
// cost, then the operation against the algorithm), and applies shadow mode
// to what the Remote decided.
func TestDoRemote(t *testing.T) {
	e := newEngine(t, 64)
	tb := lim(bucket.Limit{Algorithm: bucket.TokenBucket, Max: 2, RefillTime: 60 * sec, RefillAmount: 2})
	conc := lim(bucket.Limit{Algorithm: bucket.Concurrency, Max: 2, Lease: 60 * sec})
	now := int64(1_700_000_000) * sec
	for _, c := range []struct {
		name string
		r    Request
		want error // nil: handed to the Remote
	}{
		{"acquire", Request{Op: proto.OpAcquire, Key: []byte("k"), Limit: tb, N: 1}, nil},
		{"own time", Request{Op: proto.OpAcquire, Key: []byte("k"), Limit: tb, N: 1, OwnTime: true}, ErrRemoteTime},
		{"own time before the key", Request{Op: proto.OpPeek, Limit: tb, OwnTime: true}, ErrRemoteTime},
		{"empty key", Request{Op: proto.OpPeek, Limit: tb}, ErrEmptyKey},
		{"long key", Request{Op: proto.OpReset, Key: make([]byte, MaxKeyLen+1), Limit: tb}, ErrKeyTooLong},
		{"negative cost", Request{Op: proto.OpRefund, Key: []byte("k"), Limit: tb, N: -1}, ErrNegativeCost},
		{"acquire of concurrency", Request{Op: proto.OpAcquire, Key: []byte("k"), Limit: conc, N: 1}, ErrLeaseOnly},
		{"refund of concurrency", Request{Op: proto.OpRefund, Key: []byte("k"), Limit: conc, N: 1}, ErrLeaseOnly},
		{"peek of concurrency", Request{Op: proto.OpPeek, Key: []byte("k"), Limit: conc}, nil},
		{"lease", Request{Op: proto.OpLease, Key: []byte("k"), Limit: conc, Lease: 7}, nil},
		{"lease of a token bucket", Request{Op: proto.OpLease, Key: []byte("k"), Limit: tb, Lease: 7}, ErrNotConcurrency},
		{"release of a token bucket", Request{Op: proto.OpRelease, Key: []byte("k"), Limit: tb, Lease: 7}, ErrNotConcurrency},
		{"unknown operation", Request{Op: proto.OpScan, Key: []byte("k"), Limit: tb}, proto.ErrUnknownOpcode},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeRemote{}
			r := c.r
			r.Remote, r.Time = f, At(now)
			res := Result{Outage: proto.OutageOpen, Shadowed: true}
			err := e.Do(&r, &res)
			if !errors.Is(err, c.want) || c.want == nil && err != nil {
				t.Fatalf("Do: %v, want %v", err, c.want)
			}
			if handed := len(f.got) == 1; handed != (c.want == nil) {
				t.Fatalf("handed to the Remote: %v, want %v", handed, c.want == nil)
			}
			if c.want == nil && (res.Outage != proto.OutageClosed || res.Shadowed) {
				t.Errorf("result %+v: want the Remote's, not shadowed", res)
			}
		})
	}
	if st := e.Stats(); st.Used != 0 {
		t.Errorf("%d slots used after remote requests only", st.Used)
	}

	// Shadow mode applies to the Remote's denial of an ACQUIRE, and to
	// nothing else; an error of the Remote is Do's.
	f := &fakeRemote{}
	var res Result
	r := Request{Op: proto.OpAcquire, Key: []byte("k"), Limit: tb, N: 1, Shadow: true, Time: At(now), Remote: f}
	if err := e.Do(&r, &res); err != nil || !res.Shadowed || !res.Decision.Allowed || res.Decision.RetryAfter != -1 {
		t.Errorf("shadow acquire: %+v, %v", res, err)
	}
	r.Op = proto.OpPeek
	if err := e.Do(&r, &res); err != nil || res.Shadowed || res.Decision.Allowed {
		t.Errorf("shadow peek: %+v, %v", res, err)
	}
	boom := errors.New("redis is down")
	r.Remote = &fakeRemote{err: boom}
	if err := e.Do(&r, &res); !errors.Is(err, boom) {
		t.Errorf("the Remote's error: got %v", err)
	}
	if st := Status(ErrRemoteTime); st != proto.StatusInvalidLimit {
		t.Errorf("ErrRemoteTime's status %v, want invalid limit", st)
	}
}
