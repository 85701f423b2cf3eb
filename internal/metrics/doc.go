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
// create series; algorithm, outcome and protocol are small enums.
//
// # Concurrency
//
// Every Recorder method is safe for concurrent use. A scrape reads each
// counter once, so counters of one scrape may be a few decisions apart;
// every counter only grows.
package metrics
