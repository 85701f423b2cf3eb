// Command sluiced is the Sluice sidecar. It turns flags (or SLUICE_*
// environment variables) into a server.Config and runs it until SIGINT or
// SIGTERM.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/errtext"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/internal/version"
	"github.com/sluicehq/sluice/proto"
	"github.com/sluicehq/sluice/shm"
)

// Exit statuses.
const (
	exitOK    = 0
	exitFail  = 1 // the sidecar could not start, or its final sync failed
	exitUsage = 2 // a flag or environment variable is invalid
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr))
}

// run parses args (and SLUICE_* variables read with env) into a Config,
// checks it whole before creating anything, and runs the sidecar until ctx
// is done. Every problem with the flags is one line on stderr and exit
// status 2.
func run(ctx context.Context, args []string, env func(string) (string, bool), stdout, stderr io.Writer) int {
	var c server.Config
	var level slog.Level
	fs := flag.NewFlagSet("sluiced", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.StatePath, "state", server.DefaultStatePath, "state file (created if missing)")
	fs.StringVar(&c.SocketPath, "socket", server.DefaultSocketPath, "Unix socket of the native protocol")
	fs.StringVar(&c.RESPSocket, "resp-socket", server.DefaultRESPSocket, `Unix socket of the Redis protocol ("-" for none)`)
	fs.StringVar(&c.RESPAddr, "resp-addr", "", "also serve the Redis protocol on this TCP host:port (loopback only; smyte/ratelimit used 9049)")
	fs.BoolVar(&c.RESPAllowRemote, "resp-allow-remote", false, "allow --resp-addr on a non-loopback address (no authentication!)")
	fs.StringVar(&c.RLSSocket, "rls-socket", "", "serve Envoy's rate limit service (gRPC) on this Unix socket, deciding the config file's rls domains")
	fs.StringVar(&c.RLSAddr, "rls-addr", "", "also serve Envoy's rate limit service on this TCP host:port (loopback only)")
	fs.BoolVar(&c.RLSAllowRemote, "rls-allow-remote", false, "allow --rls-addr on a non-loopback address (no authentication!)")
	fs.BoolVar(&c.RLSHeaders, "rls-headers", false, "add the RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset headers to the rate limit service's answers")
	fs.Uint64Var(&c.Slots, "slots", 0, fmt.Sprintf("slot count of a new state file (default %d); an existing file keeps its own", server.DefaultSlots))
	fs.IntVar(&c.SlotSize, "slot-size", 0, "slot size of a new state file: 64, 128 or 256 (default 64); an existing file keeps its own")
	fs.Uint64Var(&c.ArenaCells, "arena-cells", 0, "64-byte cells of a new state file's arena, where sliding_log, window_counters and concurrency buckets keep their state (default a quarter of the slot count, at least 1024); an existing file keeps its own")
	fs.BoolVar(&c.HugePages, "huge-pages", false, "map the state file with huge pages where the kernel can (transparent huge pages, a file system that caches large folios): fewer TLB misses on many buckets, but each sync writes every 2 MiB page with a changed slot whole")
	fs.TextVar((*proto.Duration)(&c.SyncInterval), "sync-interval", proto.Duration(server.DefaultSyncInterval), "sync the state file to disk every `duration`")
	mode := fs.String("socket-mode", "0660", "permissions of the socket files (native, Redis and metrics), octal")
	fs.IntVar(&c.MaxConns, "max-conns", server.DefaultMaxConns, "connections served at once; more are refused with Busy")
	fs.IntVar(&c.MaxConnsPerUID, "max-conns-per-uid", 0, "connections one user (peer uid) may hold at once; 0 for no cap")
	fs.StringVar(&c.Transport, "transport", server.TransportAuto, "how connections are served: auto (event loops that poll only for connections with one request in flight; goroutines where there is no epoll), goroutines (one each) or epoll (event loops only, Linux)")
	fs.IntVar(&c.Loops, "loops", 0, "event loops of --transport auto and epoll (default half the CPUs, at least one)")
	fs.Func("loop-spin", fmt.Sprintf("an event loop polls for the next request for `duration` before it sleeps (0: sleep at once); --transport auto polls at most this long, as long as recent requests took to come (default under auto %v, or %v while the host's CPU pressure is low and no CPU quota applies; %v under epoll)", server.DefaultAutoLoopSpin, server.DefaultLoopSpin, server.DefaultLoopSpin), func(s string) error {
		var d proto.Duration
		if err := d.UnmarshalText([]byte(s)); err != nil {
			return err
		}
		// The flag's 0 is no polling; the Config's, the transport's default.
		c.LoopSpin = cmp.Or(time.Duration(d), -1)
		return nil
	})
	fs.TextVar((*proto.Duration)(&c.IdleTimeout), "idle-timeout", proto.Duration(server.DefaultIdleTimeout), "close a connection idle for `duration` (one holding concurrency leases: not before they expire)")
	fs.TextVar((*proto.Duration)(&c.LockWait), "lock-wait", proto.Duration(server.DefaultLockWait), "a request waits at most `duration` for a bucket's lock that another process keeps (a stopped direct client) before it is answered with an error naming that process")
	fs.Func("allow-uid", "serve only peers with these uids (comma-separated), or with an --allow-gid", ids(&c.AllowUIDs))
	fs.Func("allow-gid", "serve only peers with these gids (comma-separated), or with an --allow-uid", ids(&c.AllowGIDs))
	fs.Func("log-level", "log from `level` up: debug, info, warn or error (default info)", func(s string) error {
		if level.UnmarshalText([]byte(s)) != nil {
			return errors.New("want debug, info, warn or error")
		}
		return nil
	})
	logFormat := fs.String("log-format", "text", "text or json")
	configPath := fs.String("config", "", "config file of named limits and rate limit service domains, or an envoyproxy/ratelimit file (reloaded on SIGHUP and when it changes)")
	var gf globalFlags
	gf.register(fs)
	metricsAddr := fs.String("metrics", "", "serve Prometheus metrics on this loopback host:port or unix:PATH (a socket of --socket-mode)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file (for go tool pprof)")
	showVersion := fs.Bool("version", false, "print the version and the format versions, and exit")
	usage := func(format string, a ...any) int {
		fmt.Fprintln(stderr, "sluiced: "+errtext.Clean(fmt.Sprintf(format, a...))+" (sluiced -h lists the flags)")
		return exitUsage
	}
	var envErr error
	fs.VisitAll(func(f *flag.Flag) { // SLUICE_SYNC_INTERVAL=2s is --sync-interval 2s
		name := "SLUICE_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := env(name); ok && envErr == nil && f.Name != "version" {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = fmt.Errorf("%s=%q: %v", name, v, err)
			}
		}
	})
	if envErr != nil {
		return usage("%v", envErr)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stderr)
			fmt.Fprintln(stderr, "usage: sluiced [flags]   (each flag may also be set as SLUICE_FLAG_NAME)")
			fs.PrintDefaults()
			return exitOK
		}
		return usage("%s", errtext.Flag(err))
	}
	if fs.NArg() > 0 {
		return usage("unexpected argument %q", fs.Arg(0))
	}
	if *showVersion {
		fmt.Fprintln(stdout, version.String("sluiced"))
		return exitOK
	}
	m, err := strconv.ParseUint(*mode, 8, 32)
	if err != nil {
		return usage("--socket-mode %q: want octal permissions such as 0660", *mode)
	}
	c.SocketMode = iofs.FileMode(m)
	// Every flag holds a value, its default or the one given: a zero is
	// refused where the Config would take it for the default.
	if err := c.ValidateGiven(hasFlag); err != nil {
		return usage("%s", inFlagTerms(err))
	}
	log, err := newLogger(*logFormat, stderr, level)
	if err != nil {
		return usage("%v", err)
	}
	c.Logger = log
	if c.Global, err = gf.options(); err != nil {
		return usage("%v", err)
	}
	notifySocket, _ := env("NOTIFY_SOCKET")
	o, err := setupOps(log, *configPath, *metricsAddr, c.SocketMode, notifySocket, c.Global != nil)
	if err != nil {
		return usage("%v", err)
	}
	octx, stopOps := context.WithCancel(ctx)
	wait := o.start(octx)
	defer func() { stopOps(); wait() }()
	c.Limits, c.Metrics = o.limits, o.metrics
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return usage("--cpuprofile: %v", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return usage("--cpuprofile: %v", err)
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	c.Ready = func() { o.notify.Ready("serving " + c.SocketPath) }
	go func() { <-ctx.Done(); o.notify.Stopping("stopping") }()
	if err := server.Run(ctx, c); err != nil {
		log.Error("sluiced failed", "err", failure(err, c))
		return exitFail
	}
	return exitOK
}

// failure says why the sidecar failed, in words.
func failure(err error, c server.Config) string {
	if errors.Is(err, shm.ErrLocked) {
		return "the state file " + c.StatePath + " is in use by another process: another sluiced serves it (stop that one, or give this one its own --state)"
	}
	return errtext.String(err)
}

// ids parses a comma-separated list of numeric uids or gids into *dst.
func ids(dst *[]uint32) func(string) error {
	return func(s string) error {
		for _, f := range strings.Split(s, ",") {
			v, err := strconv.ParseUint(strings.TrimSpace(f), 10, 32)
			if err != nil {
				return fmt.Errorf("%q is not a numeric id", f)
			}
			*dst = append(*dst, uint32(v))
		}
		return nil
	}
}
