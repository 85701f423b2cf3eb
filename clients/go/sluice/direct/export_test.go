package direct

// SetDecision is setDecision, for the tests.
var SetDecision = setDecision
