package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/sluicehq/sluice/internal/config"
	"time"

	"github.com/sluicehq/sluice/clients/go/sluice"
)

func TestRun_version(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"--version"}, func(string) (string, bool) { return "", false }, &stdout, &stderr)
	if code != exitOK || !strings.HasPrefix(stdout.String(), "sluiced ") || !strings.Contains(stdout.String(), "(state file format ") || stderr.Len() != 0 {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
}

// Ensure a bad config file, metrics address or log format is a usage error
// before anything is created.
func TestRun_badOps(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("limits:\n  login: \"token_bucket:max=0,refill_time=1h\"\n"), 0o644)
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--config", bad}, "--config: " + bad + ":2: limits.login.limit: "},
		{[]string{"--config", filepath.Join(dir, "none.yaml")}, "--config: open "},
		{[]string{"--config", fifo}, "fifo.yaml: not a regular file (it is a FIFO)"},
		{[]string{"--metrics", "0.0.0.0:9464"}, `--metrics: invalid metrics address "0.0.0.0:9464": want a loopback host:port`},
		{[]string{"--log-format", "xml"}, `--log-format "xml": want text or json`},
	} {
		code, stderr := runFor(t, 5*time.Second, append(paths(dir), c.args...), nil)
		if code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 with %q", c.args, code, stderr, c.want)
		}
		if _, err := os.Stat(filepath.Join(dir, "var")); err == nil {
			t.Errorf("%v: files were created before the flags were checked", c.args)
		}
	}
}

// Ensure sluiced under systemd: READY=1 once serving, RELOADING=1 and
// READY=1 around a SIGHUP reload of the config file (which the metrics
// count), STOPPING=1 at shutdown; logs are JSON with --log-format json.
func TestRun_systemd(t *testing.T) {
	dir := shortDir(t)
	notify, recv := listenNotify(t, dir)
	cfg := filepath.Join(dir, "sluice.yaml")
	os.WriteFile(cfg, []byte("limits:\n  login: \"token_bucket:max=10,refill_time=1h\"\n"), 0o644)
	msock := filepath.Join(dir, "metrics")
	args := append(paths(dir), "--config", cfg, "--metrics", "unix:"+msock, "--log-format", "json")

	ctx, cancel := context.WithCancel(context.Background())
	var stderr syncBuffer
	done := make(chan int)
	go func() {
		done <- run(ctx, args, func(k string) (string, bool) {
			if k == "NOTIFY_SOCKET" {
				return notify, true
			}
			return "", false
		}, io.Discard, &stderr)
	}()
	if got := recv(); !strings.HasPrefix(got, "READY=1\nSTATUS=serving ") {
		t.Fatalf("first notification %q", got)
	}
	cl, err := sluice.Dial(filepath.Join(dir, "var", "s"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Acquire(context.Background(), sluice.TokenBucket(10, time.Hour, 1), "alice", 1); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if got := recv(); !strings.HasPrefix(got, "RELOADING=1\nMONOTONIC_USEC=") {
		t.Fatalf("after SIGHUP: %q", got)
	}
	if got := recv(); got != "READY=1\nSTATUS=serving" {
		t.Fatalf("after the reload: %q", got)
	}
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", msock)
	}}}
	resp, err := c.Get("http://sluiced/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`sluice_config_reloads_total{result="ok"} 1`, "\nsluice_table_slots 64\n", "\nsluice_table_used_slots 1\n", "\nsluice_table_live_buckets 1\n"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("no %q in the metrics:\n%s", want, body)
		}
	}
	cancel()
	if got := recv(); !strings.HasPrefix(got, "STOPPING=1") {
		t.Fatalf("at shutdown: %q", got)
	}
	if code := <-done; code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var msgs []string
	sc := bufio.NewScanner(strings.NewReader(stderr.String()))
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("log line is not JSON: %q", sc.Text())
		}
		msgs = append(msgs, line["msg"].(string))
	}
	all := strings.Join(msgs, "|")
	for _, want := range []string{"config loaded", "config reloaded", "serving metrics"} {
		if !strings.Contains(all, want) {
			t.Errorf("no %q log line in %q", want, all)
		}
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Ensure a config with global limits is refused without --global-redis,
// at start (one line that says what to do, nothing created; it used to
// start with a warning, then fail every request on those limits) and at a
// reload (the previous config stays, systemd hears why).
func TestRun_globalWithoutRedis(t *testing.T) {
	dir, err := os.MkdirTemp("", "gl") // short: socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	local := "limits:\n  login: \"token_bucket:max=10,refill_time=1h\"\n"
	global := local + "  exports:\n    limit: \"fixed_window:limit=1000,window=1h\"\n    scope: global\n"
	cfg := filepath.Join(dir, "sluice.yaml")
	os.WriteFile(cfg, []byte(global), 0o644)
	code, stderr := runFor(t, time.Minute, append(paths(dir), "--config", cfg), nil)
	want := "sluiced: --config: " + cfg + ": the limit exports is global (scope: global), decided in Redis: give sluiced --global-redis HOST:PORT ($SLUICE_GLOBAL_REDIS), or make the limit local"
	if code != exitUsage || strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, want) {
		t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "var")); err == nil {
		t.Error("files were created before the config was refused")
	}

	os.WriteFile(cfg, []byte(local), 0o644)
	notify, recv := listenNotify(t, dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	var log syncBuffer
	go func() {
		done <- run(ctx, append(paths(dir), "--config", cfg), func(k string) (string, bool) {
			return notify, k == "NOTIFY_SOCKET"
		}, io.Discard, &log)
	}()
	if got := recv(); !strings.HasPrefix(got, "READY=1") {
		t.Fatalf("first notification %q", got)
	}
	os.WriteFile(cfg, []byte(global), 0o644)
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	recv() // RELOADING=1
	if got := recv(); !strings.Contains(got, "STATUS=serving; the last config reload failed: "+cfg+": the limit exports is global") {
		t.Errorf("after reloading a file with a global limit: %q", got)
	}
	c, err := sluice.Dial(filepath.Join(dir, "var", "s"), sluice.WithFailurePolicy(sluice.FailError), sluice.WithTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	login, _ := sluice.ParseLimit("login")
	if d, err := c.Acquire(context.Background(), login, "k", 1); err != nil || !d.Allowed {
		t.Errorf("the previous config is not in force: %+v, %v", d, err)
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("exit %d: %s", code, log.String())
	}
}

// Ensure every socket sluiced binds, the metrics socket too, has
// --socket-mode whatever the umask: under umask 000 the metrics socket was
// 0777, and any local user could read every limit's traffic.
func TestRun_socketModesUnderUmask(t *testing.T) {
	dir := shortDir(t)
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	msock := filepath.Join(dir, "var", "metrics")
	for _, c := range []struct {
		flags []string
		want  os.FileMode
	}{
		{nil, 0o660},
		{[]string{"--socket-mode", "0600"}, 0o600},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		var stderr syncBuffer
		done := make(chan int)
		args := append(append(paths(dir), "--metrics", "unix:"+msock), c.flags...)
		go func() { done <- run(ctx, args, func(string) (string, bool) { return "", false }, io.Discard, &stderr) }()
		for _, sock := range []string{filepath.Join(dir, "var", "s"), filepath.Join(dir, "var", "r"), msock} {
			var fi os.FileInfo
			var err error
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				if fi, err = os.Stat(sock); err == nil || time.Now().After(deadline) {
					break
				}
			}
			if err != nil || fi.Mode().Perm() != c.want {
				t.Errorf("%v: socket %s: %v %v, want %v", c.flags, filepath.Base(sock), fi.Mode(), err, c.want)
			}
		}
		cancel()
		if code := <-done; code != exitOK {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
	}
}

// listenNotify listens on a notify socket in dir, as systemd does, and
// returns its path and a function that waits (a minute at most) for the
// next notification.
func listenNotify(t *testing.T, dir string) (string, func() string) {
	t.Helper()
	notify := filepath.Join(dir, "notify")
	nc, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notify, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return notify, func() string {
		t.Helper()
		nc.SetReadDeadline(time.Now().Add(time.Minute))
		buf := make([]byte, 4096)
		n, err := nc.Read(buf)
		if err != nil {
			t.Fatalf("waiting for a notification: %v", err)
		}
		return string(buf[:n])
	}
}

// Ensure a global route of the Redis-protocol commands is refused without
// --global-redis, as a global limit is, and accepted with it.
func TestCheckGlobal_routes(t *testing.T) {
	s, err := config.Parse("f.yaml", []byte("resp:\n  - {match: \"test:*\", scope: local}\n  - {match: \"login:*\", scope: global}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := `f.yaml: the Redis-protocol keys matching "login:*" are global (resp: scope: global), decided in Redis: give sluiced --global-redis HOST:PORT ($SLUICE_GLOBAL_REDIS), or make the route local`
	if err := checkGlobal(s, false); err == nil || err.Error() != want {
		t.Errorf("without Redis: %v, want %q", err, want)
	}
	if err := checkGlobal(s, true); err != nil {
		t.Errorf("with Redis: %v", err)
	}
}
