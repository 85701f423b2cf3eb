package server

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"runtime"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/global"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/sockfile"
)

// Defaults for a Config's zero fields.
const (
	DefaultStatePath    = "var/sluice.state"
	DefaultSocketPath   = "var/sluice.sock"
	DefaultRESPSocket   = "var/sluice-resp.sock"
	DefaultSlots        = engine.DefaultSlots
	DefaultSlotSize     = engine.DefaultSlotSize
	DefaultSyncInterval = time.Second
	DefaultSocketMode   = 0o660
	DefaultMaxConns     = 1024
	DefaultIdleTimeout  = 5 * time.Minute
	DefaultFrameTimeout = 10 * time.Second
	DefaultWriteTimeout = 10 * time.Second
	DefaultDrainTimeout = 5 * time.Second
	DefaultLoopSpin     = 50 * time.Microsecond // TransportEpoll's
	// DefaultAutoLoopSpin is TransportAuto's LoopSpin: the most its loops
	// poll while the host's CPUs are contended. Measured on a busy 2-CPU
	// host with redis-benchmark, a budget of up to 10µs served one to 50
	// connections faster than one of up to 50µs and than none. While
	// they are not (the kernel's CPU pressure, where Linux reports it: see
	// spinGovernor), the limit is DefaultLoopSpin.
	DefaultAutoLoopSpin = 10 * time.Microsecond
	DefaultLockWait     = engine.DefaultLockWait
)

// The transports of Config.Transport.
const (
	// TransportAuto is the default: event loops, polling only for
	// connections with one request in flight and only as long as recent
	// requests took to come. Where there is no epoll (other than Linux),
	// it is TransportGoroutines.
	TransportAuto       = "auto"
	TransportGoroutines = "goroutines"
	TransportEpoll      = "epoll"
)

// Config is what the sidecar needs to run. Zero fields take the defaults
// above.
type Config struct {
	StatePath  string // the state file; created if missing
	SocketPath string // the native protocol's Unix socket
	RESPSocket string // the Redis-protocol Unix socket; "-" for none
	RESPAddr   string // the Redis protocol on TCP, host:port; "" for none
	// RESPAllowRemote lets RESPAddr be other than a loopback address. The
	// listener has no authentication: anyone who reaches it can use it.
	RESPAllowRemote bool
	Slots           uint64        // slot count of a new state file
	SlotSize        int           // slot size of a new state file: 64, 128 or 256
	ArenaCells      uint64        // arena cells of a new state file (engine.Options.ArenaCells)
	HugePages       bool          // map the state file with huge pages where the kernel can (engine.Options.HugePages)
	SyncInterval    time.Duration // how often the table is synced to disk
	SocketMode      fs.FileMode   // permissions of the socket file
	MaxConns        int           // connections served at once; more are answered Busy and closed
	// MaxConnsPerUID, if set, bounds the connections one user (a peer uid,
	// read with SO_PEERCRED on the Unix sockets) may hold at once; more are
	// answered Busy and closed. TCP connections are not counted.
	MaxConnsPerUID int
	IdleTimeout    time.Duration // how long a connection may wait between frames (holding leases: until they expire, if later)
	FrameTimeout   time.Duration // how long a started frame may take to arrive
	WriteTimeout   time.Duration // how long a client may take to accept an answer
	DrainTimeout   time.Duration // how long shutdown waits for connections to finish
	// LockWait bounds how long a request waits for a bucket's lock that
	// another process keeps (a direct client stopped while it decides):
	// past it the request is answered with an error naming that process
	// (the native protocol's Contended, -ERR in Redis) and changes nothing.
	// A request that carries its client's deadline (the native protocol's
	// FlagDeadline) waits until that deadline if it comes first. Waiting
	// costs no CPU after a short spin, and an event loop hands its other
	// connections over to a new goroutine before it waits.
	LockWait time.Duration
	Logger   *slog.Logger // nil: slog.Default()

	// Transport is how connections are served: TransportAuto (the
	// default) as below; TransportGoroutines runs each on its own
	// goroutine; TransportEpoll serves them all from event loops over
	// epoll (Linux), each wake-up answering every ready connection.
	// TransportAuto serves every connection from event loops, which do
	// not poll for one that keeps sending several requests at once (a
	// client multiplexing goroutines over it, or pipelining), and poll
	// for the others only as long as recent requests took to come. See
	// the README's "Transports".
	Transport string
	// Loops is the number of event loops of TransportEpoll and
	// TransportAuto; 0 means half of GOMAXPROCS, at least one.
	Loops int
	// LoopSpin is how long an event loop that has just served requests
	// polls for more before it sleeps: 0 means DefaultLoopSpin
	// (DefaultAutoLoopSpin for TransportAuto), a negative value not at all. Polling saves a sleeping thread's wake-up per
	// request to a client with one request in flight, and costs CPU the
	// clients on the same host may need. TransportEpoll polls this long;
	// TransportAuto at most this long, as long as recent requests took to
	// come (twice that), and not at all while they come later. Left 0
	// under TransportAuto, the limit follows the host's CPU pressure:
	// DefaultLoopSpin while no task waits for a CPU much,
	// DefaultAutoLoopSpin otherwise.
	LoopSpin time.Duration
	// quietSpin, set when TransportAuto's LoopSpin is the default, is
	// the limit while the host's CPUs are not contended (spinGovernor),
	// LoopSpin the limit while they are. (Tests set both.)
	quietSpin time.Duration

	// Limits, if set, holds the named limits (the config file's) that
	// requests may use instead of a spec; it may be swapped while the
	// server runs (a reload): each request decides under the Set it loads.
	Limits *config.Holder
	// Metrics, if set, counts decisions, requests, connections and syncs.
	Metrics *metrics.Recorder
	// Global, if set, is the Redis (or Sentinel, or Redis Cluster) where
	// the named limits of scope global are decided.
	Global *global.Options
	// RLSSocket and RLSAddr, if set, serve Envoy's rate limit service
	// (gRPC) on a Unix socket and on a TCP host:port (loopback unless
	// RLSAllowRemote), deciding the descriptors of Limits' rls domains.
	// RLSHeaders adds the RateLimit-* response headers to its answers.
	RLSSocket      string
	RLSAddr        string
	RLSAllowRemote bool
	RLSHeaders     bool

	// AllowUIDs and AllowGIDs, if either is set, restrict who may use the
	// Unix sockets: a peer whose uid is in AllowUIDs or whose gid is in
	// AllowGIDs (checked with SO_PEERCRED) is served; any other is refused
	// before it can send anything, and counted. They cannot be combined with
	// RESPAddr: a TCP peer has no credentials to check.
	AllowUIDs, AllowGIDs []uint32

	// Now is the server clock, Unix nanoseconds; nil means the wall clock,
	// made steady (see engine.Clock). It exists for tests, which need a clock
	// they control.
	Now func() int64
	// Ready, if set, is called once the socket accepts connections.
	Ready func()
}

func (c *Config) withDefaults() Config {
	d := *c
	def := func(v *time.Duration, x time.Duration) {
		if *v == 0 {
			*v = x
		}
	}
	if d.StatePath == "" {
		d.StatePath = DefaultStatePath
	}
	if d.SocketPath == "" {
		d.SocketPath = DefaultSocketPath
	}
	if d.RESPSocket == "" {
		// Beside the native socket: var/sluice-resp.sock for the defaults.
		d.RESPSocket = filepath.Join(filepath.Dir(d.SocketPath), filepath.Base(DefaultRESPSocket))
	}
	if d.Slots == 0 {
		d.Slots = DefaultSlots
	}
	if d.SlotSize == 0 {
		d.SlotSize = DefaultSlotSize
	}
	if d.SocketMode == 0 {
		d.SocketMode = DefaultSocketMode
	}
	if d.MaxConns == 0 {
		d.MaxConns = DefaultMaxConns
	}
	def(&d.SyncInterval, DefaultSyncInterval)
	def(&d.IdleTimeout, DefaultIdleTimeout)
	def(&d.FrameTimeout, DefaultFrameTimeout)
	def(&d.WriteTimeout, DefaultWriteTimeout)
	def(&d.DrainTimeout, DefaultDrainTimeout)
	def(&d.LockWait, DefaultLockWait)
	if d.Transport == "" {
		d.Transport = TransportAuto
	}
	if d.Transport == TransportAuto && !haveEpoll {
		d.Transport = TransportGoroutines
	}
	if d.Transport == TransportAuto {
		if d.LoopSpin == 0 {
			def(&d.quietSpin, DefaultLoopSpin)
		}
		def(&d.LoopSpin, DefaultAutoLoopSpin)
	}
	def(&d.LoopSpin, DefaultLoopSpin)
	if d.Loops == 0 {
		// Half the CPUs: a sidecar shares its host with its clients, and on
		// two CPUs one loop beside redis-benchmark reached the floor where
		// two loops stayed below it.
		d.Loops = max(1, runtime.GOMAXPROCS(0)/2)
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	return d
}

// ConfigError is an invalid Config field: its value and what is accepted.
// Its message names the field and the fields Want mentions as Go names; a
// command that sets them from flags (cmd/sluiced) says it in its flags'
// names instead, from Field and Want.
type ConfigError struct {
	Field string // the Config field
	Value any
	Want  string // what is accepted, for people; other fields are named as in Config
	Err   error  // the cause, when there is one more precise than ErrConfig
}

func (e *ConfigError) Error() string { return fmt.Sprintf("%s %v: %s", e.Field, e.Value, e.Want) }
func (e *ConfigError) Unwrap() error { return e.Err }

// ErrConfig is what every ConfigError matches with errors.Is.
var ErrConfig = errors.New("server: invalid configuration")

func (e *ConfigError) Is(target error) bool { return target == ErrConfig }

// maxTimeout bounds the durations of a Config.
const maxTimeout = 24 * time.Hour

// Validate checks every field of c without creating or opening anything,
// and returns the first problem as a *ConfigError. Zero fields are valid:
// they take the defaults.
func (c *Config) Validate() error { return c.ValidateGiven(nil) }

// ValidateGiven is Validate for a Config some of whose fields were set on
// purpose, those for which given (if not nil) is true, as sluiced's flags
// set them (each flag holds its default): such a duration or MaxConns of
// zero is refused rather than taken for the default. The fields whose zero
// is a documented choice (Slots, SlotSize, ArenaCells, Loops,
// MaxConnsPerUID: the default or no cap) stay valid at zero.
func (c *Config) ValidateGiven(given func(field string) bool) error {
	explicit := func(field string) bool { return given != nil && given(field) }
	bad := func(field string, v any, want string) *ConfigError {
		return &ConfigError{Field: field, Value: v, Want: want}
	}
	durations := []struct {
		field string
		v     time.Duration
		min   time.Duration
	}{
		{"SyncInterval", c.SyncInterval, time.Millisecond},
		{"IdleTimeout", c.IdleTimeout, time.Millisecond},
		{"FrameTimeout", c.FrameTimeout, time.Millisecond},
		{"WriteTimeout", c.WriteTimeout, time.Millisecond},
		{"DrainTimeout", c.DrainTimeout, time.Millisecond},
		{"LockWait", c.LockWait, time.Millisecond},
	}
	for _, d := range durations {
		if (d.v != 0 || explicit(d.field)) && (d.v < d.min || d.v > maxTimeout) {
			return bad(d.field, d.v, fmt.Sprintf("want a duration from %v to %v", d.min, maxTimeout))
		}
	}
	switch {
	case c.Slots > engine.MaxSlots:
		return bad("Slots", c.Slots, fmt.Sprintf("want a slot count from 1 to %d", uint64(engine.MaxSlots)))
	case c.SlotSize != 0 && !engine.ValidSlotSize(c.SlotSize):
		return bad("SlotSize", c.SlotSize, "want 64, 128 or 256")
	case c.ArenaCells > engine.MaxArenaCells:
		return bad("ArenaCells", c.ArenaCells, fmt.Sprintf("want a cell count from 1 to %d", uint64(engine.MaxArenaCells)))
	case c.SocketMode&^fs.ModePerm != 0:
		return bad("SocketMode", fmt.Sprintf("%#o", c.SocketMode), "want octal permissions such as 0660")
	case c.MaxConns < 0 || c.MaxConns > 1_000_000 || (explicit("MaxConns") && c.MaxConns == 0):
		return bad("MaxConns", c.MaxConns, "want a number of connections from 1 to 1000000")
	case c.Transport != "" && c.Transport != TransportAuto && c.Transport != TransportGoroutines && (c.Transport != TransportEpoll || !haveEpoll):
		want := "want auto, goroutines or epoll"
		if !haveEpoll {
			want = "want auto or goroutines (epoll needs Linux)"
		}
		return bad("Transport", c.Transport, want)
	case c.LoopSpin > time.Millisecond:
		return bad("LoopSpin", c.LoopSpin, "want a duration up to 1ms (0 to sleep at once)")
	case c.Loops < 0 || c.Loops > 1024:
		return bad("Loops", c.Loops, "want 0 (half the CPUs) or a number of event loops up to 1024")
	case c.MaxConnsPerUID < 0 || c.MaxConnsPerUID > 1_000_000:
		return bad("MaxConnsPerUID", c.MaxConnsPerUID, "want 0 (no cap) or a number of connections up to 1000000")
	}
	for _, p := range []struct{ field, path string }{
		{"SocketPath", c.SocketPath}, {"RESPSocket", c.RESPSocket}, {"RLSSocket", c.RLSSocket},
	} {
		if len(p.path) > sockfile.MaxPath {
			return &ConfigError{Field: p.field, Value: p.path, Err: ErrSocketPath,
				Want: fmt.Sprintf("a Unix socket path is at most %d bytes; this one is %d", sockfile.MaxPath, len(p.path))}
		}
	}
	for _, a := range []struct {
		field, addr, example, allow string
		allowed                     bool
	}{
		{"RESPAddr", c.RESPAddr, "127.0.0.1:9049", "RESPAllowRemote", c.RESPAllowRemote},
		{"RLSAddr", c.RLSAddr, "127.0.0.1:8081", "RLSAllowRemote", c.RLSAllowRemote},
	} {
		if a.addr == "" {
			continue
		}
		if err := checkLoopback(a.addr, a.allowed); err != nil {
			e := bad(a.field, a.addr, fmt.Sprintf("want a loopback host:port such as %s (or %s)", a.example, a.allow))
			e.Err = err
			return e
		}
		if len(c.AllowUIDs) > 0 || len(c.AllowGIDs) > 0 {
			return bad(a.field, a.addr, "cannot be combined with AllowUIDs or AllowGIDs: a TCP peer has no credentials to check")
		}
	}
	return nil
}
