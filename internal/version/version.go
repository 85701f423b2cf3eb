package version

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/sluicehq/sluice/proto"
	"github.com/sluicehq/sluice/shm"
)

// Override, if set at link time, is the version reported:
//
//	go build -ldflags "-X github.com/sluicehq/sluice/internal/version.Override=v1.2.3" ./cmd/...
//
// Release builds set it; otherwise the module version (for "go install
// ...@v1.2.3") or the VCS revision recorded in the build is used.
var Override string

// The format versions this build writes and speaks, from the packages that
// define them.
const (
	StateFormat = shm.FormatVersion // the state file's format version
	Protocol    = proto.Version     // the native protocol's version byte
)

// Version returns the build's version: Override, else the main module's
// version, else "devel" with the VCS revision (and "+dirty" for a modified
// tree) when the build recorded one.
func Version() string {
	if Override != "" {
		return Override
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	return fromBuildInfo(bi)
}

func fromBuildInfo(bi *debug.BuildInfo) string {
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev == "" {
		return "devel"
	}
	return "devel-" + rev + dirty
}

// String is the --version line of program:
//
//	sluiced v1.2.3 (state file format 3, protocol 1, go1.26.0 linux/amd64)
func String(program string) string {
	return fmt.Sprintf("%s %s (state file format %d, protocol %d, %s %s/%s)",
		program, Version(), StateFormat, Protocol, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
