package sluice_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clients/go/sluice"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/proto"
)

// sluiced builds the daemon once per test binary.
var sluiced = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "sluiced")
	if err != nil {
		return "", err
	}
	out, err := exec.Command("go", "build", "-o", dir, "github.com/sluicehq/sluice/cmd/sluiced").CombinedOutput()
	if err != nil {
		return "", errors.New("building sluiced: " + err.Error() + ": " + string(out))
	}
	return filepath.Join(dir, "sluiced"), nil
})

// startSluiced runs the real daemon on a fresh state file until the test
// ends and returns its process and socket.
func startSluiced(t *testing.T) (*os.Process, string) {
	t.Helper()
	bin, err := sluiced()
	if err != nil {
		t.Fatal(err)
	}
	dir := shortDir(t)
	sock := filepath.Join(dir, "sock")
	cmd := exec.Command(bin, "-state", filepath.Join(dir, "state"), "-socket", sock, "-resp-socket", "-",
		"-slots", "4096", "-log-level", "error")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	eventually(t, func() error {
		nc, err := net.Dial("unix", sock)
		if err == nil {
			nc.Close()
		}
		return err
	})
	return cmd.Process, sock
}

// stopped returns nil once process pid is stopped (a signal is delivered
// asynchronously).
func stopped(pid int) error {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return err
	}
	// pid (comm) state ...: the state follows the last ')'.
	if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && b[i+2] == 'T' {
		return nil
	}
	return errors.New("process " + strconv.Itoa(pid) + " is not stopped yet")
}

// logBuffer is a logger whose lines the test reads.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.buf.String(), s)
}

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// A sidecar stopped by SIGSTOP accepts connections and answers nothing.
// The client's timeout and breaker keep it from costing every call the
// wait: after DefaultBreakerThreshold calls that time out, calls fail at
// once, the failure policy (FailOpen by default) decides, and the client
// says so once in its log; after SIGCONT a probe finds the sidecar again.
func TestBreaker_stoppedSidecar(t *testing.T) {
	proc, sock := startSluiced(t)
	// The clients' timeout: long enough that a busy machine answers in
	// time, short beside what 20 calls that each waited for it would take.
	const timeout = 300 * time.Millisecond
	first := new(logBuffer)
	c := dial(t, sock, sluice.WithLogger(first.logger()), sluice.WithTimeout(timeout))
	if d, err := dial(t, sock).Acquire(context.Background(), tb10, "k", 1); err != nil || d.Degraded || d.Remaining != 9 {
		t.Fatalf("before: %+v, %v", d, err)
	}
	// Another client, which answered its start check too: the failure
	// policy covers the outages of a sidecar that has answered.
	second := new(logBuffer)
	c2 := dial(t, sock, sluice.WithLogger(second.logger()), sluice.WithTimeout(timeout))
	if err := proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() error { return stopped(proc.Pid) })
	// Each way of calling, on a client of its own.
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"no deadline", func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }},
		{"a 1s deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), time.Second)
		}},
	} {
		c, log := c, first
		if tc.name != "no deadline" {
			c, log = c2, second
		}
		start := time.Now()
		for i := range 20 {
			cx, cancel := tc.ctx()
			d, err := c.Acquire(cx, tb10, "k", 1)
			cancel()
			if err != nil || !d.Allowed || !d.Degraded {
				t.Fatalf("%s: call %d to a stopped sidecar: %+v, %v", tc.name, i, d, err)
			}
		}
		took := time.Since(start)
		t.Logf("%s: 20 calls to a stopped sidecar took %v", tc.name, took)
		if waited := sluice.DefaultBreakerThreshold*timeout + 2*time.Second; took > waited {
			t.Errorf("%s: 20 calls to a stopped sidecar took %v, want at most %v (each waiting: %v)", tc.name, took, waited, 20*timeout)
		}
		if c.Healthy() {
			t.Errorf("%s: Healthy with the sidecar stopped", tc.name)
		}
		if n := c.Degraded(); n != 20 {
			t.Errorf("%s: Degraded() = %d, want 20", tc.name, n)
		}
		if n := log.count("not answering"); n != 1 {
			t.Errorf("%s: %d log lines about the breaker opening, want 1:\n%s", tc.name, n, log.buf.String())
		}
		if n := log.count("decisions made by the client's failure policy"); n != 1 {
			t.Errorf("%s: %d log lines about degraded decisions, want 1 (at most one per 10s):\n%s", tc.name, n, log.buf.String())
		}
	}
	if err := proc.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() error {
		d, err := c.Acquire(context.Background(), tb10, "k", 0)
		if err == nil && d.Degraded {
			err = errors.New("still degraded")
		}
		return err
	})
	if !c.Healthy() {
		t.Error("not Healthy after the sidecar answered")
	}
	if n := first.count("answers again"); n != 1 {
		t.Errorf("%d log lines about the breaker closing, want 1:\n%s", n, first.buf.String())
	}
}

// Only one call probes a stopped sidecar at a time; the others get the
// policy's decision at once. FailClosed denies, its RetryAfter the time
// until the next probe.
func TestBreaker_oneProbe(t *testing.T) {
	// A call that waits for its answer takes the timeout: the calls that
	// must not wait are checked to take less than one, which leaves a busy
	// machine a second to run them.
	const timeout, open = time.Second, 150 * time.Millisecond
	read := make(chan struct{}, 64)             // a request reached the sidecar
	path := fakeSidecar(t, func(fc *fakeConn) { // reads everything, answers nothing
		for {
			if _, _, ok := fc.next(); !ok {
				return
			}
			read <- struct{}{}
		}
	})
	c := dial(t, path, sluice.WithFailurePolicy(sluice.FailClosed), sluice.WithTimeout(timeout),
		sluice.WithBreaker(2, open, 2*open))
	cx := context.Background()
	for range 2 {
		if d, err := c.Acquire(cx, tb10, "k", 1); err != nil || d.Allowed || !d.Degraded {
			t.Fatalf("timed out call: %+v, %v", d, err)
		}
		<-read
	}
	start := time.Now()
	d, err := c.Acquire(cx, tb10, "k", 1)
	if err != nil || d.Allowed || !d.Degraded || d.RetryAfter <= 0 || d.RetryAfter > open {
		t.Errorf("open breaker: %+v, %v, want a denial with RetryAfter in (0, %v]", d, err, open)
	}
	if took := time.Since(start); took >= timeout {
		t.Errorf("a call with the breaker open took %v: it waited", took)
	}
	time.Sleep(open + 10*time.Millisecond) // the open period has passed
	// The probe waits its timeout; meanwhile the others fail at once.
	var wg sync.WaitGroup
	wg.Go(func() { c.Acquire(cx, tb10, "probe", 1) })
	<-read // the probe is in flight
	start = time.Now()
	for range 10 {
		c.Acquire(cx, tb10, "k", 1)
	}
	if took := time.Since(start); took >= timeout {
		t.Errorf("10 calls during the probe took %v: one waited", took)
	}
	wg.Wait()
	if c.Healthy() {
		t.Error("Healthy after a failed probe")
	}
	if n := c.Degraded(); n != 14 {
		t.Errorf("Degraded() = %d, want 14", n)
	}
	select {
	case <-read:
		t.Error("a call besides the probe reached the sidecar")
	default:
	}
}

// A sidecar that refuses a connection writes its refusal and closes it;
// the client that writes afterwards gets EPIPE, and must report the
// refusal, not a broken pipe. Dial reports it too. Busy is an outage (the
// sidecar is at its connection limit); Denied is not: this process is not
// allowed, whatever the failure policy says.
func TestClient_refusalBeforeWrite(t *testing.T) {
	for _, st := range []proto.Status{proto.StatusBusy, proto.StatusDenied} {
		t.Run(st.String(), func(t *testing.T) {
			refused := make(chan struct{}, 100)
			path := serveUnix(t, "sock", func(nc net.Conn, wg *sync.WaitGroup, track func(...net.Conn)) {
				b, start := proto.BeginFrame(nil, proto.KindResponse, 0)
				b = proto.AppendError(b, 0, st, "refused by the test")
				nc.Write(proto.EndFrame(b, start, 1))
				nc.Close()
				refused <- struct{}{}
			})
			check := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, st.Err()) || errors.Is(err, sluice.ErrUnavailable) != (st == proto.StatusBusy) ||
					strings.Contains(err.Error(), "broken pipe") || !strings.Contains(err.Error(), "refused by the test") {
					t.Errorf("%s: %v, want the refusal (%v)", what, err, st)
				}
			}
			_, err := sluice.Dial(path, sluice.WithLogger(quiet))
			check("Dial", err)
			<-refused
			// Each connection is handed over once the refusal was written
			// and the connection closed, before any request.
			afterRefusal := func(ctx context.Context, path string) (net.Conn, error) {
				var d net.Dialer
				nc, err := d.DialContext(ctx, "unix", path)
				if err == nil {
					<-refused
				}
				return nc, err
			}
			for _, concurrent := range []int{1, 8} {
				c := dial(t, path, sluice.WithLazyStart(), sluice.WithBackoff(time.Millisecond, time.Millisecond),
					sluice.WithDial(afterRefusal))
				var wg sync.WaitGroup
				for range concurrent {
					wg.Go(func() {
						_, err := c.Acquire(context.Background(), tb10, "k", 1)
						check(strconv.Itoa(concurrent)+" callers", err)
					})
				}
				wg.Wait()
				c.Close()
			}
		})
	}
}

// The real server at its connection limit: a second client gets Busy,
// whatever the timing of its first write.
func TestClient_busyServer(t *testing.T) {
	sc := startSidecar(t, func(cfg *server.Config) { cfg.MaxConns = 1 })
	first := dial(t, sc.cfg.SocketPath)
	if err := first.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		_, err := sluice.Dial(sc.cfg.SocketPath, sluice.WithLogger(quiet))
		if !errors.Is(err, sluice.ErrBusy) || !errors.Is(err, sluice.ErrUnavailable) {
			t.Fatalf("second client: %v, want ErrBusy", err)
		}
	}
}

// Errors are one sentence for people: no package prefixes, no Go names.
func TestClient_errorTexts(t *testing.T) {
	sc := startSidecar(t)
	c := dial(t, sc.cfg.SocketPath, sluice.WithFailurePolicy(sluice.FailError))
	cx := context.Background()
	_, parseErr := sluice.ParseLimit("gcra:burst=x")
	for name, err := range map[string]error{
		"parse":      parseErr,
		"empty key":  second(c.Acquire(cx, tb10, "", 1)),
		"zero limit": second(c.Acquire(cx, sluice.Limit{}, "k", 1)),
		"17 items":   third(c.Multi(cx, make([]sluice.Item, 17))),
		"multi key":  third(c.Multi(cx, []sluice.Item{{Limit: tb10}})),
		"cost":       second(c.Acquire(cx, tb10, "k", -1)),
		"bad name":   second(c.Acquire(cx, sluice.Limit{Name: "9lives"}, "k", 1)),
		"absent":     second(sluice.Dial(filepath.Join(shortDir(t), "absent.sock"))),
		"closed": func() error {
			cl := dial(t, sc.cfg.SocketPath)
			cl.Close()
			return cl.Ping(cx)
		}(),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		s := err.Error()
		for _, bad := range []string{"sluice:", "proto:", "shm:", "Err", "%!", "\n", "OpAcquire", "ACQUIRE", "invalid limit: invalid limit"} {
			if strings.Contains(s, bad) {
				t.Errorf("%s: %q contains %q", name, s, bad)
			}
		}
		t.Logf("%s: %s", name, s)
	}
}
