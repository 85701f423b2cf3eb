package global

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"time"
)

// A shard's health. Redis that does not answer one pipeline in time is
// slow, not gone: the requests of that pipeline fail (their policy decides
// them) and nothing else changes. A shard is down only when Redis is
// really unreachable: a pipeline refused (a connection error, CLUSTERDOWN,
// LOADING, a failed WAIT, ...) or Options.Misses pipelines in a row with no
// reply within the timeout. While a shard is down its requests fail at
// once, without waiting, and a probe goroutine sends a cost-0 request (a
// peek of the last bucket the shard decided) after 5 ms, 10 ms, 20 ms, ...
// up to Options.ProbeMax between probes; the first probe answered brings
// the shard back. Only a pipeline sent after a shard's last transition can
// cause its next one, so replies still in flight do not flap the state.

// Defaults of the health options.
const (
	DefaultMisses   = 3
	DefaultProbeMax = 100 * time.Millisecond
	minProbe        = 5 * time.Millisecond
)

// outcome is what a pipeline learned about Redis.
type outcome uint8

const (
	answered outcome = iota // Redis replied (a decision, or a script error)
	timedOut                // no reply within the timeout
	refused                 // a connection error, or a reply saying Redis cannot decide now
)

// outcomeOf classifies the error of one call of a pipeline.
func outcomeOf(err error) outcome {
	switch {
	case err == nil:
		return answered
	case isTimeout(err):
		return timedOut
	case errors.Is(classify(err), ErrUnavailable):
		return refused
	}
	return answered // a script error: Redis is there
}

// isTimeout reports whether err is a deadline that passed.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		errors.As(err, &ne) && ne.Timeout()
}

// observe updates sh's health after a pipeline sent at sentAt (Unix ns)
// whose calls ended as o; cause is the error of one that failed, probe the
// call to repeat as a probe if the shard goes down.
func (s *Store) observe(sh *shard, sentAt int64, o outcome, cause error, probe *call) {
	switch o {
	case answered:
		sh.misses.Store(0)
		if sh.down.Load() && sentAt > sh.since.Load() {
			s.up(sh, "")
		}
		return
	case timedOut:
		s.stats.misses.Add(1)
		n := sh.misses.Add(1)
		if n < int32(s.maxMisses) {
			return
		}
		cause = fmt.Errorf("no reply to %d pipelines in a row within %v", n, s.timeout)
	}
	if sh.down.Load() || sentAt <= sh.since.Load() {
		return
	}
	sh.mu.Lock()
	if probe != nil {
		sh.probe = peek(probe)
	}
	sh.mu.Unlock()
	// The error a shed request gets is stored before the shard is marked
	// down: a request that sees it down reads it at once. (A shard already
	// down gets a newer cause; either says the same.)
	var err error = shedError{fmt.Errorf("%w: no answer from %s (%v)", ErrUnavailable, sh.name(), cause)}
	sh.downErr.Store(&err)
	if !sh.down.CompareAndSwap(false, true) {
		return
	}
	now := time.Now()
	sh.since.Store(now.UnixNano())
	s.stats.toDown.Add(1)
	s.log.Warn("Redis is unavailable: global limits follow their outage policy", "shard", sh.name(), "error", cause.Error())
	if s.onTransition != nil {
		s.onTransition()
	}
	go s.probeLoop(sh)
}

// up ends sh's outage; why says how, if not by a probe's answer.
func (s *Store) up(sh *shard, why string) {
	if !sh.down.CompareAndSwap(true, false) {
		return
	}
	now := time.Now().UnixNano()
	prev := sh.since.Swap(now)
	sh.misses.Store(0)
	s.stats.toUp.Add(1)
	args := []any{"shard", sh.name(), "unavailable_for", time.Duration(now - prev).String()}
	if why != "" {
		args = append(args, "because", why)
	}
	s.log.Info("Redis is available again: global limits are decided in Redis", args...)
	if s.onTransition != nil {
		s.onTransition()
	}
}

// peek returns a call's request as a cost-0 acquire, a request that
// changes nothing, to probe with (at the call's explicit time, if any).
func peek(c *call) *call {
	args := slices.Clone(c.args[:c.base])
	args[0], args[1] = "a"+args[0].(string)[1:], int64(0)
	return &call{alg: c.alg, key: c.key, args: args, base: c.base, params: c.params}
}

// probeCall returns a call of the probe template c to send: its base is
// kept, since a probe that fails may become the template of the next
// outage's probes (peek).
func (c *call) probeCall() *call {
	return &call{ctx: context.Background(), alg: c.alg, key: c.key, args: c.args, base: c.base, params: c.params, done: make(chan struct{}), probe: true}
}

// probeLoop probes sh until it answers or the Store closes: after 5 ms,
// then twice as long each time, up to ProbeMax. In a Cluster it first
// rereads the slot map: a shard whose slots moved to another master (a
// failover) is left, its requests now going to that master.
func (s *Store) probeLoop(sh *shard) {
	interval := minProbe
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		sh.nextProbe.Store(time.Now().Add(interval).UnixNano())
		select {
		case <-s.closing:
			return
		case <-t.C:
		}
		if !sh.down.Load() {
			return
		}
		sh.mu.Lock()
		probe := sh.probe
		sh.mu.Unlock()
		if s.cluster != nil && probe != nil {
			s.reload()
			if m, err := s.cluster.MasterForKey(context.Background(), probe.key[0]); err == nil && m.Options().Addr != sh.addr {
				s.up(sh, "its slots are served by "+m.Options().Addr)
				return
			}
		}
		if probe != nil {
			s.stats.probes.Add(1)
			c := probe.probeCall()
			s.enqueue(sh, c)
			<-c.done // within the timeout of its pipeline
			if !sh.down.Load() {
				return
			}
		}
		interval = min(2*interval, s.probeMax)
		t.Reset(interval)
	}
}

// errShed is matched by the error of a request refused at once because
// its shard is down.
var errShed = errors.New("the shard is down")

type shedError struct{ error }

func (e shedError) Unwrap() []error { return []error{e.error, errShed} }

// retryAfter returns when a request on r's bucket that Redis could not
// decide may try again (shard.retryAfter).
func (s *Store) retryAfter(ctx context.Context, r *Request) time.Duration {
	sh, err := s.shardFor(ctx, string(AppendKey(nil, s.prefix, &r.Limit, r.Key)))
	if err != nil {
		return minProbe
	}
	return sh.retryAfter()
}

// retryAfter is when a request of a shard that is down may try again:
// the time to its next probe (at least 1 ms), or, for a shard that is up
// (a request Redis did not answer in time), the first probe interval.
func (sh *shard) retryAfter() time.Duration {
	if !sh.down.Load() {
		return minProbe
	}
	return max(time.Duration(sh.nextProbe.Load()-time.Now().UnixNano()), time.Millisecond)
}

// name is the shard's name in logs: its address, or "redis".
func (sh *shard) name() string {
	if sh.addr == "" {
		return "redis"
	}
	return sh.addr
}
