package server

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/proto"
)

const t0 = int64(1_700_000_000) * 1e9

// redisClient connects go-redis to the server's RESP socket with its default
// options (it opens with HELLO 3 and CLIENT SETINFO, as applications do).
func redisClient(t *testing.T, sc *sidecar) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Network: "unix", Addr: sc.cfg.RESPSocket, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

type rstep struct {
	cmd  string // space-separated
	want any    // int64, []int64 or an error message (string)
}

// replay runs the steps through go-redis. A step whose command starts with
// "@<ms> " runs with the server clock at t0 + ms.
func replay(t *testing.T, sc *sidecar, rdb *redis.Client, steps []rstep) {
	t.Helper()
	ctx := context.Background()
	for i, s := range steps {
		cmd := s.cmd
		if strings.HasPrefix(cmd, "@") {
			at, rest, _ := strings.Cut(cmd[1:], " ")
			var ms int64
			for _, c := range at {
				ms = ms*10 + int64(c-'0')
			}
			sc.clock.Store(t0 + ms*1e6)
			cmd = rest
		}
		var args []any
		for _, w := range strings.Fields(cmd) {
			args = append(args, w)
		}
		v, err := rdb.Do(ctx, args...).Result()
		switch want := s.want.(type) {
		case string:
			if err == nil || err.Error() != want {
				t.Errorf("step %d %q: %v, %v; want error %q", i+1, cmd, v, err, want)
			}
		case int:
			if err != nil || v != int64(want) {
				t.Errorf("step %d %q: %v, %v; want %d", i+1, cmd, v, err, want)
			}
		case []int64:
			got, _ := v.([]any)
			ok := err == nil && len(got) == len(want)
			for j := 0; ok && j < len(want); j++ {
				ok = got[j] == want[j]
			}
			if !ok {
				t.Errorf("step %d %q: %v, %v; want %v", i+1, cmd, v, err, want)
			}
		}
	}
}

// Ensure smyte/ratelimit's own test script (reference vector S1) replays
// exactly, time driven by AT.
func TestRESP_smyteS1(t *testing.T) {
	sc := start(t, Config{})
	replay(t, sc, redisClient(t, sc), []rstep{
		{"rl.reduce a 10 5 refill 3 at 2", 10},
		{"rl.preduce a 10 5000 at 2000 refill 3", 9},
		{"rl.get a 10 5 at 2 refill 3", 8},
		{"rl.pget a 10 5000 refill 3 at 2000", 8},
		{"rl.reduce a 10 5 at 2 refill 3 take 5", 8},
		{"rl.preduce a 10 5000 refill 3 take 5 at 2000", 3},
		{"rl.get a 10 5 at 2 refill 3", 0},
		{"rl.get a 10 5 at 8 refill 3", 3},
		{"rl.reduce a 10 5 at 8 take 2 refill 3", 3},
		{"rl.preduce a 10 5000 at 8000 refill 3", 1},
		{"rl.preduce a 10 5000 at 9000 refill 3", 0},
		{"rl.get a 10 5 at 13 refill 3", 3},
		{"rl.reduce a 10 5 at 14 refill 3 take 4 strict", 3},
		{"rl.reduce a 10 5 at 16 refill 3 take 4 strict", 0},
		{"rl.reduce a 10 5 at 18 refill 3 take 1 strict", 0},
		{"RL.REDUCE a 10 5 AT 23 REFILL 3 TAKE 2 STRICT", 3},
	})
}

// Ensure smyte/ratelimit's argument errors (S3) and arity errors come back
// byte for byte, and the README example (S4) works on the server clock.
func TestRESP_smyteErrorsAndReadme(t *testing.T) {
	sc := start(t, Config{})
	replay(t, sc, redisClient(t, sc), []rstep{
		{"rl.get abc 10 abc", errValue},
		{"rl.pget abc 0 60", errValue},
		{"rl.reduce abc 10 60 refill strict 1", errValue},
		{"rl.pget abc 0 60 take 2", errSyntax},
		{"rl.reduce abc 10 60 refill", errSyntax},
		{"rl.preduce abc 10 60 refill 1 strict abc", errSyntax},
		{"rl.reduce abc 10 60 foo 1", errSyntax},
		{"rl.reduce abc 10 60 foo x", errValue},
		{"rl.reduce abc 10 2147483648", errValue}, // refilltime is an int32
		{"rl.reduce abc 10 1.5", errValue},
		{"rl.reduce abc 10 60 at -1", errValue},
		{"rl.reduce abc 10 60 take -1", errValue},
		{"rl.reduce abc 10 60 at 9223372036854775", errValue}, // smyte overflows; refused
		{"rl.get abc 10", "Wrong number of arguments for 'rl.get' command"},
		{"rl.reduce a b c d e f g h i j k", "Wrong number of arguments for 'rl.reduce' command"},
		{"rl.pget a 1 2 3 4 5 6 7 8", "Wrong number of arguments for 'rl.pget' command"},
		{"RL.REDUCE twoPerMin 2 60", 2},
		{"RL.REDUCE twoPerMin 2 60", 1},
		{"RL.REDUCE twoPerMin 2 60", 0},
		{"RL.REDUCE twoPerMin 2 60", 0},
		{"RL.REDUCE twoPerMin 3 60", 3}, // other parameters, other bucket
		{"RL.PREDUCE twoPerMin 2 60000", 0},
		{"rl.reduce k 5 60 take 0", 5}, // TAKE 0 reads and creates nothing
		{"rl.foo a", "ERR unknown command 'rl.foo', with args beginning with: 'a' "},
		{"rl.sessionize a 1 3600 at 0 STRICT", "ERR unknown command 'rl.sessionize', with args beginning with: 'a' '1' '3600' "},
	})
}

// Ensure redis-cell's vectors C1 (its unit test), C2 (README) and C3 (its
// end-to-end test) replay exactly with a controlled server clock, and its
// errors come back verbatim.
func TestRESP_redisCell(t *testing.T) {
	sc := start(t, Config{})
	rdb := redisClient(t, sc)
	replay(t, sc, rdb, []rstep{
		{"@0 CL.THROTTLE foo 4 1 1 6", []int64{1, 5, 5, -1, 0}},
		{"@0 CL.THROTTLE foo 4 1 1 1", []int64{0, 5, 4, -1, 1}},
		{"@0 CL.THROTTLE foo 4 1 1 1", []int64{0, 5, 3, -1, 2}},
		{"@0 CL.THROTTLE foo 4 1 1 1", []int64{0, 5, 2, -1, 3}},
		{"@0 CL.THROTTLE foo 4 1 1 1", []int64{0, 5, 1, -1, 4}},
		{"@0 CL.THROTTLE foo 4 1 1 1", []int64{0, 5, 0, -1, 5}},
		{"@0 CL.THROTTLE foo 4 1 1 1", []int64{1, 5, 0, 1, 5}},
		{"@3000 CL.THROTTLE foo 4 1 1 1", []int64{0, 5, 2, -1, 3}},
		{"@3100 CL.THROTTLE foo 4 1 1 1", []int64{0, 5, 1, -1, 4}},
		{"@4000 CL.THROTTLE foo 4 1 1 1", []int64{0, 5, 1, -1, 4}},
		{"@8000 CL.THROTTLE foo 4 1 1 1", []int64{0, 5, 4, -1, 1}},
		{"@9500 CL.THROTTLE foo 4 1 1 1", []int64{0, 5, 4, -1, 1}},
		{"@9500 CL.THROTTLE foo 4 1 1 0", []int64{0, 5, 4, -1, 1}},
		{"@9500 CL.THROTTLE foo 4 1 1 2", []int64{0, 5, 2, -1, 3}},
		{"@9500 CL.THROTTLE foo 4 1 1 5", []int64{1, 5, 2, 3, 3}},
	})
	replay(t, sc, rdb, []rstep{
		{"@0 CL.THROTTLE user123 15 30 60", []int64{0, 16, 15, -1, 2}},
		{"@0 CL.THROTTLE user123 15 30 60", []int64{0, 16, 14, -1, 4}},
		{"@1000 CL.THROTTLE user123 15 30 60", []int64{0, 16, 13, -1, 5}},
		{"@2000 CL.THROTTLE user123 15 30 60", []int64{0, 16, 13, -1, 6}},
	})
	replay(t, sc, rdb, []rstep{
		{"@0 CL.THROTTLE e2e 0 1 2 1", []int64{0, 1, 0, -1, 2}},
		{"@0 CL.THROTTLE e2e 0 1 2 1", []int64{1, 1, 0, 2, 2}},
		{"@1999 CL.THROTTLE e2e 0 1 2 1", []int64{1, 1, 0, 1, 1}},
		{"@2000 CL.THROTTLE e2e 0 1 2 1", []int64{0, 1, 0, -1, 2}},
		// A negative quantity gives tokens back; a fresh key peeks at the limit.
		{"@2000 CL.THROTTLE e2e 0 1 2 -1", []int64{0, 1, 1, -1, 0}},
		{"@2000 CL.THROTTLE fresh 4 1 1 0", []int64{0, 5, 5, -1, 0}},
		// Issue #50: remaining never exceeds the limit.
		{"@0 CL.THROTTLE big 6000 6000 1", []int64{0, 6001, 6000, -1, 0}}, // redis-cell: 6024
	})
	replay(t, sc, rdb, []rstep{
		{"CL.THROTTLE k 1 2", cellUsage},
		{"CL.THROTTLE k 1 2 3 4 5", cellUsage},
		{"CL.THROTTLE k x 1 1", cellPrefix + "Couldn't parse as integer: x"},
		{"CL.THROTTLE k 1 1 1 1.5", cellPrefix + "Couldn't parse as integer: 1.5"},
		{"CL.THROTTLE k 0 0 60 1", cellZero},
		{"CL.THROTTLE k 0 1 0", cellZero},
		{"CL.THROTTLE k 0 2000000000 1", cellZero},
		{"CL.THROTTLE k -1 1 1", cellPrefix + "max_burst, count and period must not be negative"},
		{"CL.THROTTLE k +4 1 1", []int64{0, 5, 4, -1, 1}},
		{"CL.THROTTLE k 9223372036854775806 1 1", cellPrefix + "parameters out of the supported range: gcra tolerance (burst+1)*period/count = 9223372036854775807*1000000000 ns, want <= 2147483648000000000 ns (2147483648 s)"},
	})
	// redis-cell aborts Redis on a non-UTF-8 argument; Sluice serves it.
	v, err := rdb.Do(context.Background(), "CL.THROTTLE", "\xff\xfe-key", "4", "1", "1").Result()
	if got, _ := v.([]any); err != nil || len(got) != 5 || got[0] != int64(0) || got[2] != int64(4) {
		t.Errorf("non-UTF-8 key: %v %v", v, err)
	}
}

// Ensure RESP and the native protocol see one table: a bucket written by
// RL.REDUCE is read natively, and one written by CL.THROTTLE is the native
// gcra bucket of the same key.
func TestRESP_sharesStateWithNative(t *testing.T) {
	sc := start(t, Config{})
	rdb := redisClient(t, sc)
	ctx := context.Background()
	for range 3 {
		rdb.Do(ctx, "RL.REDUCE", "shared", "10", "60").Int64()
	}
	native := dial(t, sc)
	if r := native.acquire("shared", proto.TokenBucketLimit(10, time.Minute, 10), 1, 0); r.Decision.Remaining != 6 {
		t.Errorf("native after 3 RL.REDUCE: %+v", r.Decision)
	}
	rdb.Do(ctx, "CL.THROTTLE", "cell", "4", "1", "1", "3")
	if r := native.acquire("cell", proto.GCRALimit(4, 1, time.Second), 1, 0); r.Decision.Remaining != 1 {
		t.Errorf("native after CL.THROTTLE quantity 3: %+v", r.Decision)
	}
}

// Ensure the commands clients and redis-cli need on connecting.
func TestRESP_clientCommands(t *testing.T) {
	sc := start(t, Config{})
	rdb := redisClient(t, sc)
	ctx := context.Background()
	if v, err := rdb.Ping(ctx).Result(); err != nil || v != "PONG" {
		t.Errorf("PING: %q %v", v, err)
	}
	if v, err := rdb.Echo(ctx, "hi").Result(); err != nil || v != "hi" {
		t.Errorf("ECHO: %q %v", v, err)
	}
	if err := rdb.Do(ctx, "SELECT", "0").Err(); err != nil {
		t.Errorf("SELECT 0: %v", err)
	}
	if err := rdb.Do(ctx, "SELECT", "1").Err(); err == nil {
		t.Errorf("SELECT 1 accepted")
	}
	if v, err := rdb.Info(ctx).Result(); err != nil || !strings.Contains(v, "# Keyspace") || !strings.Contains(v, "redis_version:") {
		t.Errorf("INFO: %q %v", v, err)
	}
	if n, err := rdb.Do(ctx, "COMMAND", "COUNT").Int64(); err != nil || n != int64(len(respCommands)) {
		t.Errorf("COMMAND COUNT: %d %v", n, err)
	}
	if err := rdb.Do(ctx, "HELLO", "4").Err(); err == nil || err.Error() != "NOPROTO unsupported protocol version" {
		t.Errorf("HELLO 4: %v", err)
	}
	if v, err := rdb.Do(ctx, "HELLO", "3").Result(); err != nil || v.(map[any]any)["proto"] != int64(3) {
		t.Errorf("HELLO 3: %v %v", v, err)
	}
	if err := rdb.Do(ctx, "CLIENT", "SETNAME", "worker-1").Err(); err != nil {
		t.Errorf("CLIENT SETNAME: %v", err)
	}
	if err := rdb.Do(ctx, "GET", "k").Err(); err == nil || !strings.HasPrefix(err.Error(), "ERR unknown command 'GET'") {
		t.Errorf("GET: %v", err)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Errorf("connection unusable after an unknown command: %v", err)
	}
	// Pipelined through the client library.
	pipe := rdb.Pipeline()
	cmds := make([]*redis.Cmd, 50)
	for i := range cmds {
		cmds[i] = pipe.Do(ctx, "RL.REDUCE", "piped", "100", "60")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	for i, c := range cmds {
		if v, _ := c.Int64(); v != int64(100-i) {
			t.Fatalf("pipelined reply %d: %d", i, v)
		}
	}
}

// Ensure malformed RESP gets an error reply and a closed connection (and a
// huge declared length is refused at once, before its bytes), while other
// clients are served.
func TestRESP_malformed(t *testing.T) {
	sc := start(t, Config{FrameTimeout: 200 * time.Millisecond})
	rdb := redisClient(t, sc)
	for _, in := range []string{"*1\r\n$2147483648\r\n", "*x\r\n", "*1\r\n+PING\r\n", "*1\r\n$4\r\nPINGxx\r\n", strings.Repeat("z", 20000)} {
		c, err := net.Dial("unix", sc.cfg.RESPSocket)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte(in))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 512)
		n, _ := c.Read(buf)
		if n == 0 || buf[0] != '-' {
			t.Errorf("%.20q: reply %q", in, buf[:n])
		}
		if _, err := c.Read(buf); err == nil {
			t.Errorf("%.20q: connection left open", in)
		}
		c.Close()
		if err := rdb.Ping(context.Background()).Err(); err != nil {
			t.Errorf("other client after %.20q: %v", in, err)
		}
	}
	// A client that stops mid-command is cut off after FrameTimeout.
	c, _ := net.Dial("unix", sc.cfg.RESPSocket)
	defer c.Close()
	c.Write([]byte("*2\r\n$4\r\nECHO\r\n$10\r\nabc"))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 10)); err == nil {
		t.Errorf("stalled command not cut off")
	}
}

// Ensure redis-cli itself works against the Unix socket, one command at a
// time and with --pipe. redis-cli comes with Debian's redis-tools, which CI
// installs.
func TestRESP_redisCLI(t *testing.T) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatal("redis-cli is needed (apt-get install redis-tools)")
	}
	sc := start(t, Config{})
	run := func(stdin string, args ...string) string {
		cmd := exec.Command(cli, append([]string{"-s", sc.cfg.RESPSocket}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if out := run("", "RL.REDUCE", "cli", "2", "60"); out != "2" {
		t.Errorf("RL.REDUCE: %q", out)
	}
	if out := run("", "CL.THROTTLE", "cli", "4", "1", "1"); out != "0\n5\n4\n-1\n1" {
		t.Errorf("CL.THROTTLE: %q", out)
	}
	if out := run("", "PING"); out != "PONG" {
		t.Errorf("PING: %q", out)
	}
	checkRedisCliPipe(t, run)
}

// Ensure the Redis protocol's TCP listener stays on loopback unless remote
// clients are allowed explicitly.
func TestRESP_loopbackOnly(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:9049": true, "[::1]:9049": true, "localhost:9049": true,
		"0.0.0.0:9049": false, "10.1.2.3:9049": false, ":9049": false, "example.com:9049": false,
	} {
		if err := checkLoopback(addr, false); (err == nil) != ok {
			t.Errorf("%s: %v", addr, err)
		}
		if err := checkLoopback(addr, true); err != nil {
			t.Errorf("%s allowed remote: %v", addr, err)
		}
	}
	dir := shortDir(t)
	err := Run(t.Context(), Config{StatePath: dir + "/s", SocketPath: dir + "/n", RESPSocket: "-",
		RESPAddr: "0.0.0.0:0", Slots: 16, Logger: quiet()})
	if !errors.Is(err, ErrRemoteAddr) {
		t.Errorf("Run on 0.0.0.0: %v", err)
	}
}

// Ensure a CL.THROTTLE with a negative quantity is decided as redis-cell
// decides it: limited, and nothing written, when the bucket would still be
// past its tolerance (it used to refund anyway: remaining 3 where
// redis-cell says 1).
func TestRESP_cellNegativeQuantityLimited(t *testing.T) {
	sc := start(t, Config{})
	replay(t, sc, redisClient(t, sc), []rstep{
		{"CL.THROTTLE rk 10 1 60 10", []int64{0, 11, 1, -1, 600}},
		{"CL.THROTTLE rk 0 1 60 -1", []int64{1, 1, 0, 480, 600}},
		{"CL.THROTTLE rk 0 1 60 -1", []int64{1, 1, 0, 480, 600}},
		{"CL.THROTTLE rk 10 1 60 0", []int64{0, 11, 1, -1, 600}},
		{"CL.THROTTLE rk 10 1 60 -2", []int64{0, 11, 3, -1, 480}}, // within the tolerance: refunded
	})
}

// Ensure a STRICT request whose AT is earlier than the bucket's refill
// clock does not move the clock back: smyte/ratelimit does, and the next
// request at the later time finds the bucket refilled.
func TestRESP_strictPastTimestamp(t *testing.T) {
	sc := start(t, Config{})
	replay(t, sc, redisClient(t, sc), []rstep{
		{"RL.REDUCE k 1 60 AT 1000 STRICT", 1},       // takes the only token; the clock restarts at 1000 s
		{"RL.REDUCE k 1 60 AT 100 STRICT", 0},        // a past time: denied, the clock stays at 1000 s
		{"RL.REDUCE k 1 60 AT 1030", 0},              // smyte: refilled at 160 s, so 1
		{"RL.REDUCE k 1 60 AT 1060", 1},              // one refill after 1000 s
		{"RL.REDUCE k 1 60 AT 6942585601", errValue}, // past 2190-01-01: decisions are exact up to it
		{"RL.PREDUCE k 1 60000 AT 6942585600001", errValue},
		{"RL.REDUCE k 1 60 AT 6942585600", 1}, // 2190-01-01 itself
	})
}

// Ensure requests with a client time far ahead of the server's clock never
// decide that another bucket's slot may be reused: a 10-per-day bucket
// drained at the server's time keeps its slot in a 64-slot table while 40
// other keys are created "in 2100" (its slot was reclaimed, and it got 10
// tokens back).
func TestRESP_futureTimestampsReclaimNothing(t *testing.T) {
	sc := start(t, Config{Slots: 64, SlotSize: 64})
	rdb := redisClient(t, sc)
	ctx := context.Background()
	for range 10 {
		if err := rdb.Do(ctx, "RL.REDUCE", "victim", 10, 86400).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 40 {
		if err := rdb.Do(ctx, "RL.REDUCE", "other-"+strings.Repeat("x", i), 10, 86400, "AT", 4102444800).Err(); err != nil {
			t.Fatal(err)
		}
	}
	sc.clock.Add(1e9)
	if n, err := rdb.Do(ctx, "RL.REDUCE", "victim", 10, 86400).Int64(); err != nil || n != 0 {
		t.Errorf("the drained bucket after 40 requests from 2100: %d, %v; want 0", n, err)
	}
}

// checkRedisCliPipe sends 100 RL.REDUCE through redis-cli --pipe (run runs
// redis-cli with stdin and arguments) and checks every one was decided.
func checkRedisCliPipe(t *testing.T, run func(stdin string, args ...string) string) {
	t.Helper()
	var pipe strings.Builder
	for range 100 {
		pipe.WriteString("*4\r\n$9\r\nRL.REDUCE\r\n$5\r\npiped\r\n$4\r\n1000\r\n$2\r\n60\r\n")
	}
	if out := run(pipe.String(), "--pipe"); !strings.Contains(out, "errors: 0, replies: 100") {
		t.Errorf("--pipe: %q", out)
	}
	if out := run("", "RL.GET", "piped", "1000", "60"); out != "900" {
		t.Errorf("after --pipe: %q", out)
	}
}
