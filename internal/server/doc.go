// Package server is the sidecar: it owns the state file, serves the native
// protocol (package proto), the Redis protocol (package proto/resp) and
// Envoy's rate limit service (gRPC, package internal/rls) on Unix sockets,
// decides global limits in Redis (package internal/global), keeps the file
// synced, and shuts down cleanly. Run is the whole lifecycle; cmd/sluiced
// only turns flags into a Config.
//
// # The request path
//
// Every front end decodes what it was sent into an engine.Request and lets
// engine.Do decide it (engine.Multi for all or nothing; decideGlobalMulti,
// globalmulti.go, for global limits all or nothing): native.go (and
// list.go, a named list) for the native protocol, resp_ratelimit.go (and
// resp_global.go, a globally routed key) for the Redis protocol's
// commands, rls.go for Envoy's rate limit service. A request on a global
// limit is the same Request with a Remote, a globalCall (global.go), which
// hands it to Redis or the limit's outage policy; engine.Do checks it as it
// checks every other. A failure is
// classified once, by statusFor (the server's errors, then engine.Status),
// and each front end only words the status in its protocol: the native
// protocol's statuses, the Redis protocol's -ERR lines (respConn.fail),
// the rate limit service's gRPC codes (rlsCode). A new front end is a
// decoder onto engine.Request and an encoder of engine.Result and of
// statusFor's statuses, nothing more.
//
// # Connections
//
// With Config.Transport goroutines, each connection has one goroutine that
// reads whatever has arrived, answers every complete request in it into one
// buffer, and writes that once (the stream type, shared by both protocols).
// The requests of one read share one reading of the server clock. Serving
// allocates nothing. With epoll, event loops (loop_linux.go) run the same
// streams and handlers instead: each wake-up serves every ready connection
// with one non-blocking read and one non-blocking write. With auto, the
// default on Linux, the loops learn how long to poll, up to a limit that
// follows the host's CPU pressure (pressure_linux.go), and do not poll for
// a connection that sends several requests at once (multiplexedAfter).
//
// A request waits at most Config.LockWait for a bucket's lock that another
// process keeps (a direct client stopped mid-decision), sleeping, then is
// answered Contended (-ERR in Redis) with the holder's pid, having changed
// nothing. An event loop never waits: such a request hands the loop over
// to a new goroutine (engine.Time.Blocking) and waits on the old one.
// Caps: MaxConns (further connections are answered Busy), an idle deadline,
// a deadline for a request from its first byte (slowloris), a write
// deadline (clients that do not read), frame and argument sizes checked
// before anything is allocated, and optional peer allow-lists (SO_PEERCRED).
// Malformed input is answered with an error and closes that connection
// only.
//
// # Leases
//
// A concurrency lease belongs to the connection that took it: given back
// when it closes, released by it or by a peer of the same uid (read with
// SO_PEERCRED when the connection is accepted), refused (Denied) to a peer
// of another uid. Its id is drawn at random by the connection (leases.go),
// so it cannot be guessed from another.
//
// # Time
//
// The server clock starts at the later of the wall clock and the highest
// time the state file recorded, and advances with the monotonic clock; a
// request may carry its own time instead (AT).
//
// # The Redis protocol
//
// resp.go reads commands and dispatches them; resp_table.go is the one
// list of commands (respCommands): each entry's name, arity, flags and key
// (what COMMAND reports), how it runs (parse, for a rate-limit command, or
// do) and what a transaction does with it (txRole). The rate-limit
// commands are in resp_ratelimit.go, the transaction in resp_tx.go (a
// transaction of global keys in resp_global.go, a native MULTI of global
// limits in globalmulti.go: both one call of Redis's multi script), INFO
// and DBSIZE in resp_info.go, the connection and server commands (HELLO,
// AUTH, CLIENT, CONFIG, COMMAND, PING ...) in resp_admin.go.
//
// # Adding a RESP command
//
// One entry in respCommands, with its function beside those of its kind:
// a rate-limit command's parse (queued unchecked in a transaction and
// decided with the others at EXEC, txTogether), or a do that runs once the
// arity and subcommand are checked (queued, txQueue; or run at once even
// inside MULTI, txNow). COMMAND, the arity checks, MULTI and CLIENT INFO's
// cmd= follow from the entry.
//
// # Adding a config field
//
// A field of Config, with its doc comment; its default, if zero does not
// mean it, as a Default constant applied in withDefaults; its range in
// Validate, which is the only check and names fields (a ConfigError), not
// flags. If sluiced sets it, its flag goes in cmd/sluiced's run beside the
// others and the field's flag name in configFlags (cmd/sluiced/flags.go),
// which turns Validate's errors into the flag's terms; then the README's
// table of flags.
//
// # Durability
//
// Every decision is written to the shared mapping before it is answered, so
// it survives the process being killed. The table is synced to disk every
// Config.SyncInterval (msync, MS_SYNC); an OS crash or power loss loses at
// most that much. On shutdown the server stops accepting, answers what it
// has received, syncs, marks the file clean and removes its sockets, so the
// next start serves it without a scan (and checks it in the background).
package server
