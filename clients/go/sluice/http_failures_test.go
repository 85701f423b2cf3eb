package sluice_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clients/go/sluice"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/proto"
)

// answering returns the socket of a fake sidecar that answers every
// request, once the start check is done, with an error of status st.
func answering(t *testing.T, st proto.Status, msg string) string {
	return fakeSidecar(t, func(fc *fakeConn) {
		for {
			h, frame, ok := fc.next()
			if !ok {
				return
			}
			op := proto.Opcode(frame[proto.HeaderLen])
			fc.respond(h.ID, 1, func(b []byte) []byte { return proto.AppendError(b, op, st, msg) })
		}
	})
}

// olderSidecar returns the socket of a fake sidecar of protocol version 2,
// which refuses a frame of version 3 with BadVersion, as the real one does.
func olderSidecar(t *testing.T) string {
	return fakeSidecar(t, func(fc *fakeConn) {
		h, _, ok := fc.next()
		if !ok || h.Version <= 2 {
			return
		}
		b, start := proto.BeginFrameVersion(nil, 2, proto.KindResponse, h.ID)
		b = proto.AppendError(b, 0, proto.StatusBadVersion, "version 3, this side speaks 1 to 2")
		fc.nc.Write(proto.EndFrame(b, start, 1))
	})
}

// What the middleware does when a decision fails, for each kind of
// failure and each failure policy: the README's table ("Failure policy").
// The failure policy decides when the sidecar cannot (an outage of a
// sidecar that answered before, a full table, an internal error); a
// sidecar that has never answered gets 503 and a mistake 500, whatever
// the policy. The middleware logs each kind of failure once.
func TestMiddleware_failures(t *testing.T) {
	full := startSidecar(t, func(c *server.Config) { c.Slots, c.SlotSize = 8, 64 })
	filler := dial(t, full.cfg.SocketPath)
	for i := 0; ; i++ {
		if _, err := filler.Acquire(ctx(t), tb10, fmt.Sprint("fill:", i), 1); err != nil {
			break
		}
	}
	named := startNamed(t)
	refusing := startSidecar(t, func(c *server.Config) { c.AllowUIDs = []uint32{uint32(os.Getuid()) + 1} })
	absent := filepath.Join(shortDir(t), "absent.sock")
	internal := answering(t, proto.StatusInternal, "disk on fire")
	unsupported := answering(t, proto.StatusUnsupported, "a global limit needs --global-redis")
	older := olderSidecar(t)

	type want struct {
		status     int
		retryAfter string
		logged     bool // the middleware logged the failure (once)
		degraded   bool // the failure policy decided (counted by Degraded)
	}
	var (
		open    = want{200, "", false, true}
		closed  = want{429, "1", false, true} // Retry-After: the client's reconnect backoff, rounded up
		outage  = want{503, "", true, false}  // the error handler's default for ErrUnavailable
		mistake = want{500, "", true, false}
	)
	dialer := func(path string, opts ...sluice.Option) func(t *testing.T, opts ...sluice.Option) *sluice.Client {
		return func(t *testing.T, more ...sluice.Option) *sluice.Client {
			return dial(t, path, append(opts, more...)...)
		}
	}
	for _, tc := range []struct {
		name                  string
		client                func(t *testing.T, opts ...sluice.Option) *sluice.Client
		limit                 sluice.Limit
		opts                  []sluice.MiddlewareOption
		key                   func(*http.Request) (string, bool)
		open, closed, failErr want
	}{
		{"outage", dialGone, tb10, nil, nil, open, closed, outage},
		{"outage, leased", dialGone, sluice.Concurrency(1, time.Minute), nil, nil, open, closed, outage},
		{"never answered", dialer(absent, sluice.WithLazyStart()), tb10, nil, nil, outage, outage, outage},
		{"never answered, leased", dialer(absent, sluice.WithLazyStart()), sluice.Concurrency(1, time.Minute), nil, nil, outage, outage, outage},
		{"table full", dialer(full.cfg.SocketPath), tb10, nil, nil,
			want{200, "", true, true}, want{429, "1", true, true}, want{503, "", true, false}},
		{"internal error", dialer(internal), tb10, nil, nil,
			want{200, "", true, true}, want{429, "1", true, true}, want{503, "", true, false}},
		{"invalid limit", dialer(named.cfg.SocketPath), sluice.TokenBucket(0, time.Second, 1), nil, nil, mistake, mistake, mistake},
		{"unknown name", dialer(named.cfg.SocketPath), sluice.Limit{Name: "nope"}, nil, nil, mistake, mistake, mistake},
		{"lease of a rate limit", dialer(named.cfg.SocketPath), sluice.Limit{Name: "api"}, []sluice.MiddlewareOption{sluice.WithLease()}, nil, mistake, mistake, mistake},
		{"unsupported", dialer(unsupported), tb10, nil, nil, mistake, mistake, mistake},
		{"older sidecar", dialer(older), sluice.SlidingLog(2, time.Minute), nil, nil, mistake, mistake, mistake},
		{"refused process", dialer(refusing.cfg.SocketPath, sluice.WithLazyStart()), tb10, nil, nil, mistake, mistake, mistake},
		{"invalid key", dialer(named.cfg.SocketPath), tb10, nil,
			func(*http.Request) (string, bool) { return strings.Repeat("k", proto.MaxKeyLen+1), true }, mistake, mistake, mistake},
		{"closed client", func(t *testing.T, opts ...sluice.Option) *sluice.Client {
			c := dial(t, named.cfg.SocketPath, opts...)
			c.Close()
			return c
		}, tb10, nil, nil, mistake, mistake, mistake},
	} {
		for _, p := range []struct {
			policy sluice.FailurePolicy
			want   want
		}{{sluice.FailOpen, tc.open}, {sluice.FailClosed, tc.closed}, {sluice.FailError, tc.failErr}} {
			t.Run(tc.name+"/"+p.policy.String(), func(t *testing.T) {
				log := new(logBuffer)
				c := tc.client(t, sluice.WithFailurePolicy(p.policy), sluice.WithLogger(log.logger()))
				key := tc.key
				if key == nil {
					key = byPath
				}
				served := 0
				next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served++ })
				h := sluice.Middleware(c, tc.limit, key, tc.opts...)(next)
				for i := range 3 {
					headers(t, fmt.Sprint("request ", i), serve(h, "/f"), p.want.status, p.want.retryAfter, "", "")
				}
				if want := map[bool]int{true: 3}[p.want.status == 200]; served != want {
					t.Errorf("the handler served %d requests, want %d", served, want)
				}
				lines := log.count("could not decide requests")
				if p.want.logged && (lines != 1 || log.count("requests=1 total=1") != 1) || !p.want.logged && lines != 0 {
					t.Errorf("%d log lines about the failure, want logged %v:\n%s", lines, p.want.logged, log.buf.String())
				}
				if n := c.Degraded(); (n == 3) != p.want.degraded || n != 0 && n != 3 {
					t.Errorf("Degraded() = %d, want the policy's decisions counted: %v", n, p.want.degraded)
				}
			})
		}
	}
}
