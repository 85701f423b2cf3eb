package metrics

import "github.com/prometheus/client_golang/prometheus"

// GlobalStats are the counters of global limits (decided in Redis), read
// at each scrape: the Store's, the Leases' and the outage Fallback's.
type GlobalStats struct {
	Requests, RoundTrips, Commands uint64 // decisions asked of Redis, pipelines, script calls
	Errors, Timeouts               uint64
	// Batches[i] counts pipelines of 2^i to 2^(i+1)-1 requests (the last
	// also every larger one).
	Batches [10]uint64

	LeaseGrants, LeaseGranted   uint64 // leases that got tokens, and the tokens
	LeaseReturns, LeaseReturned uint64 // leases whose unused tokens went back, and the tokens
	LeaseLocal                  uint64 // decisions made from a lease, without Redis
	LeaseRecovered              uint64 // unused tokens of a killed sidecar's leases, returned at start

	ToFallback, ToGlobal uint64 // outage policy transitions of a shard
	Open, Closed, Local  uint64 // decisions made by each outage policy
	ShardsDown           int    // shards following their outage policy now
	Unanswered           uint64 // policy decisions of requests Redis failed while their shard was up
	Misses, Probes       uint64 // pipelines without a reply in time; probes of shards down
	Hosts                int    // sidecars sharing the Redis, as last counted
}

// descGlobalBatch is the one metric of global limits that is not a row of
// Counters: a histogram.
var descGlobalBatch = prometheus.NewDesc("sluice_global_batch_size",
	"Requests per pipeline sent to Redis.", nil, nil)

// SetGlobal sets the function a scrape calls to read the global limits'
// counters. Without one, the global metrics are not exported.
func (r *Recorder) SetGlobal(f func() GlobalStats) { r.global.Store(&f) }

// collectBatches exports the global limits' pipeline sizes as a histogram:
// bucket i holds sizes up to 2^(i+1)-1; the sum of the sizes is the
// requests pipelined.
func collectBatches(ch chan<- prometheus.Metric, st *GlobalStats) {
	buckets := make(map[float64]uint64, len(st.Batches))
	var n uint64
	for i, c := range st.Batches[:len(st.Batches)-1] {
		n += c
		buckets[float64(uint64(1)<<(i+1)-1)] = n
	}
	n += st.Batches[len(st.Batches)-1]
	ch <- prometheus.MustNewConstHistogram(descGlobalBatch, n, float64(st.Requests), buckets)
}
