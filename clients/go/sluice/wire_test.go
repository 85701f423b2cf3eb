package sluice_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/clients/go/sluice"
	"github.com/sluicehq/sluice/proto"
)

// SetWireDecision sets every field a decision on the wire carries, as
// WireDecision returns it, and leaves the client's own fields alone.
func TestSetWireDecision(t *testing.T) {
	w := proto.Decision{Allowed: true, Remaining: 3, Limit: 7, RetryAfter: -1, ResetAfter: 5e9, Delay: 2e6}
	want := sluice.Decision{Allowed: true, Remaining: 3, Limit: 7, RetryAfter: -1, ResetAfter: 5 * time.Second, Delay: 2 * time.Millisecond}
	if got := sluice.WireDecision(&w); got != want {
		t.Errorf("WireDecision = %+v, want %+v", got, want)
	}
	d := sluice.Decision{Remaining: 99, Degraded: true, ShadowDenied: true, Outage: "local", FailsClosed: true}
	sluice.SetWireDecision(&d, &w)
	want.Degraded, want.ShadowDenied, want.Outage, want.FailsClosed = true, true, "local", true
	if d != want {
		t.Errorf("SetWireDecision = %+v, want %+v", d, want)
	}
}
