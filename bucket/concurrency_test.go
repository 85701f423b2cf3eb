package bucket

import "testing"

func TestConcurrency(t *testing.T) {
	l := Limit{Algorithm: Concurrency, Max: 2, Lease: sec}
	b := newExtBucket(l, t0)
	runExt(t, l, b, []extStep{
		{opAcquire, t0, t0 + 1, allow(1, sec), true},
		{opAcquire, t0 + 100*ms, t0 + 2, allow(0, sec), true},
		{opAcquire, t0 + 200*ms, 0, deny(0, 800*ms, 900*ms), false},
		{opPeek, t0 + 200*ms, 0, deny(0, 800*ms, 900*ms), false},
		// DecideExt takes no lease, whatever the cost: it is a peek.
		{opDecide, t0 + 200*ms, 1, deny(0, 800*ms, 900*ms), false},
		{opRelease, t0 + 300*ms, t0 + 1, allow(1, 800*ms), true},
		{opDecide, t0 + 300*ms, 1, allow(1, 800*ms), false},
		{opRelease, t0 + 300*ms, t0 + 1, allow(1, 800*ms), false}, // released already
		{opRelease, t0 + 300*ms, 12345, allow(1, 800*ms), false},  // unknown
		{opRelease, t0 + 300*ms, 0, allow(1, 800*ms), false},
		{opAcquire, t0 + 300*ms, t0 + 3, allow(0, sec), true},
		// t0+2 expires at t0+1100ms: its entry is free again.
		{opAcquire, t0 + 1100*ms, t0 + 4, allow(0, sec), true},
		{opRelease, t0 + 1200*ms, t0 + 2, deny(0, 100*ms, 900*ms), false}, // expired
		// Backwards: expiries are absolute, so both entries are held.
		{opAcquire, t0 + 500*ms, 0, deny(0, 800*ms, 1600*ms), false},
		{opRefund, t0 + 1200*ms, 5, deny(0, 100*ms, 900*ms), false}, // leases go back by ReleaseLease only
		{opPeek, t0 + 3*sec, 0, allow(2, 0), false},
	})
	if b.s[0] != t0 {
		t.Errorf("word 0 = t0%+d, want t0: a lease leaves it as InitExt set it", b.s[0]-t0)
	}

	// A drained bucket holds every entry for a lease under id 0, which
	// nothing releases.
	b = newExtBucket(l, t0)
	l.Drained(t0+5, &b.s, b.ext)
	checkExtSum(t, b)
	runExt(t, l, b, []extStep{
		{opPeek, t0 + 5, 0, deny(0, sec, sec), false},
		{opRelease, t0 + 5, 0, deny(0, sec, sec), false},
		{opAcquire, t0 + 5 + sec, t0 + 6, allow(1, sec), true},
	})
}

// Ensure a lease holds the id the caller drew, unless the bucket cannot
// tell it from another: 0 (no lease) and an id one of its entries has,
// held or not, are replaced by the next value that is neither; ids are
// any int64, negative ones (u64 ids above 2^63 on the wire) included.
func TestConcurrencyIDs(t *testing.T) {
	l := Limit{Algorithm: Concurrency, Max: 4, Lease: sec}
	b := newExtBucket(l, t0)
	var d Decision
	for _, c := range []struct{ id, want int64 }{
		{-5, -5},
		{-5, -4}, // held
		{0, 1},   // no lease has id 0
		{-5, -3}, // -5 and -4 held
	} {
		if lease, _ := l.AcquireLease(t0, &b.s, b.ext, c.id, &d); lease != c.want || !d.Allowed {
			t.Fatalf("AcquireLease under %d: lease %d, %+v; want %d", c.id, lease, d, c.want)
		}
	}
	if ok, _ := l.ReleaseLease(t0, &b.s, b.ext, -4, &d); !ok {
		t.Fatal("lease -4 was not released")
	}
	// -4 is still in its (free) entry: a new lease does not take it.
	if lease, _ := l.AcquireLease(t0, &b.s, b.ext, -4, &d); lease != -2 {
		t.Fatalf("AcquireLease under -4 after its release: lease %d, want -2", lease)
	}
	for _, id := range []int64{-5, -2, 1, -3} {
		if ok, _ := l.ReleaseLease(t0, &b.s, b.ext, id, &d); !ok {
			t.Fatalf("lease %d was not released", id)
		}
	}
	if ok, _ := l.ReleaseLease(t0, &b.s, b.ext, -4, &d); ok {
		t.Fatal("a released lease was released again")
	}
	// A wrap past the largest int64 is a value like another.
	if lease, _ := l.AcquireLease(t0, &b.s, b.ext, maxI64, &d); lease != maxI64 {
		t.Fatalf("lease %d, want MaxInt64", lease)
	}
	if lease, _ := l.AcquireLease(t0, &b.s, b.ext, maxI64, &d); lease != minI64 {
		t.Fatalf("lease %d, want MinInt64", lease)
	}
}

func TestConcurrencyExtremes(t *testing.T) {
	l := Limit{Algorithm: Concurrency, Max: 1, Lease: MaxDuration}
	runExt(t, l, newExtBucket(l, MaxTime), []extStep{
		{opAcquire, MaxTime, MaxTime + 1, allow(0, MaxDuration), true},
		{opAcquire, MaxTime + 1, 0, deny(0, MaxDuration-1, MaxDuration-1), false},
		{opRelease, MaxTime + 1, MaxTime + 1, allow(1, 0), true},
		// Past MaxTime the expiry saturates at math.MaxInt64.
		{opAcquire, maxI64 - 1, MaxTime + 2, allow(0, 1), true},
		{opAcquire, maxI64 - 1, 0, deny(0, 1, 1), false},
	})
}

// leaseModel is concurrency as a plain set of leases: id -> expiry, and
// which were released.
type leaseModel struct {
	l        Limit
	expiry   map[int64]int64
	released map[int64]bool
}

// held returns the leases held at now and the earliest of their expiries.
func (m *leaseModel) held(now int64) (n, earliest int64) {
	earliest = maxI64
	for id, e := range m.expiry {
		if !m.released[id] && e > now {
			n++
			earliest = min(earliest, e)
		}
	}
	return n, earliest
}

func (m *leaseModel) peek(now int64) Decision {
	d := Decision{Limit: m.l.Max, RetryAfter: -1}
	n, earliest := m.held(now)
	d.Remaining = m.l.Max - n
	if n < m.l.Max {
		d.Allowed = true
	} else {
		d.RetryAfter = earliest - now
	}
	for id, e := range m.expiry {
		if !m.released[id] {
			d.ResetAfter = max(d.ResetAfter, e-now)
		}
	}
	return d
}

// acquire takes a lease under id, drawn at random: it is none of the ids
// taken before (the chance that it is, over a test run, is below 2^-40).
func (m *leaseModel) acquire(now, id int64) (Decision, int64) {
	if d := m.peek(now); !d.Allowed {
		return d, 0
	}
	m.expiry[id] = now + m.l.Lease
	d := m.peek(now)
	d.Allowed, d.RetryAfter = true, -1
	return d, id
}

func (m *leaseModel) release(now, id int64) (Decision, bool) {
	e, ok := m.expiry[id]
	ok = ok && !m.released[id] && e > now
	if ok {
		m.released[id] = true
	}
	return m.peek(now), ok
}

// TestConcurrencyModel: AcquireLease, ReleaseLease, PeekExt and DecideExt
// agree with the model over random gaps (time never going backwards here:
// see TestExtBackwardsNeverMints), releases of held, released, expired and
// unknown leases, at times near 0 and MaxTime; never more than Max leases
// are held, and word 1 stays the extension's ExtSum.
func TestConcurrencyModel(t *testing.T) {
	for seed := uint64(1); seed <= 4*seeds; seed++ {
		r := newRand(seed)
		l := Limit{Algorithm: Concurrency, Max: 1 + r.Int64N(6), Lease: ms * (1 + r.Int64N(50))}
		switch r.IntN(4) {
		case 0:
			l.Max = MaxConcurrency
		case 1:
			l.Lease = MaxDuration
		}
		if err := l.Validate(); err != nil {
			t.Fatal(err)
		}
		now := r.Int64N(l.Lease)
		if r.IntN(2) == 0 {
			now = MaxTime - r.Int64N(100*min(l.Lease, MaxTime/100))
		}
		b := newExtBucket(l, now)
		m := &leaseModel{l: l, expiry: map[int64]int64{}, released: map[int64]bool{}}
		var ids []int64
		for i := range 400 {
			now = min(satAdd(now, r.Int64N(2*l.Lease/min(l.Max, 8))), MaxTime)
			var got, want Decision
			op, arg := "", int64(0)
			switch r.IntN(6) {
			case 0, 1:
				op = "AcquireLease"
				id := int64(r.Uint64() | 1) // never 0
				lease, _ := l.AcquireLease(now, &b.s, b.ext, id, &got)
				var wantLease int64
				want, wantLease = m.acquire(now, id)
				if lease != wantLease {
					t.Fatalf("seed %d step %d %+v: AcquireLease(t%+d) = lease %d, model %d", seed, i, l, now, lease, wantLease)
				}
				if lease != 0 {
					ids = append(ids, lease)
				}
			case 2, 3:
				op = "ReleaseLease"
				arg = r.Int64N(3) - 1 // unknown
				if len(ids) > 0 && r.IntN(8) > 0 {
					arg = ids[r.IntN(len(ids))]
				}
				released, _ := l.ReleaseLease(now, &b.s, b.ext, arg, &got)
				var wantReleased bool
				want, wantReleased = m.release(now, arg)
				if released != wantReleased {
					t.Fatalf("seed %d step %d %+v: ReleaseLease(t%+d, %d) = %v, model %v", seed, i, l, now, arg, released, wantReleased)
				}
			case 4:
				op = "PeekExt"
				l.Peek(now, &b.s, b.ext, &got)
				want = m.peek(now)
			case 5:
				op, arg = "DecideExt", r.Int64N(3)
				if l.Decide(now, &b.s, b.ext, arg, 0, &got) {
					t.Fatalf("seed %d step %d: DecideExt changed the state", seed, i)
				}
				want = m.peek(now)
			}
			if got != want {
				t.Fatalf("seed %d step %d %+v: %s(t%+d, %d) = %+v, model %+v", seed, i, l, op, now, arg, got, want)
			}
			if n, _ := m.held(now); n > l.Max {
				t.Fatalf("seed %d step %d: %d leases held", seed, i, n)
			}
			checkExtSum(t, b)
		}
	}
	t.Logf("seeds 1..%d", 4*seeds)
}
