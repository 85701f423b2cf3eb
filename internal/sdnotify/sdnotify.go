package sdnotify

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Notifier sends state changes to systemd. The nil *Notifier and one made
// from an empty address send nothing.
type Notifier struct {
	addr *net.UnixAddr
	mu   sync.Mutex
	conn *net.UnixConn // dialled on first use
}

// New returns a Notifier for the socket addr, the value of
// $NOTIFY_SOCKET: an absolute path, or '@' and an abstract name. An empty
// addr returns a Notifier that sends nothing.
func New(addr string) (*Notifier, error) {
	if addr == "" {
		return &Notifier{}, nil
	}
	if !strings.HasPrefix(addr, "/") && !strings.HasPrefix(addr, "@") || len(addr) < 2 {
		return nil, fmt.Errorf("%w %q: want an absolute path or an @abstract name", ErrAddress, addr)
	}
	// Go's net package maps a leading '@' to the abstract namespace.
	return &Notifier{addr: &net.UnixAddr{Name: addr, Net: "unixgram"}}, nil
}

// Enabled reports whether n sends anything.
func (n *Notifier) Enabled() bool { return n != nil && n.addr != nil }

// Ready tells systemd the service is up: its state is open and its sockets
// listen. status, if not empty, is shown by systemctl status.
func (n *Notifier) Ready(status string) error { return n.send("READY=1", status) }

// Reloading tells systemd a reload has started; call Ready when it is over
// (whatever its result). It carries the monotonic time that
// Type=notify-reload units require.
func (n *Notifier) Reloading(status string) error {
	return n.send("RELOADING=1\nMONOTONIC_USEC="+strconv.FormatInt(monotonicUsec(), 10), status)
}

// Stopping tells systemd the service is shutting down.
func (n *Notifier) Stopping(status string) error { return n.send("STOPPING=1", status) }

// Status sets the one-line status systemctl status shows.
func (n *Notifier) Status(status string) error { return n.send("", status) }

// send sends state and, if not empty, STATUS=status in one datagram.
func (n *Notifier) send(state, status string) error {
	if !n.Enabled() {
		return nil
	}
	msg := state
	if status != "" {
		status = strings.ReplaceAll(status, "\n", " ")
		if msg != "" {
			msg += "\n"
		}
		msg += "STATUS=" + status
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.conn == nil {
		c, err := net.DialUnix("unixgram", nil, n.addr)
		if err != nil {
			return fmt.Errorf("notify systemd: %w", err)
		}
		n.conn = c
	}
	n.conn.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := n.conn.Write([]byte(msg)); err != nil {
		// The socket may have been replaced (systemd re-executed): dial
		// again next time.
		n.conn.Close()
		n.conn = nil
		return fmt.Errorf("notify systemd: %w", err)
	}
	return nil
}

// Close releases the socket.
func (n *Notifier) Close() error {
	if !n.Enabled() {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.conn == nil {
		return nil
	}
	err := n.conn.Close()
	n.conn = nil
	return err
}

// monotonicUsec is CLOCK_MONOTONIC in microseconds, the clock systemd
// compares MONOTONIC_USEC with.
func monotonicUsec() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return ts.Nano() / 1e3
}
