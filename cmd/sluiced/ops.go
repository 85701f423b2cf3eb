package main

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/errtext"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/sdnotify"
)

// The operations side of sluiced: log format, config file and its reloads,
// metrics, and systemd's notifications.

// newLogger returns the logger of --log-format: text or json. Errors in
// its records are in words, without the packages' prefixes (errtext).
func newLogger(format string, w io.Writer, level slog.Level) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if err, ok := a.Value.Any().(error); ok && a.Value.Kind() == slog.KindAny {
			return slog.String(a.Key, errtext.String(err))
		}
		return a
	}}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

// ops holds what runs beside the server.
type ops struct {
	log     *slog.Logger
	notify  *sdnotify.Notifier
	limits  *config.Holder  // nil without --config
	watcher *config.Watcher // nil without --config
	metrics *metrics.Recorder
	mln     net.Listener // nil without --metrics
}

// setupOps loads the config file and binds the metrics address, before the
// server creates anything: either failing is a usage error, and so is a
// config with global limits when the sidecar has no Redis (haveRedis) to
// decide them. A reload that brings one is refused the same way. A
// metrics Unix socket gets socketMode, as the other sockets do.
func setupOps(log *slog.Logger, configPath, metricsAddr string, socketMode fs.FileMode, notifySocket string, haveRedis bool) (*ops, error) {
	o := &ops{log: log, metrics: metrics.New()}
	n, err := sdnotify.New(notifySocket)
	if err != nil {
		return nil, fmt.Errorf("NOTIFY_SOCKET: %w", err)
	}
	o.notify = n
	if configPath != "" {
		s, err := config.Load(configPath)
		if err == nil {
			err = checkGlobal(s, haveRedis)
		}
		if err != nil {
			return nil, fmt.Errorf("--config: %w", err)
		}
		o.limits = config.NewHolder(s)
		o.watcher = &config.Watcher{Path: configPath, Holder: o.limits, Logger: log,
			Check: func(s *config.Set) error { return checkGlobal(s, haveRedis) },
			OnReload: func(r config.Result, _ error) {
				o.metrics.ConfigReload(r == config.Reloaded)
				o.metrics.ConfigKept(len(o.limits.Load().Kept()))
			}}
		log.Info("config loaded", "path", configPath, "limits", s.Len())
	}
	if metricsAddr != "" {
		ln, err := metrics.Listen(metricsAddr, socketMode)
		if err != nil {
			return nil, fmt.Errorf("--metrics: %w", err)
		}
		o.mln = ln
	}
	return o, nil
}

// start runs the config watcher, the metrics server and the SIGHUP handler
// until ctx is done. wait returns when they have stopped.
func (o *ops) start(ctx context.Context) (wait func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP) // never let SIGHUP's default action kill the sidecar
	done := make(chan struct{}, 3)
	n := 1
	go func() {
		defer func() { signal.Stop(hup); done <- struct{}{} }()
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				o.reload(ctx)
			}
		}
	}()
	if o.watcher != nil {
		n++
		go func() { o.watcher.Run(ctx); done <- struct{}{} }()
	}
	if o.mln != nil {
		n++
		go func() {
			if err := o.metrics.Serve(ctx, o.mln); err != nil {
				o.log.Error("metrics server stopped", "err", err)
			}
			done <- struct{}{}
		}()
		o.log.Info("serving metrics", "addr", o.mln.Addr().String())
	}
	return func() {
		for range n {
			<-done
		}
	}
}

// reload answers SIGHUP: reload the config file, telling systemd. It
// returns when ctx is done, whatever the read of the file is doing.
func (o *ops) reload(ctx context.Context) {
	o.notify.Reloading("reloading the config file")
	status := "serving"
	if o.watcher == nil {
		o.log.Info("SIGHUP: no config file to reload (sluiced runs without --config)")
	} else if err := o.watcher.Reload(ctx); err != nil {
		if ctx.Err() != nil {
			return // stopping
		}
		status = "serving; the last config reload failed: " + err.Error()
	}
	o.notify.Ready(status)
}
