package global

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// Ensure that a Store given a Sentinel and a master name decides on the
// master, follows the Sentinel's failover to the replica, and finds the
// buckets the replica holds.
func TestStoreSentinel(t *testing.T) {
	st := redistest.StartSentinel(t)
	ctx := context.Background()
	s := newStore(t, Options{Addrs: []string{st.Sentinel.Addr}, MasterName: redistest.SentinelMaster, Timeout: 2 * time.Second})
	l := tokenBucket(100, hour)
	for i := range 5 {
		if d, err := s.Decide(ctx, Request{Limit: l, Key: "k", Cost: 1}); err != nil || d.Remaining != int64(99-i) {
			t.Fatalf("request %d: %+v, %v", i, d, err)
		}
	}
	// Replication is asynchronous: let the replica catch up first.
	if n, err := st.Master.Client(t).Do(ctx, "WAIT", 1, 2000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT: %d, %v", n, err)
	}
	took := st.KillMasterAndWait(t)
	t.Logf("the Sentinel promoted %s in %v", st.Replica.Addr, took)
	deadline := time.Now().Add(30 * time.Second)
	for {
		d, err := s.Decide(ctx, Request{Limit: l, Key: "k", Cost: 1})
		if err == nil {
			if d.Remaining != 94 {
				t.Fatalf("after the failover: %+v, want 94 remaining (the replica's copy)", d)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no decision 30 s after the failover: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
