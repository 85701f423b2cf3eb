package server

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/proto"
)

// rssBytes returns the resident set size of process pid.
func rssBytes(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kb)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// latencies times n serial acquires on c.
func latencies(c *client, n int) []time.Duration {
	ds := make([]time.Duration, n)
	for i := range ds {
		start := time.Now()
		if r := c.acquire("good", tb10, 0, 0); r.Status != proto.StatusOK {
			c.t.Fatalf("good client: %+v", r)
		}
		ds[i] = time.Since(start)
	}
	slices.Sort(ds)
	return ds
}

// Ensure clients that send and never read cannot make the sidecar buffer
// without bound: 20 connections each send 2 MB of frames of 256 STATS
// (each frame asks for about 100 KB of answers) and never read. The
// sidecar stops reading a connection while 1 MiB of its answers wait, so
// its RSS grows by a few MiB per connection (it grew by about 1 GB: every
// answer to what one read brought in was built before the first write),
// and a client on another connection is served meanwhile within its usual
// latency.
func TestHostile_sendNeverRead(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	ch := startChild(t, shortDir(t))
	good := dialPath(t, ch.sock)
	before := latencies(good, 200)
	rss0 := rssBytes(t, ch.cmd.Process.Pid)

	frame, start := proto.BeginFrame(nil, proto.KindRequest, 1)
	for range 256 {
		frame = proto.AppendStats(frame)
	}
	frame = proto.EndFrame(frame, start, 256)
	var flood []byte
	for len(flood) < 2<<20 {
		flood = append(flood, frame...)
	}
	var wg sync.WaitGroup
	var conns []net.Conn
	for range 20 {
		c, err := net.Dial("unix", ch.sock)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetWriteDeadline(time.Now().Add(3 * time.Second))
			c.Write(flood) // blocks once the sidecar stops reading
		}()
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
		wg.Wait()
	}()
	var peak int64
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		peak = max(peak, rssBytes(t, ch.cmd.Process.Pid))
	}
	during := latencies(good, 200)
	peak = max(peak, rssBytes(t, ch.cmd.Process.Pid))
	buffered := stat(t, good, "buffered_bytes")
	grew := peak - rss0
	t.Logf("RSS %d MiB before, peak %d MiB (+%d MiB); buffers %d MiB; good client p50 %v max %v before, p50 %v max %v during",
		rss0>>20, peak>>20, grew>>20, buffered>>20, before[len(before)/2], before[len(before)-1], during[len(during)/2], during[len(during)-1])
	if grew > 256<<20 {
		t.Errorf("RSS grew by %d MiB under 20 clients that never read, bound 256 MiB", grew>>20)
	}
	if buffered > 21*3<<20 {
		t.Errorf("%d MiB of connection buffers for 21 connections, bound 3 MiB each", buffered>>20)
	}
	if p50 := during[len(during)/2]; p50 > 10*before[len(before)/2]+2*time.Millisecond {
		t.Errorf("good client p50 %v under attack, %v before", p50, before[len(before)/2])
	}
}
