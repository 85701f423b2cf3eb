package metrics

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sluicehq/sluice/bucket"
)

// The metrics' descriptions: names, help and labels. docs/metrics.md
// repeats them for people.
var (
	descDecisions = prometheus.NewDesc("sluice_decisions_total",
		"Decisions made, by limit (a config name, or \"spec\" for an inline spec), algorithm and outcome.",
		[]string{"limit", "algorithm", "outcome"}, nil)
	descShadowDenied = prometheus.NewDesc("sluice_shadow_denied_total",
		"Denials that a shadow limit turned into allows, by limit.",
		[]string{"limit"}, nil)
	descDecisionDur = prometheus.NewDesc("sluice_decision_duration_seconds",
		"Time one decision took in the engine (slot lock, algorithm, commit), by algorithm.",
		[]string{"algorithm"}, nil)
	descRequestDur = prometheus.NewDesc("sluice_request_duration_seconds",
		"Time from a request's arrival to its reply's encoding, by protocol.",
		[]string{"protocol"}, nil)
	descProtoErrors = prometheus.NewDesc("sluice_protocol_errors_total",
		"Malformed frames or commands, by protocol.",
		[]string{"protocol"}, nil)
	descProbe = prometheus.NewDesc("sluice_probe_length",
		"Displacement of the bucket found or placed from its home slot, in slots.",
		nil, nil)
	descSyncDur = prometheus.NewDesc("sluice_sync_duration_seconds",
		"Time one sync of the state file to disk took.",
		nil, nil)
	descSyncErrors = prometheus.NewDesc("sluice_sync_errors_total",
		"Syncs of the state file that failed.",
		nil, nil)
	descReloads = prometheus.NewDesc("sluice_config_reloads_total",
		"Config file reloads, by result: ok (the new file is in force) or error (the previous config stays).",
		[]string{"result"}, nil)
	descKept = prometheus.NewDesc("sluice_config_kept_limits",
		"Limits kept in force after the config file stopped defining them, until it is reloaded on demand (SIGHUP).",
		nil, nil)
)

// collector exports a Recorder's counters at scrape time.
type collector struct{ r *Recorder }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descDecisions, descShadowDenied, descDecisionDur, descRequestDur,
		descProtoErrors, descProbe, descSyncDur, descSyncErrors, descReloads, descKept, descGlobalBatch} {
		ch <- d
	}
	for _, d := range promDescs {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	r := c.r
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	hist := func(d *prometheus.Desc, h *histogram, labels ...string) {
		n, sum, b := h.snapshot()
		ch <- prometheus.MustNewConstHistogram(d, n, sum, b, labels...)
	}

	limits := r.limits.load()
	names := make([]string, 0, len(limits))
	for name := range limits {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		l := limits[name]
		for a := range numAlgorithms {
			var counts [numOutcomes]uint64
			var any bool
			for o := range numOutcomes {
				counts[o] = l.decisions[a][o].Load()
				any = any || counts[o] > 0
			}
			if !any {
				continue // an algorithm this limit never had
			}
			for o := range numOutcomes {
				counter(descDecisions, counts[o], name, algorithmName(a), Outcome(o).String())
			}
		}
		counter(descShadowDenied, l.shadow.Load(), name)
	}
	for a := range numAlgorithms {
		if algorithmName(a) != "" {
			hist(descDecisionDur, &r.decisionDur[a], algorithmName(a))
		}
	}
	for p := range numProtocols {
		hist(descRequestDur, &r.requestDur[p], Protocol(p).String())
		counter(descProtoErrors, r.protoErrors[p].Load(), Protocol(p).String())
	}
	hist(descProbe, &r.probe)
	hist(descSyncDur, &r.syncDur)
	counter(descSyncErrors, r.syncErrors.Load())
	counter(descReloads, r.reloads[0].Load(), "ok")
	counter(descReloads, r.reloads[1].Load(), "error")
	gauge(descKept, float64(r.kept.Load()))
	// The counter table, with the connections and peers denied the
	// Recorder counted.
	snap := Snapshot{Server: ServerStats{Conns: r.conns.Load(), PeersDenied: int64(r.peersDenied.Load())}, Overrides: r.Overrides()}
	table := r.table.Load()
	if table != nil {
		snap.Table = (*table)()
	}
	if g := r.global.Load(); g != nil {
		st := (*g)()
		snap.Global = &st
		collectBatches(ch, &st)
	}
	collectCounters(ch, &snap, table != nil)
}

// algorithmName is the algorithm label of bucket.Algorithm a, "" for
// values that name no algorithm.
func algorithmName(a int) string {
	alg := bucket.Algorithm(a)
	if _, err := bucket.ParseAlgorithm(alg.String()); err != nil {
		return ""
	}
	return alg.String()
}

// Registry returns a registry with the Recorder's metrics and the
// standard Go runtime and process metrics (go_*, process_*), which every
// Prometheus dashboard for a Go service expects.
func (r *Recorder) Registry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{r},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}
