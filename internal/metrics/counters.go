package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Snapshot holds the values the counter table reads: the table's, the
// server's and, with global limits, theirs, at one moment.
type Snapshot struct {
	Table  TableStats
	Server ServerStats
	Global *GlobalStats // nil without global limits
	// Overrides are the overrides' counts, nil without metrics (the
	// Recorder counts them).
	Overrides *Overrides
}

// ServerStats are the server's counters of connections and requests.
type ServerStats struct {
	Conns, ConnsTotal, ConnsRejected, PeersDenied int64
	Frames, Ops, Malformed, Timeouts              int64
	Allowed, Denied, Errors, ShadowDenied         int64
	LockWaits, Handoffs                           int64 // lock waits past the first spin; of those, event loops handed over
	Multiplexed                                   int64 // connections an event loop found sending several requests at once, and does not poll for (TransportAuto)
	Polls                                         int64 // waits an event loop began by polling for requests (before it slept, if nothing came)
	LoopSpinLimit                                 int64 // the most an event loop polls now, in nanoseconds (0 without loops)
	Buffered                                      int64 // bytes of connection buffers
}

// Front is a set of the reports a counter appears in.
type Front uint8

const (
	InStats Front = 1 << iota // the native protocol's STATS
	InInfo                    // the Redis protocol's INFO (in Counter.Section)
	InProm                    // the Prometheus exposition
)

// source is the part of a Snapshot a counter reads; a report leaves out
// the counters of a part it does not have.
type source uint8

const (
	fromTable     source = iota // present once the table is known
	fromServer                  // a scrape reads the Recorder's own connections and peers denied
	fromGlobal                  // present with global limits
	fromOverrides               // present with metrics
)

// Counter is one row of Counters.
type Counter struct {
	Name    string // STATS field, and INFO field unless Info says otherwise
	In      Front
	Section string // INFO section (lower case)
	Info    string // INFO field when it is not Name (Redis's names)
	Prom    string // Prometheus metric, "sluice_"+Name+"_total" (a gauge: without _total) if empty
	Label   [2]string
	Gauge   bool
	Help    string // Prometheus help; rows of one metric spell it once
	// Labels, for a row of series: the labels of its Prometheus series,
	// which series gives, value being their sum (what STATS and INFO show).
	Labels []string
	series func(s *Snapshot, emit func(v uint64, labels ...string))
	src    source
	value  func(*Snapshot) uint64
}

// tableRow, serverRow and globalRow make a row of c reading f of its part
// of a Snapshot.
func tableRow(c Counter, f func(t *TableStats) uint64) Counter {
	c.src, c.value = fromTable, func(s *Snapshot) uint64 { return f(&s.Table) }
	return c
}

func serverRow(c Counter, f func(t *ServerStats) int64) Counter {
	c.src, c.value = fromServer, func(s *Snapshot) uint64 { return uint64(f(&s.Server)) }
	return c
}

func globalRow(c Counter, f func(t *GlobalStats) uint64) Counter {
	c.src, c.value = fromGlobal, func(s *Snapshot) uint64 { return f(s.Global) }
	return c
}

// overrideRow makes a row of c reading the overrides' counts: series
// gives each series, value their sum.
func overrideRow(c Counter, series func(o *Overrides, emit func(v uint64, labels ...string))) Counter {
	c.src = fromOverrides
	c.series = func(s *Snapshot, emit func(v uint64, labels ...string)) { series(s.Overrides, emit) }
	c.value = func(s *Snapshot) uint64 {
		var sum uint64
		series(s.Overrides, func(v uint64, _ ...string) { sum += v })
		return sum
	}
	return c
}

// Counters is every counter the sidecar reports: STATS lists the rows In
// it in this order, INFO each section's rows in this order, a scrape every
// row In the Prometheus exposition. Adding a counter is adding a row (and
// its value to the Snapshot's source, if it is new); docs/metrics.md
// describes it for people. A new counter takes one name in every report:
// Name, with Prom left to its default.
//
// The Recorder's own series (decisions, latencies, probe lengths, syncs
// since start, config reloads) are not rows: collector.go exports them.
var Counters = []Counter{
	tableRow(Counter{Name: "used_memory", In: InInfo, Section: "memory"}, func(t *TableStats) uint64 { return t.FileSize }),
	tableRow(Counter{Name: "slot_size", In: InStats | InInfo, Section: "memory"}, func(t *TableStats) uint64 { return t.SlotSize }),
	tableRow(Counter{Name: "slot_count", In: InStats | InInfo | InProm, Section: "memory", Prom: "sluice_table_slots", Gauge: true,
		Help: "Slots in the state file's table."}, func(t *TableStats) uint64 { return t.Slots }),
	tableRow(Counter{Name: "used_slots", In: InStats | InProm, Prom: "sluice_table_used_slots", Gauge: true,
		Help: "Slots that ever held a bucket."}, func(t *TableStats) uint64 { return t.UsedSlots }),
	tableRow(Counter{Name: "live_buckets", In: InProm, Prom: "sluice_table_live_buckets", Gauge: true,
		Help: "Buckets not yet back to their new state (the rest may be reclaimed)."}, func(t *TableStats) uint64 { return t.LiveBuckets }),
	tableRow(Counter{Name: "inserts", In: InStats}, func(t *TableStats) uint64 { return t.Inserts }),
	tableRow(Counter{Name: "reclaims", In: InStats | InProm, Prom: "sluice_reclaimed_slots_total",
		Help: "Slots taken over from another key's bucket that was back to its new state."}, func(t *TableStats) uint64 { return t.Reclaimed }),
	tableRow(Counter{Name: "locked_on_open", In: InStats}, func(t *TableStats) uint64 { return t.LockedOnOpen }),
	tableRow(Counter{Name: "arena_cells", In: InStats | InInfo | InProm, Section: "memory", Gauge: true,
		Help: "64-byte cells of the state file's arena, where sliding_log, window_counters and concurrency buckets keep their blocks."}, func(t *TableStats) uint64 { return t.ArenaCells }),
	tableRow(Counter{Name: "arena_used_cells", In: InStats | InInfo | InProm, Section: "memory", Gauge: true,
		Help: "Arena cells held by buckets' blocks."}, func(t *TableStats) uint64 { return t.ArenaUsed }),
	tableRow(Counter{Name: "arena_full", In: InStats | InProm,
		Help: "Bucket creations refused because the arena had no room for their block."}, func(t *TableStats) uint64 { return t.ArenaFull }),

	serverRow(Counter{Name: "connections", In: InStats | InInfo | InProm, Section: "clients", Info: "connected_clients", Gauge: true,
		Help: "Connections being served."}, func(s *ServerStats) int64 { return s.Conns }),
	serverRow(Counter{Name: "connections_total", In: InStats | InInfo, Section: "stats", Info: "total_connections_received"}, func(s *ServerStats) int64 { return s.ConnsTotal }),
	serverRow(Counter{Name: "connections_rejected", In: InStats | InInfo, Section: "clients", Info: "rejected_connections"}, func(s *ServerStats) int64 { return s.ConnsRejected }),
	serverRow(Counter{Name: "peers_denied", In: InStats | InProm,
		Help: "Connections refused because of the peer's uid or gid."}, func(s *ServerStats) int64 { return s.PeersDenied }),
	serverRow(Counter{Name: "frames", In: InStats}, func(s *ServerStats) int64 { return s.Frames }),
	serverRow(Counter{Name: "ops", In: InStats | InInfo, Section: "stats", Info: "total_commands_processed"}, func(s *ServerStats) int64 { return s.Ops }),
	serverRow(Counter{Name: "allowed", In: InStats | InInfo, Section: "stats"}, func(s *ServerStats) int64 { return s.Allowed }),
	serverRow(Counter{Name: "denied", In: InStats | InInfo, Section: "stats"}, func(s *ServerStats) int64 { return s.Denied }),
	serverRow(Counter{Name: "errors", In: InStats | InInfo, Section: "stats"}, func(s *ServerStats) int64 { return s.Errors }),
	tableRow(Counter{Name: "table_full", In: InStats | InInfo | InProm, Section: "stats",
		Help: "Bucket creations refused because no slot was free or reclaimable within the probe cap."}, func(t *TableStats) uint64 { return t.TableFull }),
	tableRow(Counter{Name: "torn_slots", In: InStats | InInfo | InProm, Section: "stats",
		Help: "Slots found torn (after a crash or by a checksum on use) and reset to a conservative state."}, func(t *TableStats) uint64 { return t.Torn }),
	tableRow(Counter{Name: "syncs", In: InStats | InInfo, Section: "stats"}, func(t *TableStats) uint64 { return t.Syncs }),
	// The state file's count, kept across restarts; sluice_sync_errors_total
	// is the Recorder's, since this process started.
	tableRow(Counter{Name: "sync_errors", In: InStats | InInfo, Section: "stats"}, func(t *TableStats) uint64 { return t.SyncErrors }),
	serverRow(Counter{Name: "malformed", In: InStats}, func(s *ServerStats) int64 { return s.Malformed }),
	serverRow(Counter{Name: "timeouts", In: InStats}, func(s *ServerStats) int64 { return s.Timeouts }),
	serverRow(Counter{Name: "shadow_denied", In: InStats}, func(s *ServerStats) int64 { return s.ShadowDenied }),
	serverRow(Counter{Name: "lock_waits", In: InStats}, func(s *ServerStats) int64 { return s.LockWaits }),
	serverRow(Counter{Name: "loop_handoffs", In: InStats}, func(s *ServerStats) int64 { return s.Handoffs }),
	serverRow(Counter{Name: "loop_multiplexed", In: InStats}, func(s *ServerStats) int64 { return s.Multiplexed }),
	serverRow(Counter{Name: "loop_polls", In: InStats}, func(s *ServerStats) int64 { return s.Polls }),
	serverRow(Counter{Name: "loop_spin_limit_ns", In: InStats}, func(s *ServerStats) int64 { return s.LoopSpinLimit }),
	serverRow(Counter{Name: "buffered_bytes", In: InStats}, func(s *ServerStats) int64 { return s.Buffered }),

	globalRow(Counter{Name: "global_requests", In: InStats | InProm,
		Help: "Decisions of global limits asked of Redis."}, func(g *GlobalStats) uint64 { return g.Requests }),
	globalRow(Counter{Name: "global_round_trips", In: InStats | InProm,
		Help: "Pipelines sent to Redis."}, func(g *GlobalStats) uint64 { return g.RoundTrips }),
	globalRow(Counter{Name: "global_commands", In: InStats | InProm,
		Help: "Redis commands sent (script calls): per decision, the cost of global limits in Redis."}, func(g *GlobalStats) uint64 { return g.Commands }),
	globalRow(Counter{Name: "global_errors", In: InStats}, func(g *GlobalStats) uint64 { return g.Errors }),
	globalRow(Counter{Name: "global_timeouts", In: InStats | InProm, Prom: "sluice_global_errors_total", Label: [2]string{"cause", "timeout"},
		Help: "Decisions Redis did not make, by cause: timeout, or error (unreachable, refused, failed over)."}, func(g *GlobalStats) uint64 { return g.Timeouts }),
	globalRow(Counter{Name: "global_errors_not_timeouts", In: InProm, Prom: "sluice_global_errors_total", Label: [2]string{"cause", "error"}}, func(g *GlobalStats) uint64 { return g.Errors - min(g.Errors, g.Timeouts) }),
	globalRow(Counter{Name: "lease_grants", In: InStats | InProm, Prom: "sluice_global_lease_grants_total",
		Help: "Leases of global tokens granted to this host."}, func(g *GlobalStats) uint64 { return g.LeaseGrants }),
	globalRow(Counter{Name: "lease_tokens_granted", In: InStats | InProm, Prom: "sluice_global_lease_tokens_granted_total",
		Help: "Tokens granted to this host in leases."}, func(g *GlobalStats) uint64 { return g.LeaseGranted }),
	globalRow(Counter{Name: "lease_returns", In: InStats | InProm, Prom: "sluice_global_lease_returns_total",
		Help: "Leases whose unused tokens went back to Redis."}, func(g *GlobalStats) uint64 { return g.LeaseReturns }),
	globalRow(Counter{Name: "lease_tokens_returned", In: InStats | InProm, Prom: "sluice_global_lease_tokens_returned_total",
		Help: "Unused lease tokens given back to Redis."}, func(g *GlobalStats) uint64 { return g.LeaseReturned }),
	globalRow(Counter{Name: "lease_decisions", In: InStats | InProm, Prom: "sluice_global_lease_decisions_total",
		Help: "Decisions of global limits made from a lease, without Redis."}, func(g *GlobalStats) uint64 { return g.LeaseLocal }),
	globalRow(Counter{Name: "fallbacks", In: InStats | InProm, Prom: "sluice_global_fallback_transitions_total", Label: [2]string{"to", "fallback"},
		Help: "Outage policy transitions of a Redis shard: to fallback (Redis unavailable) or to global (back)."}, func(g *GlobalStats) uint64 { return g.ToFallback }),
	globalRow(Counter{Name: "fallback_recoveries", In: InStats | InProm, Prom: "sluice_global_fallback_transitions_total", Label: [2]string{"to", "global"}}, func(g *GlobalStats) uint64 { return g.ToGlobal }),
	globalRow(Counter{Name: "policy_open", In: InStats | InProm, Prom: "sluice_global_policy_decisions_total", Label: [2]string{"policy", "open"},
		Help: "Decisions of global limits made by their outage policy while Redis was unavailable, by policy."}, func(g *GlobalStats) uint64 { return g.Open }),
	globalRow(Counter{Name: "policy_closed", In: InStats | InProm, Prom: "sluice_global_policy_decisions_total", Label: [2]string{"policy", "closed"}}, func(g *GlobalStats) uint64 { return g.Closed }),
	globalRow(Counter{Name: "policy_local", In: InStats | InProm, Prom: "sluice_global_policy_decisions_total", Label: [2]string{"policy", "local"}}, func(g *GlobalStats) uint64 { return g.Local }),
	globalRow(Counter{Name: "shards_down", In: InStats | InProm, Prom: "sluice_global_shards_down", Gauge: true,
		Help: "Redis shards whose global limits follow their outage policy now."}, func(g *GlobalStats) uint64 { return uint64(g.ShardsDown) }),
	globalRow(Counter{Name: "global_unanswered", In: InStats | InProm,
		Help: "Requests of global limits that Redis did not answer in time (or refused) while their shard was up, decided by their outage policy."}, func(g *GlobalStats) uint64 { return g.Unanswered }),
	globalRow(Counter{Name: "global_pipeline_misses", In: InStats | InProm,
		Help: "Pipelines Redis did not answer within --global-timeout of their sending."}, func(g *GlobalStats) uint64 { return g.Misses }),
	globalRow(Counter{Name: "global_probes", In: InStats | InProm,
		Help: "Probes of Redis shards that were down."}, func(g *GlobalStats) uint64 { return g.Probes }),
	globalRow(Counter{Name: "global_hosts", In: InStats | InProm, Gauge: true,
		Help: "Sidecars sharing this Redis, as last counted: the default outage share of a limit is 1/hosts."}, func(g *GlobalStats) uint64 { return uint64(g.Hosts) }),
	globalRow(Counter{Name: "lease_tokens_recovered", In: InStats | InProm, Prom: "sluice_global_lease_tokens_recovered_total",
		Help: "Unused tokens of the leases a killed sidecar held, returned to Redis from its lease journal at start."}, func(g *GlobalStats) uint64 { return g.LeaseRecovered }),

	overrideRow(Counter{Name: "overrides", In: InStats | InProm, Gauge: true, Labels: []string{"limit"},
		Help: "Overrides of a named limit in the config in force, by limit."},
		func(o *Overrides, emit func(uint64, ...string)) {
			for _, l := range o.Limits {
				emit(uint64(l.N), l.Limit)
			}
		}),
	overrideRow(Counter{Name: "override_decisions", In: InStats | InProm, Labels: []string{"limit", "override", "outcome"},
		Help: "Decisions made under an override of a named limit, by limit, override (its key or key pattern as the config writes it, never a request's key) and outcome."},
		func(o *Overrides, emit func(uint64, ...string)) {
			for _, d := range o.Decisions {
				for out, v := range d.Decisions {
					emit(v, d.Limit, d.Override, Outcome(out).String())
				}
			}
		}),
}

// InfoName is the counter's INFO field.
func (c *Counter) InfoName() string {
	if c.Info != "" {
		return c.Info
	}
	return c.Name
}

// PromName is the counter's Prometheus metric.
func (c *Counter) PromName() string {
	switch {
	case c.Prom != "":
		return c.Prom
	case c.Gauge:
		return "sluice_" + c.Name
	}
	return "sluice_" + c.Name + "_total"
}

// Stats calls f with the name and value of each STATS row, in order; the
// rows of global limits only if s has them.
func (s *Snapshot) Stats(f func(name string, v uint64)) {
	for i := range Counters {
		c := &Counters[i]
		if c.In&InStats != 0 && s.has(c.src) {
			f(c.Name, c.value(s))
		}
	}
}

// has reports whether s has the part src (its table is always there).
func (s *Snapshot) has(src source) bool {
	switch src {
	case fromGlobal:
		return s.Global != nil
	case fromOverrides:
		return s.Overrides != nil
	}
	return true
}

// Info calls f with the INFO field and value of each row of section, in
// order.
func (s *Snapshot) Info(section string, f func(field string, v uint64)) {
	for i := range Counters {
		c := &Counters[i]
		if c.In&InInfo != 0 && c.Section == section {
			f(c.InfoName(), c.value(s))
		}
	}
}

// promDescs are the descriptions of the rows' Prometheus metrics, one per
// metric (rows of one metric differ by their label's value), in the order
// of their first row.
var promDescs, promRowDescs = func() ([]*prometheus.Desc, []*prometheus.Desc) {
	var descs []*prometheus.Desc
	rows := make([]*prometheus.Desc, len(Counters))
	first := map[string]int{} // a metric's first row
	for i := range Counters {
		c := &Counters[i]
		if c.In&InProm == 0 {
			continue
		}
		name := c.PromName()
		if j, ok := first[name]; ok {
			if f := &Counters[j]; f.Label[0] == "" || f.Label[0] != c.Label[0] || f.Gauge != c.Gauge || c.Help != "" {
				panic(fmt.Sprintf("metrics: rows %s and %s of %s disagree", f.Name, c.Name, name))
			}
			rows[i] = rows[j]
			continue
		}
		labels := c.Labels
		if c.Label[0] != "" {
			labels = []string{c.Label[0]}
		}
		first[name] = i
		rows[i] = prometheus.NewDesc(name, c.Help, labels, nil)
		descs = append(descs, rows[i])
	}
	return descs, rows
}()

// collectCounters exports the rows In the Prometheus exposition whose
// source s has: the table's once it is known, the global limits' when
// there are some.
func collectCounters(ch chan<- prometheus.Metric, s *Snapshot, haveTable bool) {
	for i := range Counters {
		c := &Counters[i]
		if c.In&InProm == 0 || (c.src == fromTable && !haveTable) || !s.has(c.src) {
			continue
		}
		kind := prometheus.CounterValue
		if c.Gauge {
			kind = prometheus.GaugeValue
		}
		if c.series != nil {
			c.series(s, func(v uint64, labels ...string) {
				ch <- prometheus.MustNewConstMetric(promRowDescs[i], kind, float64(v), labels...)
			})
			continue
		}
		var labels []string
		if c.Label[0] != "" {
			labels = []string{c.Label[1]}
		}
		ch <- prometheus.MustNewConstMetric(promRowDescs[i], kind, float64(c.value(s)), labels...)
	}
}
