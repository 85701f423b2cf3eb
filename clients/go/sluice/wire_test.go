package sluice_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/clients/go/sluice"
	"github.com/sluicehq/sluice/clients/go/sluice/internal/clientwire"
	"github.com/sluicehq/sluice/proto"
)

// The decision package direct writes in place sets every field a decision
// on the wire carries, as the one it returns by value, and leaves the
// client's own fields alone.
func TestClientwire_setDecision(t *testing.T) {
	decision := clientwire.Decision.(func(*proto.Decision) sluice.Decision)
	setDecision := clientwire.SetDecision.(func(*sluice.Decision, *proto.Decision))
	w := proto.Decision{Allowed: true, Remaining: 3, Limit: 7, RetryAfter: -1, ResetAfter: 5e9, Delay: 2e6}
	want := sluice.Decision{Allowed: true, Remaining: 3, Limit: 7, RetryAfter: -1, ResetAfter: 5 * time.Second, Delay: 2 * time.Millisecond}
	if got := decision(&w); got != want {
		t.Errorf("Decision = %+v, want %+v", got, want)
	}
	d := sluice.Decision{Remaining: 99, Degraded: true, ShadowDenied: true, Outage: "local", FailsClosed: true}
	setDecision(&d, &w)
	want.Degraded, want.ShadowDenied, want.Outage, want.FailsClosed = true, true, "local", true
	if d != want {
		t.Errorf("SetDecision = %+v, want %+v", d, want)
	}
}
