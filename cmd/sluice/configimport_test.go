package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	gproto "google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/internal/sidecartest"
)

// importFile runs "sluice config import" on path and returns what it
// printed.
func importFile(t *testing.T, path string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run([]string{"config", "import", path}, sidecarEnv(""), &stdout, &stderr); code != exitOK || stderr.Len() != 0 {
		t.Fatalf("config import %s: %d, %s", path, code, stderr.String())
	}
	return stdout.String()
}

// rlsSidecar runs a sidecar serving the rate limit service of the config
// file content data, its clock stopped at t0, and returns a client of it.
func rlsSidecar(t *testing.T, file string, data []byte) rlspb.RateLimitServiceClient {
	t.Helper()
	set, err := config.Parse(file, data)
	if err != nil {
		t.Fatal(err)
	}
	rlsSock := filepath.Join(sidecartest.ShortDir(t), "rls")
	startSidecarWith(t, 128, config.NewHolder(set), func(c *server.Config) { c.RLSSocket, c.RLSHeaders = rlsSock, true })
	conn, err := grpc.NewClient("unix://"+rlsSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlspb.NewRateLimitServiceClient(conn)
}

// The imported config decides as the envoyproxy/ratelimit file given to
// the sidecar as it is: the same requests, in the same order, get the same
// responses, every field and header of them. The file uses every field
// the import writes: wildcards, nesting, a whitelist, a blocked value,
// unlimited, shadow mode, a shared wildcard, names and replaces, a month.
func TestConfigImport_decidesAsTheFile(t *testing.T) {
	path := filepath.Join("testdata", "envoy-ratelimit.yaml")
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	imported := importFile(t, path)
	if !strings.Contains(imported, "\nrls:\n  - domain: edge\n") || !strings.Contains(imported, "# fixed_window:limit=100,window=1s") {
		t.Fatalf("the import:\n%s", imported)
	}
	a := rlsSidecar(t, path, orig)
	b := rlsSidecar(t, "imported.yaml", []byte(imported))
	d := func(kv ...string) *ratelimitpb.RateLimitDescriptor {
		var es []*ratelimitpb.RateLimitDescriptor_Entry
		for i := 0; i < len(kv); i += 2 {
			es = append(es, &ratelimitpb.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		return &ratelimitpb.RateLimitDescriptor{Entries: es}
	}
	reqs := []*rlspb.RateLimitRequest{
		{Domain: "edge", Descriptors: []*ratelimitpb.RateLimitDescriptor{d("remote_address", "1.2.3.4")}},
		{Domain: "edge", Descriptors: []*ratelimitpb.RateLimitDescriptor{d("remote_address", "50.0.0.5")}},
		{Domain: "edge", Descriptors: []*ratelimitpb.RateLimitDescriptor{d("remote_address", "10.0.0.1"), d("path", "/x", "user", "alice")}},
		{Domain: "edge", Descriptors: []*ratelimitpb.RateLimitDescriptor{d("path", "/api/v1"), d("service", "s")}},
		{Domain: "edge", Descriptors: []*ratelimitpb.RateLimitDescriptor{d("path", "/api/v2")}},
		{Domain: "edge", Descriptors: []*ratelimitpb.RateLimitDescriptor{d("path", "/x", "user", "bob"), d("client", "yes: no")}},
		{Domain: "edge", HitsAddend: 60, Descriptors: []*ratelimitpb.RateLimitDescriptor{d("remote_address", "1.2.3.4")}},
		{Domain: "other", Descriptors: []*ratelimitpb.RateLimitDescriptor{d("remote_address", "1.2.3.4")}},
	}
	for round := range 8 { // until the windows are over their limits
		for i, r := range reqs {
			ra, err := a.ShouldRateLimit(t.Context(), r)
			if err != nil {
				t.Fatal(err)
			}
			rb, err := b.ShouldRateLimit(t.Context(), r)
			if err != nil {
				t.Fatal(err)
			}
			if !gproto.Equal(ra, rb) {
				t.Fatalf("round %d, request %d: the file answers\n%v\nthe import\n%v", round, i, ra, rb)
			}
		}
	}
}

// A file that is not an envoyproxy/ratelimit file, or not a valid one, is
// refused with the reason, and nothing is printed.
func TestConfigImport_errors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, content, stderr string }{
		{"sluice.yaml", "limits:\n  login: \"gcra:burst=2,count=5,period=1m\"\n", "not an envoyproxy/ratelimit file"},
		{"unit.yaml", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n", "invalid rate limit unit 'fortnight'"},
		{"dup.yaml", "domain: d\ndescriptors:\n  - key: a\n  - key: a\n", "duplicate descriptor composite key"},
		{"yaml.yaml", "domain: [\n", "yaml.yaml:"},
	} {
		path := filepath.Join(dir, tc.name)
		if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		code := run([]string{"config", "import", path}, sidecarEnv(""), &stdout, &stderr)
		if code != exitInvalid || stdout.Len() != 0 || !strings.Contains(stderr.String(), tc.stderr) {
			t.Errorf("%s: %d, stdout %q, stderr %q; want %d and %q", tc.name, code, stdout.String(), stderr.String(), exitInvalid, tc.stderr)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"config", "import", filepath.Join(dir, "none.yaml")}, sidecarEnv(""), &stdout, &stderr); code != exitInvalid || !strings.Contains(stderr.String(), "no such file") {
		t.Errorf("a missing file: %d, %q", code, stderr.String())
	}
}
