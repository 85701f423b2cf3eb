package version

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	for _, c := range []struct {
		bi   debug.BuildInfo
		want string
	}{
		{debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}}, "v1.4.0"},
		{debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "devel"},
		{debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}}, "devel-0123456789ab+dirty"},
		{debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}}}, "devel-abc"},
	} {
		if got := fromBuildInfo(&c.bi); got != c.want {
			t.Errorf("fromBuildInfo(%+v) = %q, want %q", c.bi, got, c.want)
		}
	}
}

// Ensure the line names the formats from the packages that define them,
// and that -ldflags -X sets the version of a real build.
func TestString(t *testing.T) {
	want := fmt.Sprintf("sluiced devel (state file format %d, protocol %d, %s", StateFormat, Protocol, runtime.Version())
	if got := String("sluiced"); !strings.HasPrefix(got, strings.Replace(want, "devel", Version(), 1)) {
		t.Errorf("String = %q", got)
	}
	bin := filepath.Join(t.TempDir(), "sluice")
	build := exec.Command("go", "build", "-o", bin, "-ldflags", "-X github.com/sluicehq/sluice/internal/version.Override=v9.8.7", "../../cmd/sluice")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("sluice v9.8.7 (state file format %d, protocol %d, ", StateFormat, Protocol); !strings.HasPrefix(string(out), want) {
		t.Errorf("built binary says %q, want prefix %q", out, want)
	}
}
