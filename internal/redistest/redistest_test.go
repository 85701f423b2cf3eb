package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Ensure that a server starts, answers, forgets everything on a restart and
// is gone after Kill.
func TestServer(t *testing.T) {
	ctx := context.Background()
	s := Start(t)
	c := s.Client(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Restart(t)
	if err := c.Get(ctx, "k").Err(); err != redis.Nil {
		t.Fatalf("after a restart GET k: %v, want nil (no persistence)", err)
	}
	s.Kill()
	if s.Running() {
		t.Fatal("running after Kill")
	}
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING answered after Kill")
	}
}

// Ensure that the cluster serves every slot through a cluster client, and
// that after its master is killed a replica takes over its slots.
func TestCluster(t *testing.T) {
	ctx := context.Background()
	start := time.Now()
	c := StartCluster(t)
	t.Logf("cluster up in %v", time.Since(start))
	if got := len(c.Masters()); got != 3 {
		t.Fatalf("%d masters, want 3", got)
	}
	rc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	defer rc.Close()
	for i := range 100 {
		if err := rc.Set(ctx, "k"+string(rune('a'+i%26))+string(rune('0'+i/26)), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Replication is asynchronous: wait for the replicas to hold every
	// write, or the failover may lose the last ones.
	err := rc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		n, err := m.Do(ctx, "WAIT", 1, 2000).Int()
		if err == nil && n != 1 {
			t.Errorf("WAIT at %v: %d replicas, want 1", m, n)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	m := c.Masters()[0]
	r := c.KillMaster(t, m)
	waited := c.WaitFailover(t, r)
	t.Logf("failover in %v", waited)
	if r.MasterID != "" {
		t.Fatalf("replica %s not a master after failover", r.Addr)
	}
	if got := len(c.Masters()); got != 3 {
		t.Fatalf("%d masters after failover, want 3", got)
	}
	for i := range 100 {
		k := "k" + string(rune('a'+i%26)) + string(rune('0'+i/26))
		var err error
		for try := 0; try < 50; try++ {
			if err = rc.Get(ctx, k).Err(); err == nil {
				break
			}
			rc.ReloadState(ctx) // a refused connection does not make go-redis reread the slots
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("GET %s after failover: %v", k, err)
		}
	}
}
