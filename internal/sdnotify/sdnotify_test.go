package sdnotify

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// listen listens on a unixgram socket at addr as systemd does.
func listen(t *testing.T, addr string) *net.UnixConn {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// recv reads one datagram.
func recv(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return string(buf[:n])
}

func TestNotifier(t *testing.T) {
	for _, addr := range []string{
		filepath.Join(t.TempDir(), "notify"),
		fmt.Sprintf("@sluice-sdnotify-test-%d-%d", os.Getpid(), time.Now().UnixNano()),
	} {
		t.Run(strings.TrimPrefix(addr[:1], "/")+"addr", func(t *testing.T) {
			l := listen(t, addr)
			n, err := New(addr)
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			if err := n.Ready("serving 1024 slots"); err != nil {
				t.Fatal(err)
			}
			if got := recv(t, l); got != "READY=1\nSTATUS=serving 1024 slots" {
				t.Errorf("ready: %q", got)
			}
			if err := n.Reloading(""); err != nil {
				t.Fatal(err)
			}
			got := recv(t, l)
			usec, ok := strings.CutPrefix(got, "RELOADING=1\nMONOTONIC_USEC=")
			if v, err := strconv.ParseInt(usec, 10, 64); !ok || err != nil || v <= 0 || v > monotonicUsec() {
				t.Errorf("reloading: %q", got)
			}
			n.Status("two\nlines")
			if got := recv(t, l); got != "STATUS=two lines" {
				t.Errorf("status: %q", got)
			}
			n.Stopping("")
			if got := recv(t, l); got != "STOPPING=1" {
				t.Errorf("stopping: %q", got)
			}
		})
	}
}

// Ensure a Notifier outside systemd does nothing, and a bad address is
// refused.
func TestNew(t *testing.T) {
	n, err := New("")
	if err != nil || n.Enabled() || n.Ready("x") != nil || n.Close() != nil {
		t.Fatalf("New(\"\") = %v, %v", n, err)
	}
	var nilN *Notifier
	if nilN.Ready("") != nil || nilN.Stopping("") != nil {
		t.Fatal("a nil Notifier sent")
	}
	for _, bad := range []string{"relative/path", "@"} {
		if _, err := New(bad); !errors.Is(err, ErrAddress) {
			t.Errorf("New(%q) = %v", bad, err)
		}
	}
	// Nobody listening: an error, not a hang.
	n, _ = New(filepath.Join(t.TempDir(), "none"))
	if err := n.Ready(""); err == nil {
		t.Fatal("sent to a socket nobody listens on")
	}
}
