package metrics

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice/internal/sockfile"
)

// Listen listens on addr: "unix:PATH" for a Unix socket, or a loopback
// "host:port" ("127.0.0.1:9090", "[::1]:0", "localhost:9090"). A Unix
// socket follows the rules of every socket of sluiced (package sockfile):
// file mode perm whatever the umask, an instance lock, a stale socket
// replaced and anything else at PATH left alone; closing the listener
// removes its file. The metrics carry no secrets, but they name the limits
// and their traffic: they are not served beyond the host, nor to local
// users perm does not let in.
func Listen(addr string, perm fs.FileMode) (net.Listener, error) {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		if path == "" {
			return nil, fmt.Errorf("%w %q: want unix:PATH", ErrAddress, addr)
		}
		ln, err := sockfile.Listen(path, perm)
		if err != nil {
			return nil, fmt.Errorf("metrics socket %s: %w", path, err)
		}
		return &unixListener{Listener: ln}, nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("%w %q: want a loopback host:port or unix:PATH", ErrAddress, addr)
	}
	if ip := net.ParseIP(host); (ip == nil || !ip.IsLoopback()) && host != "localhost" {
		return nil, fmt.Errorf("%w %q: want a loopback host:port (127.0.0.1, ::1 or localhost) or unix:PATH", ErrAddress, addr)
	}
	return net.Listen("tcp", addr)
}

// unixListener removes its socket file when it is closed.
type unixListener struct {
	*sockfile.Listener
	once sync.Once
}

func (l *unixListener) Close() error {
	err := l.Listener.Close()
	l.once.Do(l.Remove)
	return err
}

// Handler returns the HTTP handler of the metrics: GET /metrics serves the
// text exposition format (or what the scraper negotiates), / points there.
func (r *Recorder) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(r.Registry(), promhttp.HandlerOpts{
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	}))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "sluiced metrics: GET /metrics")
	})
	return mux
}

// Serve serves the metrics on ln until ctx is done, then closes ln (a Unix
// socket's file is removed) and returns nil; otherwise it returns the
// error that stopped it.
func (r *Recorder) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           r.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       time.Minute,
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			srv.Shutdown(sctx)
		case <-done:
		}
	}()
	err := srv.Serve(ln)
	close(done)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
