package sluice

import (
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of the circuit breaker (WithBreaker).
const (
	DefaultBreakerThreshold = 3                      // consecutive unavailable answers that open it
	DefaultBreakerMinOpen   = 250 * time.Millisecond // the first open period
	DefaultBreakerMaxOpen   = 10 * time.Second       // the longest open period
)

// The states of the breaker.
const (
	breakerClosed  = iota // calls go to the sidecar
	breakerOpen           // calls fail at once until openUntil
	breakerProbing        // one call (the probe) goes to the sidecar; the others fail at once
)

// breaker stops a client from asking a sidecar that does not answer: after
// threshold consecutive unavailable answers it opens, and calls fail at
// once (the failure policy then decides) for an open period that doubles
// with each failed probe, from minOpen up to maxOpen, each period drawn at
// random from its upper half (so that the processes of a host do not probe
// in step). Then one call, the probe, goes to the sidecar: an answer
// closes the breaker, an unavailable answer opens it again.
//
// A closed breaker costs a call one atomic load and, after a success that
// follows a failure, one store.
type breaker struct {
	threshold int32
	minOpen   time.Duration
	maxOpen   time.Duration
	log       *slog.Logger
	path      string

	state atomic.Int32 // breakerClosed, breakerOpen or breakerProbing
	fails atomic.Int32 // consecutive unavailable answers while closed

	mu        sync.Mutex // guards the fields below and every change of state
	openUntil time.Time  // while open: when the next call probes
	opens     int        // consecutive open periods, for the doubling
}

// allow reports whether a call may go to the sidecar and whether it is the
// probe (which must then report its outcome with probeDone).
func (b *breaker) allow() (ok, probe bool) {
	switch b.state.Load() {
	case breakerClosed:
		return true, false
	case breakerProbing:
		return false, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state.Load() != breakerOpen || time.Now().Before(b.openUntil) {
		return false, false
	}
	b.state.Store(breakerProbing)
	return true, true
}

// The outcomes of a call, as the breaker counts them.
const (
	outcomeAnswered    = iota // the sidecar answered (an error status included)
	outcomeUnavailable        // no answer in time
	outcomeNeither            // a fast failure, or the caller cancelled
)

// done records the outcome of a call that allow let through.
func (b *breaker) done(probe bool, outcome int) {
	if probe {
		b.probeDone(outcome)
		return
	}
	switch outcome {
	case outcomeAnswered:
		if b.fails.Load() != 0 {
			b.fails.Store(0)
		}
	case outcomeUnavailable:
		if b.fails.Add(1) >= b.threshold {
			b.trip()
		}
	}
}

// trip opens a closed breaker.
func (b *breaker) trip() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state.Load() != breakerClosed {
		return
	}
	b.opens = 0
	d := b.openLocked()
	b.log.Warn("the Sluice sidecar is not answering, so calls fail at once and the failure policy decides until a probe gets an answer",
		"socket", b.path, "unavailable_answers", b.fails.Load(), "next_probe_in", d.Round(time.Millisecond))
}

// openLocked opens the breaker for the next period and returns it.
func (b *breaker) openLocked() time.Duration {
	d := b.minOpen
	for i := 0; i < b.opens && d < b.maxOpen; i++ {
		d *= 2
	}
	d = min(d, b.maxOpen)
	d = d/2 + rand.N(d/2+1) // jitter: the upper half of the period
	b.opens++
	b.openUntil = time.Now().Add(d)
	b.state.Store(breakerOpen)
	return d
}

// probeDone records the probe's outcome.
func (b *breaker) probeDone(outcome int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch outcome {
	case outcomeAnswered:
		b.fails.Store(0)
		b.opens = 0
		b.state.Store(breakerClosed)
		b.log.Info("the Sluice sidecar answers again", "socket", b.path)
	case outcomeUnavailable:
		b.openLocked()
	default: // the next call probes instead
		b.openUntil = time.Time{}
		b.state.Store(breakerOpen)
	}
}

// healthy reports whether the breaker is closed.
func (b *breaker) healthy() bool { return b.state.Load() == breakerClosed }
