// Package metrics counts what the sidecar does and serves it to Prometheus
// in the text exposition format.
//
// The server and the engine feed a Recorder; the Recorder keeps plain
// atomic counters and fixed-bucket histograms, and a prometheus.Collector
// reads them only when Prometheus scrapes. So the decision path pays a few
// atomic adds and nothing else: no locks, no allocations, no label lookups
// in client_golang's vectors (a test and a benchmark hold it to that).
//
// # Metrics
//
// docs/metrics.md lists every metric with its labels and meaning. Label
// values are bounded: limit is a name from the config file, or "spec" for
// a request that brought an inline spec (SpecLimit), so a caller cannot
// create series; override is an override's key or pattern as the config
// writes it, never a request's key, at most MaxOverrides per limit;
// algorithm, outcome and protocol are small enums.
//
// # Adding a metric
//
// A counter or gauge that STATS, INFO or Prometheus reports is one row of
// Counters (counters.go): its name, the reports it appears in, and which
// value of a Snapshot it reads. If the value is new, add it to the part of
// Snapshot it belongs to (TableStats, ServerStats or GlobalStats) and to
// the server's function that fills that part; then describe it in
// docs/metrics.md. Give a new counter one name everywhere: STATS and INFO
// show Name, Prometheus sluice_Name_total (sluice_Name for a gauge). The
// older rows keep the names they were published under. A series with
// labels the decision path feeds (decisions, latencies) is a field of
// Recorder with a method to feed it, exported by collector.go.
//
// # Concurrency
//
// Every Recorder method is safe for concurrent use. A scrape reads each
// counter once, so counters of one scrape may be a few decisions apart;
// every counter only grows.
package metrics
