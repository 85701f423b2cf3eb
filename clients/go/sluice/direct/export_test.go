package direct

// SetDecision is setDecision, for the tests.
var SetDecision = setDecision

// SameLimit is sameLimit, for the tests.
var SameLimit = sameLimit
