package server

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// Ensure the socket's mode is what was asked even under a permissive umask.
func TestServer_socketModeUnderUmask(t *testing.T) {
	old := unix.Umask(0)
	defer unix.Umask(old)
	sc := start(t, Config{})
	for _, p := range []string{sc.cfg.SocketPath, sc.cfg.RESPSocket} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != DefaultSocketMode {
			t.Errorf("%s: mode %v %v, want %v", p, fi.Mode().Perm(), err, os.FileMode(DefaultSocketMode))
		}
	}
}
