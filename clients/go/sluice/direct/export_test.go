package direct

// SetDecision is setDecision, for the tests.
var SetDecision = setDecision

// SameLimit is sameLimit, for the tests.
var SameLimit = sameLimit

// NewClock is the clock a Client reads, on ref, for the benchmarks.
func NewClock(ref func() int64) func() int64 { return newClock(ref).now }
