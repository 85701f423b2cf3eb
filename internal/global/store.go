package global

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/bucket"
)

// Defaults of Options.
const (
	DefaultTimeout  = 50 * time.Millisecond
	DefaultMaxBatch = 256
	DefaultPrefix   = "sluice:"
)

// Options configure a Store. The zero value of every field but Addrs is a
// sensible default.
type Options struct {
	// Addrs: one address is a single Redis, or a Sentinel when MasterName
	// is set (then every address is a Sentinel's); several are Redis
	// Cluster seeds. An address is host:port, or the path of a Unix socket
	// (starting with "/").
	Addrs []string
	// Cluster makes one address a Cluster seed.
	Cluster bool
	// MasterName is the Sentinel master's name (Sentinel's
	// "sentinel monitor NAME ..."): go-redis asks the Sentinels at Addrs
	// for the current master and follows its failovers.
	MasterName string
	// Username and Password authenticate to Redis (AUTH, or ACL users with
	// a Username); SentinelUsername and SentinelPassword to the Sentinels.
	Username, Password                 string
	SentinelUsername, SentinelPassword string
	// DB selects a database on a single Redis or Sentinel master; a
	// Cluster has only database 0.
	DB int
	// TLS, if not nil, connects with TLS (as rediss:// URLs do): set
	// ServerName, RootCAs, and Certificates for client certificates.
	TLS *tls.Config
	// Prefix begins every key (default "sluice:").
	Prefix string
	// Timeout bounds the wait for a pipeline's replies, from when it is
	// sent (default 50 ms): the wait in the shard's queue for the pipeline
	// in flight does not count against it, only against the caller's
	// context. A request not decided in time returns ErrUnavailable.
	Timeout time.Duration
	// Misses is the pipelines in a row without a reply within Timeout
	// after which a shard is down (default 3): one slow call is not an
	// outage. A connection error or a reply saying Redis cannot decide
	// (CLUSTERDOWN, LOADING, ...) makes it down at once.
	Misses int
	// ProbeMax is the longest time between two probes of a shard that is
	// down (default 100 ms); the first comes 5 ms after the outage begins,
	// each next one twice as late.
	ProbeMax time.Duration
	// Logger receives the shards' transitions (default slog.Default()).
	Logger *slog.Logger
	// MaxBatch is the most requests one pipeline carries (default 256).
	MaxBatch int
	// PoolSize is go-redis's connections per node (default: its own).
	PoolSize int
	// WaitReplicas, if > 0, ends every pipeline with WAIT WaitReplicas:
	// its decisions are returned only once that many replicas hold them,
	// and as ErrUnavailable if they do not within the timeout. Redis
	// replicates asynchronously: without it, a master that dies can take
	// its last milliseconds of decisions with it, and its promoted replica
	// admits them again. With 1 on a Cluster of one replica per master, a
	// failover never admits beyond the limit. A call answered MOVED or ASK
	// then fails (ErrUnavailable) rather than being sent again without
	// WAIT; the next calls go to the slot's new master.
	WaitReplicas int
}

// Store decides requests on global buckets in Redis. Concurrent requests
// whose keys live on the same shard (the one Redis, or one Cluster master)
// travel in one pipeline: while a pipeline is in flight, new requests for
// its shard queue up, and the next pipeline carries them all, each decided
// on its own by the script, in the order they queued.
//
// # Concurrency
//
// A Store is safe for simultaneous use by multiple goroutines.
type Store struct {
	rdb       redis.UniversalClient
	cluster   *redis.ClusterClient // rdb, if it is a Cluster client
	prefix    string
	timeout   time.Duration
	maxBatch  int
	wait      int
	maxMisses int
	probeMax  time.Duration
	log       *slog.Logger

	// onTransition, if set (before the first request), is called after
	// each change of a shard's health.
	onTransition func()

	mu      sync.Mutex
	shards  map[string]*shard // by master address; "" for a non-Cluster client
	closed  bool
	closing chan struct{} // closed by Close: probes stop

	reloading atomic.Bool // a Cluster topology reload is under way

	// limits holds the limits requested so far, prepared (prepare): at
	// most maxPrepared, forgotten all at once when full.
	limitsMu sync.RWMutex
	limits   map[limitKey]*prepared
	// scripts is set once Redis refused the functions (no FCALL before
	// Redis 7.0, or an ACL without it): calls go as scripts (EVALSHA) from
	// then on.
	scripts atomic.Bool
	stats   counters
}

// New returns a Store for the Redis deployment o describes. It does not
// connect: the first request does, and Ping checks reachability.
func New(o Options) (*Store, error) {
	if len(o.Addrs) == 0 {
		return nil, errors.New("no Redis address given")
	}
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	uo := &redis.UniversalOptions{
		Addrs:            o.Addrs,
		IsClusterMode:    o.Cluster,
		MasterName:       o.MasterName,
		Username:         o.Username,
		Password:         o.Password,
		SentinelUsername: o.SentinelUsername,
		SentinelPassword: o.SentinelPassword,
		DB:               o.DB,
		TLSConfig:        o.TLS,
		PoolSize:         o.PoolSize,
		// A decision is never retried by the client: a retried script may
		// have run once already. The Store's caller decides what to do.
		MaxRetries: -1,
		// Nor is a refused connection dialled again: Redis is down, and
		// the shard's probes find out when it is back.
		DialerRetries:         1,
		DialTimeout:           timeout,
		ReadTimeout:           timeout,
		WriteTimeout:          timeout,
		PoolTimeout:           timeout,
		ContextTimeoutEnabled: true,
		DisableIdentity:       true,
		Protocol:              2,
	}
	for _, a := range o.Addrs {
		if strings.HasPrefix(a, "/") {
			uo.Dialer = dialer(o.TLS)
		}
	}
	s := &Store{
		rdb:       redis.NewUniversalClient(uo),
		prefix:    o.Prefix,
		timeout:   timeout,
		maxBatch:  o.MaxBatch,
		wait:      o.WaitReplicas,
		maxMisses: o.Misses,
		probeMax:  o.ProbeMax,
		log:       o.Logger,
		shards:    make(map[string]*shard),
		limits:    make(map[limitKey]*prepared),
		closing:   make(chan struct{}),
	}
	if s.prefix == "" {
		s.prefix = DefaultPrefix
	}
	if s.maxBatch <= 0 {
		s.maxBatch = DefaultMaxBatch
	}
	if s.maxMisses <= 0 {
		s.maxMisses = DefaultMisses
	}
	if s.probeMax <= 0 {
		s.probeMax = DefaultProbeMax
	}
	s.probeMax = max(s.probeMax, minProbe)
	if s.log == nil {
		s.log = slog.Default()
	}
	s.cluster, _ = s.rdb.(*redis.ClusterClient)
	return s, nil
}

// dialer returns a dial function that connects to a Unix socket for an
// address that is a path, and over TCP otherwise, with TLS if cfg is not
// nil (go-redis's own dialer, used when no address is a path, does the
// same for TCP).
func dialer(cfg *tls.Config) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if strings.HasPrefix(addr, "/") {
			network = "unix"
		}
		if cfg == nil {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}
		c := cfg.Clone()
		if c.ServerName == "" && network != "unix" {
			c.ServerName, _, _ = net.SplitHostPort(addr)
		}
		d := tls.Dialer{Config: c}
		return d.DialContext(ctx, network, addr)
	}
}

// Client returns the underlying go-redis client.
func (s *Store) Client() redis.UniversalClient { return s.rdb }

// Prefix returns the prefix of the Store's keys.
func (s *Store) Prefix() string { return s.prefix }

// Ping checks that Redis answers within the Store's timeout (every master,
// for a Cluster).
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var err error
	if s.cluster != nil {
		err = s.cluster.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return c.Ping(ctx).Err()
		})
	} else {
		err = s.rdb.Ping(ctx).Err()
	}
	return classify(err)
}

// Close stops the Store: requests queued or made later return ErrClosed,
// and the connections are closed.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.closing)
	s.mu.Unlock()
	return s.rdb.Close()
}

// call is one script call waiting in a shard's queue.
type call struct {
	ctx  context.Context
	alg  *algorithm // its script and function
	key  [1]string  // KEYS
	args []any
	base int // the args of an acquire: the op, the cost, the parameters
	// params, if not nil, are the limit's parameters, args[2:2+len(params)]
	// (its prepared's, shared by the requests of the limit): a batch sends
	// them once for the calls in a row that share them.
	params []any
	v      any // the reply
	err    error
	done   chan struct{}
	probe  bool // sent by probeLoop while the shard is down
}

// shard queues the requests for one Redis master.
type shard struct {
	addr string
	// c sends the shard's pipelines: the master's own client in a Cluster
	// (so WAIT reaches it; a call answered MOVED or ASK is sent again
	// through the Cluster client, which follows the redirect, and the slot
	// map is reread), the Store's client otherwise.
	c       interface{ Pipeline() redis.Pipeliner }
	mu      sync.Mutex
	pending []*call
	busy    bool // a goroutine is sending this shard's pipelines

	// Health (health.go).
	down      atomic.Bool
	since     atomic.Int64 // Unix ns of the last transition
	misses    atomic.Int32 // pipelines in a row without a reply in time
	nextProbe atomic.Int64 // Unix ns of the next probe while down
	downErr   atomic.Pointer[error]
	probe     *call // the probe's request (a template), under mu
}

// Decide decides r in Redis, batched with the concurrent requests for the
// same shard. It returns ErrUnavailable if Redis did not answer before
// ctx's deadline, or within the Store's timeout of the request's pipeline
// being sent, and at once if r's shard is down (see Options.Misses).
func (s *Store) Decide(ctx context.Context, r Request) (bucket.Decision, error) {
	var d bucket.Decision
	p := s.prepare(r.Limit, r.Flags)
	if p.err != nil {
		return d, p.err
	}
	if err := r.check(); err != nil {
		return d, err
	}
	key, args := r.args(s.prefix, p, 0)
	v, err := s.do(ctx, &call{alg: p.g, key: [1]string{key}, args: args, base: len(args), params: p.params})
	if err == nil {
		err = parseReply(v, &r.Limit, &d)
	}
	return d, err
}

// limitKey names a prepared limit: the limit and the flags its script
// reads.
type limitKey struct {
	l bucket.Limit
	f bucket.Flags
}

// maxPrepared bounds the prepared limits a Store keeps: a configuration's
// limits, and then some.
const maxPrepared = 4096

// prepare returns l prepared for requests with flags f (checked, its
// parameters boxed), from the limits already requested if it is one: the
// same limits come again and again.
func (s *Store) prepare(l bucket.Limit, f bucket.Flags) *prepared {
	k := limitKey{l, f & (bucket.Strict | bucket.Smyte)}
	s.limitsMu.RLock()
	p := s.limits[k]
	s.limitsMu.RUnlock()
	if p != nil {
		return p
	}
	lc := l // on the heap only here
	p = prepare(&lc, k.f)
	s.limitsMu.Lock()
	if len(s.limits) >= maxPrepared {
		clear(s.limits)
	}
	s.limits[k] = p
	s.limitsMu.Unlock()
	return p
}

// do runs c (its script, key and args) in the next pipeline of the key's
// shard and returns its reply: within the Store's timeout of the
// pipeline's sending, or ctx's deadline if earlier; at once if the shard
// is down.
func (s *Store) do(ctx context.Context, c *call) (any, error) {
	if ctx.Err() != nil {
		s.stats.errors.Add(1)
		s.stats.timeouts.Add(1)
		return nil, errDeadline
	}
	sh, err := s.shardFor(ctx, c.key[0])
	if err != nil {
		s.stats.errors.Add(1)
		return nil, err
	}
	if sh.down.Load() {
		s.stats.requests.Add(1)
		s.stats.errors.Add(1)
		s.stats.shed.Add(1)
		return nil, *sh.downErr.Load()
	}
	c.ctx, c.done = ctx, make(chan struct{})
	s.enqueue(sh, c)
	s.stats.requests.Add(1) // once queued: a request counted is in its shard's queue
	select {
	case <-c.done:
		if c.err != nil {
			s.stats.errors.Add(1)
		}
		return c.v, c.err
	case <-ctx.Done():
		s.stats.errors.Add(1)
		s.stats.timeouts.Add(1)
		return nil, errDeadline
	}
}

// errDeadline is the error of a request whose caller's deadline passed
// before Redis answered it.
var errDeadline = fmt.Errorf("%w: no reply before the request's deadline", ErrUnavailable)

// enqueue queues c on sh, starting the shard's sender if it is idle.
func (s *Store) enqueue(sh *shard, c *call) {
	sh.mu.Lock()
	sh.pending = append(sh.pending, c)
	start := !sh.busy
	sh.busy = true
	sh.mu.Unlock()
	if start {
		go s.run(sh)
	}
}

// shardFor returns the queue of the master serving key.
func (s *Store) shardFor(ctx context.Context, key string) (*shard, error) {
	addr := ""
	var c interface{ Pipeline() redis.Pipeliner } = s.rdb
	if s.cluster != nil {
		m, err := s.cluster.MasterForKey(ctx, key)
		if err != nil {
			s.reload()
			return nil, classify(err)
		}
		addr, c = m.Options().Addr, m
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	sh := s.shards[addr]
	if sh == nil {
		sh = &shard{addr: addr, c: c}
		s.shards[addr] = sh
	}
	return sh, nil
}

// run sends sh's queued requests, a pipeline at a time, until the queue is
// empty.
func (s *Store) run(sh *shard) {
	for {
		sh.mu.Lock()
		n := min(len(sh.pending), s.maxBatch)
		if n == 0 {
			sh.busy = false
			sh.pending = sh.pending[:0]
			sh.mu.Unlock()
			return
		}
		batch := make([]*call, n)
		copy(batch, sh.pending)
		rest := copy(sh.pending, sh.pending[n:])
		clear(sh.pending[rest:])
		sh.pending = sh.pending[:rest]
		sh.mu.Unlock()
		s.send(sh, batch)
	}
}

// send runs one pipeline of calls and delivers each reply. Calls whose
// caller has given up are not sent.
func (s *Store) send(sh *shard, batch []*call) {
	live := batch[:0]
	for _, c := range batch {
		if c.ctx.Err() != nil {
			c.err = errDeadline
			close(c.done)
			continue
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return
	}
	// The timeout counts from now, whatever the callers' deadlines: it
	// tells a slow Redis from a dead one.
	sentAt := time.Now()
	ctx, cancel := context.WithDeadline(context.Background(), sentAt.Add(s.timeout))
	defer cancel()
	how := asFunction
	if s.scripts.Load() {
		how = asScript
	}
	cmds, werr := s.pipeline(ctx, sh, live, how)
	// A Redis without the library (restarted without persistence, or
	// new) gets it in a second pipeline, with the calls that failed; one
	// that refuses functions (before Redis 7.0, or an ACL without them)
	// gets the calls as scripts from then on, and one without a script
	// (restarted, a promoted replica: scripts are not replicated) the
	// script's text (EVAL).
	for range 2 {
		var again []*call
		var againAt []int
		for i, cmd := range cmds {
			err := cmd.Err()
			if refusesFunctions(err) {
				s.useScripts(err)
			} else if !isNoFunction(err) && !isNoScript(err) {
				continue
			}
			again = append(again, live[i])
			againAt = append(againAt, i)
		}
		if len(again) == 0 {
			break
		}
		how := asLoad
		if s.scripts.Load() {
			how = asScriptText
		}
		s.stats.scriptLoads.Add(1)
		var again2 []*redis.Cmd
		again2, werr = s.pipeline(ctx, sh, again, how)
		for j, cmd := range again2 {
			cmds[againAt[j]] = cmd
		}
	}
	unavailable := false
	o, cause := timedOut, error(nil)
	for i, c := range live {
		v, err := cmds[i].Result()
		if err == nil && werr != nil {
			err = werr
		}
		if isRedirect(err) {
			o = answered // this master answered: the slot is another's now
			if s.cluster != nil && s.wait == 0 {
				// The slot moved (resharding, failover): Redis did not
				// run the script. The Cluster client follows MOVED and ASK.
				s.stats.redirects.Add(1)
				s.stats.commands.Add(1)
				unavailable = true // reread the slot map
				v, err = c.alg.script.Run(ctx, s.cluster, c.key[:], c.args...).Result()
			}
		} else {
			switch outcomeOf(err) {
			case answered:
				o = answered
			case refused:
				if o != answered {
					o, cause = refused, err
				}
			case timedOut:
				if cause == nil {
					cause = err
				}
			}
		}
		if err != nil {
			c.err = classify(err)
			unavailable = unavailable || errors.Is(c.err, ErrUnavailable)
		}
		c.v = v
	}
	// The shard's health first, so that a caller woken below sees it.
	s.observe(sh, sentAt.UnixNano(), o, cause, live[0])
	for _, c := range live {
		close(c.done)
	}
	if unavailable {
		s.reload()
	}
}

// sendAs is how a pipeline sends its calls.
type sendAs uint8

const (
	asFunction   sendAs = iota // FCALL of the algorithm's function
	asLoad                     // FUNCTION LOAD of the library first, then FCALL
	asScript                   // EVALSHA of the algorithm's script
	asScriptText               // EVAL of its text, which loads it
)

// pipeline sends calls in one pipeline, as how says, and returns their
// commands in order, and an error if the replicas did not acknowledge
// them (WaitReplicas).
func (s *Store) pipeline(ctx context.Context, sh *shard, calls []*call, how sendAs) ([]*redis.Cmd, error) {
	pipe := sh.c.Pipeline()
	var load *redis.StringCmd
	if how == asLoad {
		load = redis.NewStringCmd(ctx, "function", "load", library)
		pipe.Process(ctx, load)
		s.stats.commands.Add(1)
	}
	cmds := make([]*redis.Cmd, len(calls))
	var batch *redis.Cmd
	if (how == asFunction || how == asLoad) && len(calls) > 1 {
		batch = pipe.FCall(ctx, batchFunction, calls[0].key[:], batchArgs(calls)...)
	} else {
		for i, c := range calls {
			switch how {
			case asFunction, asLoad:
				cmds[i] = pipe.FCall(ctx, c.alg.function, c.key[:], c.args...)
			case asScript:
				cmds[i] = c.alg.script.EvalSha(ctx, pipe, c.key[:], c.args...)
			default:
				cmds[i] = c.alg.script.Eval(ctx, pipe, c.key[:], c.args...)
			}
		}
	}
	var wait *redis.IntCmd
	if s.wait > 0 {
		// Leave a quarter of the time for the reply to WAIT.
		ms := max(time.Until(deadline(ctx)).Milliseconds()*3/4, 1)
		wait = redis.NewIntCmd(ctx, "wait", s.wait, ms)
		pipe.Process(ctx, wait)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		// Each command carries its own error, except when the pipeline
		// never ran (a connection that failed to authenticate).
		for _, c := range append(cmds, batch) {
			if c != nil && c.Err() == nil && c.Val() == nil {
				c.SetErr(err)
			}
		}
	}
	if batch != nil {
		splitBatch(ctx, batch, cmds)
	}
	if load != nil {
		// Loaded here or by another process: either way the calls run. A
		// refusal leaves them failing as before: scripts from then on. Any
		// other failure (a timeout, a lost connection) is not a refusal:
		// the next call finds the library missing and loads it again.
		if err := load.Err(); refusesFunctions(err) {
			s.useScripts(err)
		}
	}
	s.stats.roundTrips.Add(1)
	if batch != nil {
		s.stats.commands.Add(1)
	} else {
		s.stats.commands.Add(uint64(len(calls)))
	}
	s.stats.batch(len(calls))
	if wait == nil {
		return cmds, nil
	}
	s.stats.commands.Add(1)
	if n, err := wait.Result(); err != nil || n < int64(s.wait) {
		s.stats.unreplicated.Add(1)
		return cmds, fmt.Errorf("%w: %d of %d replicas acknowledged the decisions in time (%v)", ErrUnavailable, n, s.wait, err)
	}
	return cmds, nil
}

// batchArgs returns the ARGV of one call of the library's batch function
// that runs calls (lua/batch.lua): for each, its algorithm's place in the
// library, its key, the number of its arguments and its arguments, without
// its limit's parameters, which go before it, once for the calls in a row
// that share them (a record 0, their number, the parameters).
func batchArgs(calls []*call) []any {
	n := 0
	for _, c := range calls {
		n += 3 + len(c.args)
	}
	args := make([]any, 0, n+3)
	var shared []any
	for i, c := range calls {
		np := len(c.params)
		if i == 0 || !sameParams(c.params, shared) {
			shared = c.params
			args = append(append(args, 0, np), shared...)
		}
		args = append(args, c.alg.index, c.key[0], len(c.args)-np)
		if np == 0 {
			args = append(args, c.args...)
		} else {
			args = append(append(args, c.args[:2]...), c.args[2+np:]...)
		}
	}
	return args
}

// sameParams reports whether a and b are the same parameters: the same
// slice, a prepared limit's.
func sameParams(a, b []any) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// splitBatch gives each of cmds, the commands of the calls batch ran, its
// own reply from batch's: the reply at its place, or its error. The
// batch's own error (the pipeline failed, Redis has no such function,
// MOVED for the first key's slot) is each call's.
func splitBatch(ctx context.Context, batch *redis.Cmd, cmds []*redis.Cmd) {
	v, err := batch.Result()
	replies, ok := v.([]any)
	if err == nil && (!ok || len(replies) != len(cmds)) {
		err = fmt.Errorf("%w: unexpected reply to a batch of %d: %v", ErrScript, len(cmds), v)
	}
	for i := range cmds {
		cmds[i] = redis.NewCmd(ctx)
		switch {
		case err != nil:
			cmds[i].SetErr(err)
		default:
			if e, ok := replies[i].(error); ok {
				cmds[i].SetErr(e)
			} else {
				cmds[i].SetVal(replies[i])
			}
		}
	}
}

// deadline returns ctx's deadline (every context here has one).
func deadline(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// reload makes a Cluster client reread the slot map after an error, at
// most one reload at a time: a refused or timed-out connection to a dead
// master does not make go-redis look for its promoted replica by itself.
func (s *Store) reload() {
	if s.cluster == nil || !s.reloading.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer s.reloading.Store(false)
		s.cluster.ReloadState(context.Background())
		time.Sleep(50 * time.Millisecond) // one reload per 50 ms at most
	}()
}

// isRedirect reports whether err is a Cluster's MOVED or ASK, or a batch's
// refusal of a key whose slot its master does not serve (lua/batch.lua).
func isRedirect(err error) bool {
	return err != nil && (redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK") || isNonLocal(err))
}

// isNonLocal reports whether err is a script's refusal of a key that
// another master serves, or that is migrating away.
func isNonLocal(err error) bool {
	return err != nil && strings.Contains(err.Error(), "non local key")
}

// useScripts makes the Store send its calls as scripts (EVAL) from now on:
// Redis refused its functions with err.
func (s *Store) useScripts(err error) {
	if s.scripts.CompareAndSwap(false, true) {
		s.log.Warn("Redis refused the global limits' functions: they run as scripts, which cost Redis more", "error", err.Error())
	}
}

// isNoFunction reports whether err says Redis has no such function (it
// does not have the library).
func isNoFunction(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "ERR Function not found")
}

// refusesFunctions reports whether err says Redis will not run a function:
// it has no FCALL (before Redis 7.0), or the ACL does not allow it.
func refusesFunctions(err error) bool {
	if err == nil {
		return false
	}
	msg := strings.ToLower(err.Error())
	return (strings.HasPrefix(msg, "err unknown command") || strings.HasPrefix(msg, "noperm")) &&
		(strings.Contains(msg, "fcall") || strings.Contains(msg, "function"))
}

// isNoScript reports whether err is Redis's NOSCRIPT.
func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}
