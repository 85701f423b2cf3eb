package sluice

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// What a middleware does about a request whose decision failed, by the
// kind of failure (README, "Failure policy", has the table).
const (
	// failPolicy: the sidecar is there but cannot decide this request (a
	// full table, an internal error): the failure policy decides, as for
	// an outage, and the failure is logged.
	failPolicy = iota
	// failUnavailable: the sidecar is unavailable and the failure policy
	// did not decide (FailError, or the sidecar has never answered): the
	// error handler answers, 503 by default.
	failUnavailable
	// failConfig: a mistake to fix, not an outage (an unknown name, an
	// invalid limit, a limit this sidecar cannot serve, a sidecar that
	// refuses this process or is older than the request, an invalid key or
	// cost, a closed client): the error handler answers, 500 by default,
	// and the request is never let through unlimited.
	failConfig
)

// failureOf classifies the error of a request's acquire or lease.
func failureOf(err error) int {
	switch {
	case errors.Is(err, ErrTableFull), errors.Is(err, ErrInternal):
		return failPolicy
	case errors.Is(err, ErrUnavailable):
		return failUnavailable
	}
	return failConfig
}

// defaultOnError answers a failed request: 503 Service Unavailable for a
// sidecar that is unavailable or cannot decide, 500 Internal Server Error
// for a mistake.
func defaultOnError(w http.ResponseWriter, r *http.Request, err error) {
	code := http.StatusInternalServerError
	if failureOf(err) != failConfig {
		code = http.StatusServiceUnavailable
	}
	http.Error(w, http.StatusText(code), code)
}

// failed handles the error of a request's acquire or lease: it returns the
// failure policy's decision and true if the policy decides it, or answers
// the request with the error handler and returns false. Either way it is
// logged (see failureLog), unless the request's own context ended: its
// client went away, and nobody reads the answer.
func (m *middleware) failed(w http.ResponseWriter, r *http.Request, err error) (Decision, bool) {
	if r.Context().Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return Decision{}, false
	}
	kind := failureOf(err)
	if kind == failPolicy {
		if d, perr := m.c.byPolicy(err); perr == nil {
			m.log.report(m, err, "the failure policy ("+m.c.opt.policy.String()+") decided")
			return d, true
		}
	}
	answer := "answered 500"
	if kind != failConfig {
		answer = "answered 503"
	}
	m.log.report(m, err, answer)
	m.onError(w, r, err)
	return Decision{}, false
}

// failureLog logs the failures of a middleware's requests at ERROR, at
// most one line every failureLogInterval for each kind of error, with the
// count of requests since the last line: a misconfigured limit under
// load must not flood the log, nor go unseen.
type failureLog struct {
	mu    sync.Mutex
	kinds map[string]*failureCount // by the error's kind: its status, or "unavailable"
}

type failureCount struct {
	n, logged int64
	at        time.Time
}

// failureLogInterval is the least time between two log lines about one
// kind of failure.
const failureLogInterval = 10 * time.Second

func (fl *failureLog) report(m *middleware, err error, answer string) {
	kind := "unavailable"
	var se *StatusError
	if errors.As(err, &se) {
		kind = statusText(se.Status)
	}
	now := time.Now()
	fl.mu.Lock()
	if fl.kinds == nil {
		fl.kinds = map[string]*failureCount{}
	}
	fc := fl.kinds[kind]
	if fc == nil {
		fc = &failureCount{}
		fl.kinds[kind] = fc
	}
	fc.n++
	log := fc.at.IsZero() || now.Sub(fc.at) >= failureLogInterval
	var n int64
	if log {
		n, fc.logged, fc.at = fc.n-fc.logged, fc.n, now
	}
	fl.mu.Unlock()
	if log {
		m.c.opt.logger.LogAttrs(context.Background(), slog.LevelError, "the rate limit middleware could not decide requests",
			slog.String("policy", m.name), slog.String("limit", m.l.String()), slog.String("answer", answer),
			slog.Int64("requests", n), slog.Int64("total", fc.n), slog.String("error", err.Error()))
	}
}
