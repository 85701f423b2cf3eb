package throttledlimiter

import "time"

// SetClock makes r decide as of now() rather than the sidecar's clock, so
// that a test can compare it with throttled's own rate limiter on a
// simulated clock.
func (r *RateLimiter) SetClock(now func() time.Time) { r.now = now }
