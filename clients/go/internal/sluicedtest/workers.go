package sluicedtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clients/go/sluice"
)

// The environment of a worker process: the sidecar's socket and the
// argument of its Work.
const (
	socketEnv = "SLUICED_TEST_WORKER_SOCKET"
	argEnv    = "SLUICED_TEST_WORKER_ARG"
)

// Work is what a worker process does through an adapter, with a client of
// the sidecar (Options), under a limit whose window (if it has one) is
// window, the same in every process: it returns how many of its requests
// were admitted.
type Work func(ctx context.Context, c *sluice.Client, window time.Duration) (admitted int, err error)

// Main is the TestMain of a store's tests: in a worker process (run by
// Processes) it runs work and exits; otherwise it runs the tests, then
// removes the sluiced it built.
func Main(m *testing.M, work Work) {
	if sock := os.Getenv(socketEnv); sock != "" {
		os.Exit(worker(sock, os.Getenv(argEnv), work))
	}
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// worker connects, says "ready", waits for "go" on stdin, runs work and
// prints "admitted N".
func worker(sock, arg string, work Work) int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "worker:", err); return 1 }
	c, err := sluice.Dial(sock, Options()...)
	if err != nil {
		return fail(err)
	}
	defer c.Close()
	ctx := context.Background()
	if err := c.Ping(ctx); err != nil {
		return fail(err)
	}
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() || in.Text() != "go" {
		return fail(fmt.Errorf("no go on stdin"))
	}
	w, err := strconv.ParseInt(arg, 10, 64)
	if err != nil {
		return fail(err)
	}
	n, err := work(ctx, c, time.Duration(w))
	if err != nil {
		return fail(err)
	}
	fmt.Println("admitted", n)
	return 0
}

// Processes runs n worker processes of this test binary on the sidecar at
// sock, each running the Work given to Main with arg, a window in ns. They connect first;
// once every one is ready they are released together, so that their
// requests overlap. It returns how many requests each admitted.
func Processes(t *testing.T, n int, sock, arg string) []int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Patience)
	defer cancel()
	type proc struct {
		cmd *exec.Cmd
		in  io.WriteCloser
		out *bufio.Scanner
	}
	procs := make([]proc, n)
	for i := range procs {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), socketEnv+"="+sock, argEnv+"="+arg)
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		procs[i] = proc{cmd, in, bufio.NewScanner(out)}
	}
	line := func(i int) string {
		if !procs[i].out.Scan() {
			t.Fatalf("worker %d ended early: %v", i, procs[i].out.Err())
		}
		return procs[i].out.Text()
	}
	for i := range procs {
		if l := line(i); l != "ready" {
			t.Fatalf("worker %d: %q, want ready", i, l)
		}
	}
	for i := range procs {
		if _, err := io.WriteString(procs[i].in, "go\n"); err != nil {
			t.Fatal(err)
		}
	}
	admitted := make([]int, n)
	for i := range procs {
		l := line(i)
		v, ok := strings.CutPrefix(l, "admitted ")
		count, err := strconv.Atoi(v)
		if !ok || err != nil {
			t.Fatalf("worker %d: %q, want admitted N", i, l)
		}
		admitted[i] = count
		procs[i].in.Close()
		if err := procs[i].cmd.Wait(); err != nil {
			t.Fatalf("worker %d: %v", i, err)
		}
	}
	return admitted
}

// The shape of ExactAcrossProcesses.
const (
	Procs        = 8
	ProcLimit    = 50 // the limit the processes share
	ProcRequests = 20 // per process: 160 in all, more than the limit
)

// ExactAcrossProcesses runs Procs worker processes on the sidecar at sock,
// each given a QuietWindow, and fails the test unless they admitted
// exactly ProcLimit requests between them: their Work sends ProcRequests
// requests through an adapter limited to ProcLimit on one key (Requests).
func ExactAcrossProcesses(t *testing.T, sock string) {
	t.Helper()
	admitted := Processes(t, Procs, sock, strconv.FormatInt(int64(QuietWindow()), 10))
	sum := 0
	for _, n := range admitted {
		sum += n
	}
	if sum != ProcLimit {
		t.Errorf("the processes admitted %d requests (%v), want exactly %d", sum, admitted, ProcLimit)
	}
}

// Requests sends ProcRequests requests from one client through middleware
// and returns how many it let through to the handler; the others must be
// answered 429.
func Requests(middleware func(http.Handler) http.Handler) (admitted int, err error) {
	h := middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { admitted++ }))
	for range ProcRequests {
		rec := httptest.NewRecorder()
		before := admitted
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		if admitted == before && rec.Code != http.StatusTooManyRequests {
			return 0, errors.New("a request was refused with status " + strconv.Itoa(rec.Code) + ", not 429")
		}
	}
	return admitted, nil
}
