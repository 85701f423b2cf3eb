package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/errtext"
	"github.com/sluicehq/sluice/internal/global"
	"github.com/sluicehq/sluice/internal/rls"
)

// Envoy's rate limit service: ShouldRateLimit over gRPC, on a Unix socket
// (Config.RLSSocket) and, if set, a loopback TCP address (Config.RLSAddr).
// Package rls matches a request's descriptors to the config file's rules;
// this file decides them with the engine (and Redis, for a global limit)
// and answers.

// rlsService answers ShouldRateLimit.
type rlsService struct {
	rlspb.UnimplementedRateLimitServiceServer
	s *server
}

// startRLS listens on the rate limit service's socket and address, if the
// configuration sets them, and serves them until stop is called.
func (s *server) startRLS() (stop func(), err error) {
	c := s.cfg
	if c.RLSSocket == "" && c.RLSAddr == "" {
		return func() {}, nil
	}
	var lns []*listener
	closeAll := func() {
		for _, l := range lns {
			l.ln.Close()
			l.close()
		}
	}
	if c.RLSSocket != "" {
		l, err := listenUnix(c.RLSSocket, c.SocketMode)
		if err != nil {
			return nil, err
		}
		lns = append(lns, l)
	}
	if c.RLSAddr != "" {
		ln, err := net.Listen("tcp", c.RLSAddr)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("server: listen on %s: %w", c.RLSAddr, err)
		}
		lns = append(lns, &listener{ln: ln})
	}
	if s.named().set.RLS().Len() == 0 {
		s.log.Warn("the rate limit service has no domains (the config file has no rls section): it answers every request OK")
	}
	// Stream workers: a request is decided on a goroutine that lives on,
	// whose stack has grown to what a decision needs, not on a new one
	// whose stack grows and is copied at every request.
	g := grpc.NewServer(grpc.MaxConcurrentStreams(1024), grpc.NumStreamWorkers(uint32(max(4, runtime.GOMAXPROCS(0)))))
	rlspb.RegisterRateLimitServiceServer(g, &rlsService{s: s})
	done := make(chan struct{}, len(lns))
	for _, l := range lns {
		go func() {
			defer func() { done <- struct{}{} }()
			g.Serve(admitting{Listener: l.ln, s: s, l: l})
		}()
	}
	return func() {
		stopped := make(chan struct{})
		go func() { g.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(s.cfg.DrainTimeout):
			g.Stop()
		}
		for range lns {
			<-done
		}
		for _, l := range lns {
			l.close()
		}
	}, nil
}

// admitting serves only the peers the configuration allows (AllowUIDs,
// AllowGIDs), as the other sockets do.
type admitting struct {
	net.Listener
	s *server
	l *listener
}

func (a admitting) Accept() (net.Conn, error) {
	for {
		c, err := a.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if _, _, ok := a.s.admit(c, &listener{path: a.l.path}); ok {
			return c, nil
		}
		a.s.stats.peersDenied.Add(1)
		if a.s.rec != nil {
			a.s.rec.PeerDenied()
		}
		c.Close()
	}
}

// ShouldRateLimit decides every descriptor of req, all or nothing.
func (r *rlsService) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	s := r.s
	n := s.named()
	items, err := n.set.RLS().Match(make([]rls.Item, 0, len(req.GetDescriptors())), req)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, errtext.String(err))
	}
	now := s.now()
	res := make([]rls.Result, len(items))
	if err := s.decideRLS(ctx, n, items, res, now); err != nil {
		return nil, status.Error(rlsCode(err), errtext.String(err))
	}
	return rls.Respond(items, res, now, s.cfg.RLSHeaders), nil
}

// rlsCode is the gRPC code of a decision that failed.
func rlsCode(err error) codes.Code {
	switch {
	case errors.Is(err, engine.ErrTableFull):
		return codes.ResourceExhausted
	case errors.Is(err, engine.ErrContended), errors.Is(err, engine.ErrLocked), errors.Is(err, global.ErrUnavailable),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return codes.Unavailable
	case errors.Is(err, errUnknownName), errors.Is(err, errNoGlobal):
		return codes.FailedPrecondition
	}
	return codes.Internal
}

// decideRLS decides the items, writing each one's Result. The items that
// consume (neither shadow nor refund) are decided all or nothing: the local
// ones with one engine.Multi, the global ones one by one in Redis first,
// their tokens given back if the request is then over a limit. A refund is
// applied only if the request is admitted; a shadow item is decided on its
// own, whatever the others say.
func (s *server) decideRLS(ctx context.Context, n *namedLimits, items []rls.Item, res []rls.Result, now int64) error {
	t := engine.Time{Now: now, At: now, Wait: s.cfg.LockWait}
	var (
		limits        [rls.MaxDescriptors]*engine.Limit
		named         [rls.MaxDescriptors]*namedLimit
		multi         [rls.MaxDescriptors]engine.Item
		multiOf       [rls.MaxDescriptors]int // the item of each Multi item
		taken         []int                   // the global items that consumed
		nm            int
		admitted      = true
		start         time.Time
		ds            [rls.MaxDescriptors]bucket.Decision
		answerBy      = func() time.Time { return s.rlsAnswerBy(ctx) }
		consumes      = func(it *rls.Item) bool { return !it.Shadow && !it.Refund }
		globalDecided = func(i int, d bucket.Decision, err error) error {
			res[i].Decision = d
			if err == nil {
				s.record(named[i], res[i].Limit.Algorithm, d.Allowed, false, start)
			}
			return err
		}
	)
	if s.rec != nil {
		start = time.Now()
	}
	for i := range items {
		it := &items[i]
		if it.Kind == rls.Blocked && it.Hits > 0 && consumes(it) {
			admitted = false
		}
		if !it.Decides() {
			continue
		}
		if it.Kind == rls.Window {
			limits[i] = &it.Window
			res[i].Limit = it.Window.Bucket()
			continue
		}
		nl := n.m[it.Rule.Limit]
		if nl == nil {
			return fmt.Errorf("%w: %q is not in the config file", errUnknownName, it.Rule.Limit)
		}
		named[i], limits[i] = nl, &nl.cfg.Engine
		it.Shadow = it.Shadow || nl.cfg.Shadow // the limit's own shadow: true
		res[i].Limit, res[i].Name = &nl.cfg.Bucket, nl.cfg.Name
		if nl.cfg.Scope == config.Global && s.global == nil {
			return errNoGlobal
		}
	}
	// The global items that consume, in Redis, one by one.
	for i := range items {
		it := &items[i]
		if !it.Decides() || !consumes(it) || named[i] == nil || named[i].cfg.Scope != config.Global {
			continue
		}
		cost := it.Hits
		if !admitted {
			cost = 0
		}
		var d bucket.Decision
		var err error
		if cost == 0 {
			d, _, err = s.global.peek(named[i].cfg, string(it.Key), answerBy)
			d.Allowed = it.Hits == 0 || d.Remaining >= it.Hits // what the request would have had
		} else {
			d, _, err = s.global.acquire(named[i].cfg, string(it.Key), cost, 0, answerBy)
		}
		if err := globalDecided(i, d, err); err != nil {
			s.giveBack(items, named[:], taken, answerBy)
			return err
		}
		if cost > 0 && d.Allowed {
			taken = append(taken, i)
		}
		admitted = admitted && d.Allowed
	}
	// The local items that consume, all or nothing.
	for i := range items {
		it := &items[i]
		if it.Decides() && consumes(it) && (named[i] == nil || named[i].cfg.Scope == config.Local) {
			multi[nm] = engine.Item{Key: it.Key, Limit: limits[i], Cost: it.Hits}
			multiOf[nm] = i
			nm++
		}
	}
	if nm > 0 {
		if !admitted {
			for j := range nm {
				multi[j].Cost = 0 // report, consume nothing
			}
		}
		var got []bucket.Decision
		var ok bool
		var err error
		if nm == 1 { // the same decision, without Multi's sorting and reservations
			ds[0] = bucket.Decision{}
			err = s.engine.Acquire(&ds[0], multi[0].Key, multi[0].Limit, multi[0].Cost, t, 0)
			got, ok = ds[:1], ds[0].Allowed
		} else {
			got, ok, err = s.engine.Multi(ds[:0], multi[:nm], t)
		}
		if err != nil {
			s.giveBack(items, named[:], taken, answerBy)
			return err
		}
		if !admitted {
			for j := range got {
				got[j].Allowed = items[multiOf[j]].Hits == 0 || got[j].Remaining >= items[multiOf[j]].Hits
			}
		}
		admitted = admitted && ok
		for j, d := range got {
			i := multiOf[j]
			if !admitted && d.Allowed && multi[j].Cost > 0 {
				d.Remaining = min(d.Remaining+multi[j].Cost, d.Limit) // nothing was consumed
			}
			res[i].Decision = d
			s.record(named[i], res[i].Limit.Algorithm, d.Allowed, false, start)
		}
	}
	if !admitted {
		s.giveBack(items, named[:], taken, answerBy)
		for _, i := range taken {
			d := &res[i].Decision
			d.Remaining = min(d.Remaining+items[i].Hits, d.Limit) // what it has, given back
		}
	}
	// Refunds (applied if admitted) and shadow items (decided on their own).
	for i := range items {
		it := &items[i]
		if !it.Decides() || consumes(it) {
			continue
		}
		var d bucket.Decision
		var err error
		g := named[i] != nil && named[i].cfg.Scope == config.Global
		switch {
		case it.Refund && admitted && g:
			d, _, err = s.global.refund(named[i].cfg, string(it.Key), it.Hits, answerBy)
			d.Allowed = true
		case it.Refund && admitted:
			err = s.engine.Refund(&d, it.Key, limits[i], it.Hits, t, 0)
			d.Allowed = true
		case it.Refund && g:
			d, _, err = s.global.peek(named[i].cfg, string(it.Key), answerBy)
			d.Allowed = true
		case it.Refund:
			err = s.engine.Peek(&d, it.Key, limits[i], t)
			d.Allowed = true
		case g:
			d, _, err = s.global.acquire(named[i].cfg, string(it.Key), it.Hits, 0, answerBy)
		default:
			err = s.engine.Acquire(&d, it.Key, limits[i], it.Hits, t, 0)
		}
		if err != nil {
			return err
		}
		res[i].Decision = d
		if it.Shadow {
			s.record(named[i], res[i].Limit.Algorithm, d.Allowed, !d.Allowed, start)
			if !d.Allowed {
				s.shadowDenied(named[i])
			}
		}
	}
	return nil
}

// giveBack refunds the tokens the global items in taken consumed, for a
// request that is over another limit. A refund that fails is logged: the
// tokens stay spent.
func (s *server) giveBack(items []rls.Item, named []*namedLimit, taken []int, by func() time.Time) {
	for _, i := range taken {
		if _, _, err := s.global.refund(named[i].cfg, string(items[i].Key), items[i].Hits, by); err != nil {
			s.log.Warn("could not give back a global limit's tokens for a rate limit service request over another limit",
				"limit", named[i].cfg.Name, "err", errtext.String(err))
		}
	}
}

// rlsAnswerBy is when Redis must have answered a global limit's part of a
// request: a quarter of the caller's deadline before it, if it has one,
// else 4/5 of the Redis timeout from now.
func (s *server) rlsAnswerBy(ctx context.Context) time.Time {
	now := time.Now()
	if d, ok := ctx.Deadline(); ok {
		return d.Add(-min(max(d.Sub(now)/4, time.Millisecond), 25*time.Millisecond))
	}
	return now.Add(s.global.timeout * 4 / 5)
}
