// Command sluiced is the Sluice sidecar. It turns flags (or SLUICE_*
// environment variables) into a server.Config and runs it until SIGINT or
// SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	iofs "io/fs"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/sluicehq/sluice/internal/server"
)

func main() {
	var c server.Config
	var level slog.Level
	fs := flag.NewFlagSet("sluiced", flag.ExitOnError)
	fs.StringVar(&c.StatePath, "state", server.DefaultStatePath, "state file (created if missing)")
	fs.StringVar(&c.SocketPath, "socket", server.DefaultSocketPath, "Unix socket of the native protocol")
	fs.StringVar(&c.RESPSocket, "resp-socket", server.DefaultRESPSocket, `Unix socket of the Redis protocol ("-" for none)`)
	fs.StringVar(&c.RESPAddr, "resp-addr", "", "also serve the Redis protocol on this TCP host:port (loopback only; smyte/ratelimit used 9049)")
	fs.BoolVar(&c.RESPAllowRemote, "resp-allow-remote", false, "allow --resp-addr on a non-loopback address (no authentication!)")
	fs.Uint64Var(&c.Slots, "slots", 0, fmt.Sprintf("slot count of a new state file (default %d)", server.DefaultSlots))
	fs.IntVar(&c.SlotSize, "slot-size", 0, "slot size of a new state file: 64, 128 or 256 (default 64)")
	fs.DurationVar(&c.SyncInterval, "sync-interval", server.DefaultSyncInterval, "how often the state file is synced to disk")
	mode := fs.String("socket-mode", "0660", "permissions of the socket file, octal")
	fs.IntVar(&c.MaxConns, "max-conns", server.DefaultMaxConns, "connections served at once; more are refused with Busy")
	fs.DurationVar(&c.IdleTimeout, "idle-timeout", server.DefaultIdleTimeout, "close a connection idle this long")
	fs.Func("allow-uid", "serve only peers with these uids (comma-separated), or with an --allow-gid", ids(&c.AllowUIDs))
	fs.Func("allow-gid", "serve only peers with these gids (comma-separated), or with an --allow-uid", ids(&c.AllowGIDs))
	fs.TextVar(&level, "log-level", slog.LevelInfo, "debug, info, warn or error")
	fs.VisitAll(func(f *flag.Flag) { // SLUICE_SYNC_INTERVAL=2s is --sync-interval 2s
		env := "SLUICE_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(env); ok {
			if err := fs.Set(f.Name, v); err != nil {
				fmt.Fprintf(os.Stderr, "sluiced: %s=%q: %v\n", env, v, err)
				os.Exit(2)
			}
		}
	})
	fs.Parse(os.Args[1:])
	m, err := strconv.ParseUint(*mode, 8, 32)
	if err != nil || m > 0o777 {
		fmt.Fprintf(os.Stderr, "sluiced: --socket-mode %q: want octal permissions such as 0660\n", *mode)
		os.Exit(2)
	}
	c.SocketMode = iofs.FileMode(m)
	c.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := server.Run(ctx, c); err != nil {
		c.Logger.Error("sluiced failed", "err", err)
		os.Exit(1)
	}
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
