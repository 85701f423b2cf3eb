package sluice

import (
	"context"
	"net"
)

// WithDial replaces how the client connects, so tests can watch or break
// the connection.
func WithDial(dial func(ctx context.Context, path string) (net.Conn, error)) Option {
	return func(o *options) { o.dial = dial }
}
