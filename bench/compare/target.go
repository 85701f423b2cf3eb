package compare

import (
	"context"
	"fmt"
)

// A Target is one way of deciding the workload: Sluice over its native
// protocol, Redis running a Lua script over TCP, an in-process limiter...
type Target interface {
	// Name is the target's row label, e.g. "redis-lua (unix)".
	Name() string
	// Family groups targets in the chart: "sluice", "redis",
	// "in-process" or "echo".
	Family() string
	// Supports reports whether the target can decide limit k.
	Supports(k LimitKind) bool
	// Reset gives the next cell fresh state: no bucket from an earlier
	// cell may affect it.
	Reset(ctx context.Context) error
	// Dial opens one client connection that decides limit k.
	Dial(ctx context.Context, k LimitKind) (Conn, error)
	// Multiplexed reports whether many goroutines share one Conn, each
	// with one request in flight (the Sluice Go client), rather than one
	// goroutine sending batches (a Redis pipeline).
	Multiplexed() bool
	// Close stops whatever the target started.
	Close() error
}

// A Conn is one client's connection to a target.
type Conn interface {
	// Do decides keys in one round trip: one request when len(keys) is
	// 1, a pipelined batch otherwise. It returns how many were allowed.
	Do(ctx context.Context, keys []string) (allowed int, err error)
	Close() error
}

// Scenario is a shape of load: how many clients, how many requests each
// keeps in flight.
type Scenario struct {
	Name    string // "serial", "concurrent", "pipelined"
	Clients int    // concurrent clients, each with its own connection
	Depth   int    // requests in flight per client
}

// inProcess marks targets without a socket: a pipelined batch means
// nothing to them, so the pipelined scenario skips them.
type inProcess interface{ inProcess() }

// shape describes a scenario: "16 clients × 1 in flight".
func (s Scenario) shape() string {
	c := "clients"
	if s.Clients == 1 {
		c = "client"
	}
	return fmt.Sprintf("%d %s × %d in flight", s.Clients, c, s.Depth)
}
