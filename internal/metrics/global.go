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

var (
	descGlobalRequests = prometheus.NewDesc("sluice_global_requests_total",
		"Decisions of global limits asked of Redis.", nil, nil)
	descGlobalRoundTrips = prometheus.NewDesc("sluice_global_round_trips_total",
		"Pipelines sent to Redis.", nil, nil)
	descGlobalCommands = prometheus.NewDesc("sluice_global_commands_total",
		"Redis commands sent (script calls): per decision, the cost of global limits in Redis.", nil, nil)
	descGlobalErrors = prometheus.NewDesc("sluice_global_errors_total",
		"Decisions Redis did not make, by cause: timeout, or error (unreachable, refused, failed over).",
		[]string{"cause"}, nil)
	descGlobalBatch = prometheus.NewDesc("sluice_global_batch_size",
		"Requests per pipeline sent to Redis.", nil, nil)
	descLeaseGrants = prometheus.NewDesc("sluice_global_lease_grants_total",
		"Leases of global tokens granted to this host.", nil, nil)
	descLeaseGranted = prometheus.NewDesc("sluice_global_lease_tokens_granted_total",
		"Tokens granted to this host in leases.", nil, nil)
	descLeaseReturns = prometheus.NewDesc("sluice_global_lease_returns_total",
		"Leases whose unused tokens went back to Redis.", nil, nil)
	descLeaseReturned = prometheus.NewDesc("sluice_global_lease_tokens_returned_total",
		"Unused lease tokens given back to Redis.", nil, nil)
	descLeaseLocal = prometheus.NewDesc("sluice_global_lease_decisions_total",
		"Decisions of global limits made from a lease, without Redis.", nil, nil)
	descLeaseRecovered = prometheus.NewDesc("sluice_global_lease_tokens_recovered_total",
		"Unused tokens of the leases a killed sidecar held, returned to Redis from its lease journal at start.", nil, nil)
	descFallbacks = prometheus.NewDesc("sluice_global_fallback_transitions_total",
		"Outage policy transitions of a Redis shard: to fallback (Redis unavailable) or to global (back).",
		[]string{"to"}, nil)
	descPolicyDecisions = prometheus.NewDesc("sluice_global_policy_decisions_total",
		"Decisions of global limits made by their outage policy while Redis was unavailable, by policy.",
		[]string{"policy"}, nil)
	descShardsDown = prometheus.NewDesc("sluice_global_shards_down",
		"Redis shards whose global limits follow their outage policy now.", nil, nil)
	descUnanswered = prometheus.NewDesc("sluice_global_unanswered_total",
		"Requests of global limits that Redis did not answer in time (or refused) while their shard was up, decided by their outage policy.", nil, nil)
	descMisses = prometheus.NewDesc("sluice_global_pipeline_misses_total",
		"Pipelines Redis did not answer within --global-timeout of their sending.", nil, nil)
	descProbes = prometheus.NewDesc("sluice_global_probes_total",
		"Probes of Redis shards that were down.", nil, nil)
	descHosts = prometheus.NewDesc("sluice_global_hosts",
		"Sidecars sharing this Redis, as last counted: the default outage share of a limit is 1/hosts.", nil, nil)
)

var globalDescs = []*prometheus.Desc{descGlobalRequests, descGlobalRoundTrips, descGlobalCommands,
	descGlobalErrors, descGlobalBatch, descLeaseGrants, descLeaseGranted, descLeaseReturns, descLeaseReturned,
	descLeaseLocal, descLeaseRecovered, descFallbacks, descPolicyDecisions, descShardsDown, descUnanswered, descMisses, descProbes, descHosts}

// SetGlobal sets the function a scrape calls to read the global limits'
// counters. Without one, the global metrics are not exported.
func (r *Recorder) SetGlobal(f func() GlobalStats) { r.global.Store(&f) }

// collectGlobal exports the global limits' counters, if there are any.
func (r *Recorder) collectGlobal(ch chan<- prometheus.Metric) {
	f := r.global.Load()
	if f == nil {
		return
	}
	st := (*f)()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(descGlobalRequests, st.Requests)
	counter(descGlobalRoundTrips, st.RoundTrips)
	counter(descGlobalCommands, st.Commands)
	counter(descGlobalErrors, st.Timeouts, "timeout")
	counter(descGlobalErrors, st.Errors-min(st.Errors, st.Timeouts), "error")
	// Batches as a histogram: bucket i holds sizes up to 2^(i+1)-1; the
	// sum of the sizes is the requests pipelined.
	buckets := make(map[float64]uint64, len(st.Batches))
	var n uint64
	for i, c := range st.Batches[:len(st.Batches)-1] {
		n += c
		buckets[float64(uint64(1)<<(i+1)-1)] = n
	}
	n += st.Batches[len(st.Batches)-1]
	ch <- prometheus.MustNewConstHistogram(descGlobalBatch, n, float64(st.Requests), buckets)
	counter(descLeaseGrants, st.LeaseGrants)
	counter(descLeaseGranted, st.LeaseGranted)
	counter(descLeaseReturns, st.LeaseReturns)
	counter(descLeaseReturned, st.LeaseReturned)
	counter(descLeaseLocal, st.LeaseLocal)
	counter(descLeaseRecovered, st.LeaseRecovered)
	counter(descFallbacks, st.ToFallback, "fallback")
	counter(descFallbacks, st.ToGlobal, "global")
	counter(descPolicyDecisions, st.Open, "open")
	counter(descPolicyDecisions, st.Closed, "closed")
	counter(descPolicyDecisions, st.Local, "local")
	ch <- prometheus.MustNewConstMetric(descShardsDown, prometheus.GaugeValue, float64(st.ShardsDown))
	counter(descUnanswered, st.Unanswered)
	counter(descMisses, st.Misses)
	counter(descProbes, st.Probes)
	ch <- prometheus.MustNewConstMetric(descHosts, prometheus.GaugeValue, float64(st.Hosts))
}
