package metrics

import (
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/bucket"
)

// SpecLimit is the limit label of decisions under an inline spec rather
// than a named limit.
const SpecLimit = "spec"

// OtherLimit is the limit label of decisions under names beyond the first
// MaxLimits a Recorder has seen; it bounds the series a misbehaving feeder
// could create.
const OtherLimit = "other"

// MaxLimits is the number of distinct limit labels a Recorder keeps.
const MaxLimits = 10_000

// Outcome is the result of a decision, the outcome label.
type Outcome uint8

const (
	Allowed   Outcome = iota // the request was allowed
	Denied                   // the request was denied (a shadow limit's denial counts here too, and allows)
	TableFull                // no slot for a new bucket: the request failed
	Failed                   // any other error (a bad key, a bad cost)
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"allowed", "denied", "table_full", "error"}

func (o Outcome) String() string { return outcomeNames[o] }

// Protocol is what a request came in over, the protocol label.
type Protocol uint8

const (
	Native Protocol = iota // the binary protocol of proto
	RESP                   // the Redis protocol
	numProtocols
)

var protocolNames = [numProtocols]string{"native", "resp"}

func (p Protocol) String() string { return protocolNames[p] }

// numAlgorithms bounds bucket.Algorithm values, which are stable and small.
const numAlgorithms = 16

// Limit holds the counters of one limit label. Get it once with
// Recorder.Limit and keep it (a named limit's compiled form can hold it):
// its methods then cost an atomic add each.
type Limit struct {
	name      string
	decisions [numAlgorithms][numOutcomes]atomic.Uint64
	shadow    atomic.Uint64 // denials a shadow limit turned into allows
	over      overrides     // its overrides' counters
}

// Decision counts a decision of algorithm alg with outcome o.
func (l *Limit) Decision(alg bucket.Algorithm, o Outcome) {
	l.decisions[alg%numAlgorithms][o%numOutcomes].Add(1)
}

// ShadowDenied counts a denial that the limit, being in shadow mode,
// turned into an allow. Count the decision itself as Denied too.
func (l *Limit) ShadowDenied() { l.shadow.Add(1) }

// TableStats is a snapshot of the table, read at each scrape (the fields
// marked STATS are read by STATS and INFO only).
type TableStats struct {
	Slots        uint64 // slots in the table
	SlotSize     uint64 // bytes of a slot (STATS)
	FileSize     uint64 // bytes of the state file (STATS)
	UsedSlots    uint64 // slots that ever held a bucket
	LiveBuckets  uint64 // buckets not yet back to their new state
	TableFull    uint64 // bucket creations refused for want of a slot (counter)
	Reclaimed    uint64 // slots taken over from another key's fresh bucket (counter)
	Torn         uint64 // slots found torn and repaired (counter)
	Inserts      uint64 // buckets created (counter; STATS)
	LockedOnOpen uint64 // slots whose lock's holder was gone (counter; STATS)
	Syncs        uint64 // syncs of the state file since it was made (counter; STATS)
	SyncErrors   uint64 // of those, failed (counter; STATS)
	ArenaCells   uint64 // cells of the arena
	ArenaUsed    uint64 // cells held by blocks
	ArenaFull    uint64 // blocks refused for want of cells (counter)
}

// Recorder holds the sidecar's counters. Make it with New; the zero value
// is not usable.
type Recorder struct {
	limits    cowMap[Limit] // by label
	maxLimits int           // MaxLimits; tests lower it

	decisionDur [numAlgorithms]histogram // by algorithm
	requestDur  [numProtocols]histogram  // by protocol
	protoErrors [numProtocols]atomic.Uint64
	probe       histogram
	syncDur     histogram
	syncErrors  atomic.Uint64
	conns       atomic.Int64
	peersDenied atomic.Uint64
	reloads     [2]atomic.Uint64 // ok, error
	kept        atomic.Int64     // limits the config file no longer defines, kept in force

	table  atomic.Pointer[func() TableStats]
	global atomic.Pointer[func() GlobalStats]
}

// New returns a Recorder with no counts.
func New() *Recorder {
	r := &Recorder{maxLimits: MaxLimits}
	for i := range r.decisionDur {
		r.decisionDur[i].init(latencyBounds)
	}
	for i := range r.requestDur {
		r.requestDur[i].init(latencyBounds)
	}
	r.probe.init(probeBounds)
	r.syncDur.init(syncBounds)
	return r
}

// Limit returns the counters of the limit label name (a config name, or
// SpecLimit), creating them on first use.
func (r *Recorder) Limit(name string) *Limit {
	return r.limits.get(name, OtherLimit, r.maxLimits, func(label string) *Limit { return &Limit{name: label} })
}

// Decision counts a decision under the limit label limit, of algorithm
// alg, with outcome o, that took d in the engine (lock, algorithm, commit).
// It costs a map lookup more than Limit.Decision.
func (r *Recorder) Decision(limit string, alg bucket.Algorithm, o Outcome, d time.Duration) {
	r.Limit(limit).Decision(alg, o)
	r.DecisionDuration(alg, d)
}

// DecisionDuration records the time one decision of algorithm alg took.
func (r *Recorder) DecisionDuration(alg bucket.Algorithm, d time.Duration) {
	r.decisionDur[alg%numAlgorithms].observe(int64(d))
}

// Request records a request over protocol p that took d from its frame's
// arrival to its reply's encoding.
func (r *Recorder) Request(p Protocol, d time.Duration) {
	r.requestDur[p%numProtocols].observe(int64(d))
}

// ProtocolError counts a malformed frame or command over protocol p.
func (r *Recorder) ProtocolError(p Protocol) { r.protoErrors[p%numProtocols].Add(1) }

// Probe records the length of one probe sequence, in slots: 0 when the
// bucket was in its home slot.
func (r *Recorder) Probe(slots int) { r.probe.observe(int64(slots)) }

// Sync records one sync of the state file that took d and failed if err is
// not nil.
func (r *Recorder) Sync(d time.Duration, err error) {
	r.syncDur.observe(int64(d))
	if err != nil {
		r.syncErrors.Add(1)
	}
}

// ConnOpened and ConnClosed track the connections being served.
func (r *Recorder) ConnOpened() { r.conns.Add(1) }
func (r *Recorder) ConnClosed() { r.conns.Add(-1) }

// PeerDenied counts a connection refused because of its peer's uid or gid.
func (r *Recorder) PeerDenied() { r.peersDenied.Add(1) }

// ConfigReload counts a config reload: ok if the new file is in force.
func (r *Recorder) ConfigReload(ok bool) {
	if ok {
		r.reloads[0].Add(1)
	} else {
		r.reloads[1].Add(1)
	}
}

// ConfigKept sets the number of limits kept in force that the config file
// no longer defines (config.Set.Kept).
func (r *Recorder) ConfigKept(n int) { r.kept.Store(int64(n)) }

// SetTable sets the function a scrape calls for the table's gauges and
// counters. It must be safe to call concurrently with decisions; until it
// is set, the table metrics are not exported.
func (r *Recorder) SetTable(f func() TableStats) { r.table.Store(&f) }
