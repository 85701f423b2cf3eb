package compare

import (
	"context"

	"github.com/sluicehq/sluice/clients/go/sluice"
	"github.com/sluicehq/sluice/clients/go/sluice/direct"
)

// sluiceDirect is the direct path: each benchmark client maps the
// sidecar's state file (package direct) and decides in it, under the same
// slot locks as the sidecar, with no socket. Its buckets are the sidecar's.
type sluiceDirect struct{ sluiceNative }

func (t *sluiceDirect) Name() string { return "sluice direct" }

func (t *sluiceDirect) Dial(ctx context.Context, k LimitKind) (Conn, error) {
	l, err := t.limit(k)
	if err != nil {
		return nil, err
	}
	c, err := direct.Open(t.srv.statePath(), direct.Options{})
	if err != nil {
		return nil, err
	}
	return &directConn{c: c, l: l}, nil
}

type directConn struct {
	c *direct.Client
	l sluice.Limit
}

// Do decides each key in turn: a batch in the file costs what its
// decisions cost, there is no round trip to share.
func (c *directConn) Do(ctx context.Context, keys []string) (int, error) {
	allowed := 0
	for _, k := range keys {
		d, err := c.c.Acquire(ctx, c.l, k, 1)
		if err != nil {
			return allowed, err
		}
		allowed += b2i(d.Allowed)
	}
	return allowed, nil
}

func (c *directConn) Close() error { return c.c.Close() }
