package server

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	sluicedOnce sync.Once
	sluicedBin  string
	sluicedErr  error
)

// realSluiced builds cmd/sluiced once per test binary and runs it on a
// fresh state file, serving the Redis protocol on the Unix socket it
// returns. It is stopped with SIGTERM at the end of the test and must exit 0.
func realSluiced(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts processes")
	}
	sluicedOnce.Do(func() {
		dir, err := os.MkdirTemp("", "slbin")
		if err != nil {
			sluicedErr = err
			return
		}
		sluicedBin = filepath.Join(dir, "sluiced")
		out, err := exec.Command("go", "build", "-o", sluicedBin, "github.com/sluicehq/sluice/cmd/sluiced").CombinedOutput()
		if err != nil {
			sluicedErr = fmt.Errorf("go build cmd/sluiced: %v\n%s", err, out)
		}
	})
	if sluicedErr != nil {
		t.Fatal(sluicedErr)
	}
	dir := shortDir(t)
	sock := filepath.Join(dir, "r.sock")
	var stderr bytes.Buffer
	cmd := exec.Command(sluicedBin, "--state", filepath.Join(dir, "state"), "--socket", filepath.Join(dir, "s.sock"),
		"--resp-socket", sock, "--slots", "4096")
	cmd.Dir, cmd.Stderr = dir, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("sluiced did not exit cleanly: %v\n%s", err, stderr.String())
			}
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			t.Errorf("sluiced did not stop within 10 s of SIGTERM")
		}
	})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return sock
		}
		if time.Now().After(deadline) {
			t.Fatalf("sluiced did not listen within 10 s:\n%s", stderr.String())
		}
	}
}

// throttled is CL.THROTTLE t 2 1 60 four times: 3 tokens, one every 60 s;
// the fourth is limited.
var throttled = [][]int64{{0, 3, 2, -1, 60}, {0, 3, 1, -1, 120}, {0, 3, 0, -1, 180}, {1, 3, 0, 60, 180}}

// Ensure go-redis v9 with its default options (RESP3, CLIENT SETINFO, the
// connection pool) runs the rate-limit commands, a Pipeline and a
// TxPipeline (MULTI/EXEC) against a real sluiced, and that many goroutines
// sharing the pool count every token once.
func TestCompat_goRedis(t *testing.T) {
	sock := realSluiced(t)
	rdb := redis.NewClient(&redis.Options{Network: "unix", Addr: sock})
	defer rdb.Close()
	ctx := context.Background()
	info, err := rdb.ClientInfo(ctx).Result()
	if err != nil || info.Resp != 3 || !strings.HasPrefix(info.LibName, "go-redis") {
		t.Fatalf("CLIENT INFO: %+v %v (want RESP3 and go-redis's CLIENT SETINFO)", info, err)
	}
	check := func(what string, got, want any) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %v, want %v", what, got, want)
		}
	}
	v, err := rdb.Do(ctx, "RL.REDUCE", "k", 10, 60, "TAKE", 3, "REFILL", 5).Int64()
	check("RL.REDUCE", []any{v, err}, []any{int64(10), nil})
	v, err = rdb.Do(ctx, "RL.GET", "k", 10, 60, "REFILL", 5).Int64()
	check("RL.GET", []any{v, err}, []any{int64(7), nil})
	cell, err := rdb.Do(ctx, "CL.THROTTLE", "c", 4, 1, 60).Int64Slice()
	check("CL.THROTTLE", []any{cell, err}, []any{[]int64{0, 5, 4, -1, 60}, nil})

	for _, tx := range []bool{false, true} {
		key := fmt.Sprint("pipe-", tx)
		pipe := rdb.Pipeline()
		if tx {
			pipe = rdb.TxPipeline()
		}
		var cmds []*redis.Cmd
		for range 4 {
			cmds = append(cmds, pipe.Do(ctx, "CL.THROTTLE", key, 2, 1, 60))
		}
		reduce := pipe.Do(ctx, "RL.REDUCE", key, 5, 60, "TAKE", 2)
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatalf("pipeline (tx %v): %v", tx, err)
		}
		for i, c := range cmds {
			got, err := c.Int64Slice()
			check(fmt.Sprintf("pipeline (tx %v) reply %d", tx, i), []any{got, err}, []any{throttled[i], nil})
		}
		n, err := reduce.Int64()
		check(fmt.Sprintf("pipeline (tx %v) RL.REDUCE", tx), []any{n, err}, []any{int64(5), nil})
	}

	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				if err := rdb.Do(ctx, "RL.REDUCE", "shared", 10000, 3600).Err(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	v, err = rdb.Do(ctx, "RL.GET", "shared", 10000, 3600).Int64()
	check("RL.GET after 800 concurrent RL.REDUCE", []any{v, err}, []any{int64(9200), nil})
	if n := rdb.PoolStats().TotalConns; n < 2 {
		t.Errorf("the pool opened %d connections for 32 goroutines", n)
	}
	if err := rdb.Watch(ctx, func(*redis.Tx) error { return nil }, "k"); err == nil || !strings.Contains(err.Error(), "WATCH is not supported") {
		t.Errorf("Watch: %v", err)
	}
}

// redisTool returns the path of redis-cli or redis-benchmark, which CI
// installs (Debian's redis-tools).
func redisTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is needed (apt-get install redis-tools)", name)
	}
	return p
}

// Ensure redis-cli, as a person types it (RESP2) and with -3 (RESP3), runs
// the rate-limit commands, a transaction and a --pipe batch.
func TestCompat_redisCLI(t *testing.T) {
	cli := redisTool(t, "redis-cli")
	sock := realSluiced(t)
	run := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.Command(cli, append([]string{"-s", sock}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil || stderr.Len() > 0 {
			t.Fatalf("redis-cli %v: %v\n%s%s", args, err, out, stderr.String())
		}
		return strings.TrimSpace(string(out))
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"RL.REDUCE", "k", "10", "60", "TAKE", "3", "REFILL", "5"}, "10"},
		{[]string{"-3", "RL.PREDUCE", "k", "10", "60000", "TAKE", "3", "REFILL", "5"}, "7"},
		{[]string{"CL.THROTTLE", "c", "4", "1", "60"}, "0\n5\n4\n-1\n60"},
		{[]string{"-3", "CL.THROTTLE", "c", "4", "1", "60"}, "0\n5\n3\n-1\n120"},
		{[]string{"-3", "HELLO", "3"}, "server sluice\nversion " + redisVersion + "\nproto 3\nid "},
		{[]string{"CONFIG", "GET", "save"}, "save"},
	} {
		if out := run("", c.args...); !strings.HasPrefix(out, c.want) {
			t.Errorf("redis-cli %v: %q, want %q", c.args, out, c.want)
		}
	}
	// The transaction: nothing is spent before EXEC, and EXEC answers.
	if out := run("MULTI\nCL.THROTTLE m 1 1 60\nRL.REDUCE m 2 60\nEXEC\n"); out != "OK\nQUEUED\nQUEUED\n0\n2\n1\n-1\n60\n2" {
		t.Errorf("MULTI/EXEC: %q", out)
	}
	checkRedisCliPipe(t, run)
}

// Ensure redis-benchmark runs its PING tests and the rate-limit commands,
// pipelined, without a warning (it asks CONFIG GET save and appendonly),
// and that every request it sent was decided.
func TestCompat_redisBenchmark(t *testing.T) {
	bench := redisTool(t, "redis-benchmark")
	sock := realSluiced(t)
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bench, append([]string{"-s", sock, "-c", "4", "-q"}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil || stderr.Len() > 0 {
			t.Fatalf("redis-benchmark %v: %v\nstdout: %s\nstderr: %s", args, err, out, stderr.String())
		}
		if !strings.Contains(string(out), "requests per second") {
			t.Fatalf("redis-benchmark %v: %s", args, out)
		}
		return string(out)
	}
	run("-n", "2000", "-t", "ping")
	run("-n", "2000", "-P", "16", "RL.REDUCE", "bench", "1000000", "3600", "TAKE", "2", "REFILL", "10")
	run("-n", "2000", "-P", "16", "CL.THROTTLE", "cell", "5000", "1", "3600")
	rdb := redis.NewClient(&redis.Options{Network: "unix", Addr: sock})
	defer rdb.Close()
	ctx := context.Background()
	if v, err := rdb.Do(ctx, "RL.GET", "bench", 1000000, 3600, "REFILL", 10).Int64(); err != nil || v != 1000000-2*2000 {
		t.Errorf("RL.GET after 2000 RL.REDUCE TAKE 2: %d %v", v, err)
	}
	if v, err := rdb.Do(ctx, "CL.THROTTLE", "cell", 5000, 1, 3600, 0).Int64Slice(); err != nil || v[2] != 5001-2000 {
		t.Errorf("CL.THROTTLE peek after 2000: %v %v", v, err)
	}
}
