package global

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/redistest"
)

// workerEnv, set, makes the test binary a worker process (see worker): its
// value is the cluster's addresses, comma-separated.
const workerEnv = "SLUICE_GLOBAL_WORKER"

// The worker processes' limits: a token bucket and a gcra of workerLimit
// per hour, on one key each.
const workerLimit = 500

func workerLimits() []bucket.Limit {
	return []bucket.Limit{
		tokenBucket(workerLimit, hour),
		{Algorithm: bucket.GCRA, Burst: workerLimit - 1, Count: 1, Period: hour},
	}
}

// worker runs in a child process: eight goroutines send 100 requests on
// each limit, and it prints the admitted counts, one line per limit.
func worker() int {
	s, err := New(Options{Addrs: strings.Split(os.Getenv(workerEnv), ","), Timeout: 10 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	limits := workerLimits()
	admitted := make([]atomic.Int64, len(limits))
	var failed atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				for i, l := range limits {
					d, err := s.Decide(context.Background(), Request{Limit: l, Key: "process-shared", Cost: 1})
					if err != nil {
						fmt.Fprintln(os.Stderr, err)
						failed.Add(1)
						continue
					}
					if d.Allowed {
						admitted[i].Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	for i := range limits {
		fmt.Println(admitted[i].Load())
	}
	if failed.Load() > 0 {
		return 1
	}
	return 0
}

// Ensure that four OS processes, each with its own Store and eight
// goroutines, admit exactly the limit between them on a Redis Cluster.
func TestClusterProcesses(t *testing.T) {
	c := redistest.StartCluster(t)
	const procs = 4
	outs := make([]bytes.Buffer, procs)
	cmds := make([]*exec.Cmd, procs)
	for i := range cmds {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), workerEnv+"="+strings.Join(c.Addrs(), ","))
		cmd.Stdout, cmd.Stderr = &outs[i], os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = cmd
	}
	totals := make([]int64, len(workerLimits()))
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("worker %d: %v", i, err)
		}
		lines := strings.Fields(outs[i].String())
		if len(lines) != len(totals) {
			t.Fatalf("worker %d printed %q", i, outs[i].String())
		}
		for j, l := range lines {
			n, err := strconv.ParseInt(l, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			totals[j] += n
		}
	}
	for j, l := range workerLimits() {
		if totals[j] != workerLimit {
			t.Errorf("%v: %d processes admitted %d of %d requests, want exactly %d", l.Algorithm, procs, totals[j], procs*800, workerLimit)
		}
	}
}
