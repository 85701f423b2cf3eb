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
	"github.com/sluicehq/sluice/proto"
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
	g := grpc.NewServer(grpc.MaxConcurrentStreams(1024), grpc.NumStreamWorkers(uint32(max(64, 8*runtime.GOMAXPROCS(0)))))
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

// rlsCode is the gRPC code of a decision that failed: the wire status the
// other front ends answer it with (statusFor), in gRPC's words. Redis not
// answering, or the caller giving up, is Unavailable; an error of no
// status of its own, Internal.
func rlsCode(err error) codes.Code {
	if errors.Is(err, global.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return codes.Unavailable
	}
	switch statusFor(err) {
	case proto.StatusTableFull:
		return codes.ResourceExhausted
	case proto.StatusContended:
		return codes.Unavailable
	case proto.StatusInvalidLimit, proto.StatusUnsupported: // a rule names a limit this sidecar cannot decide
		return codes.FailedPrecondition
	}
	return codes.Internal
}

// decideRLS decides the items, writing each one's Result, each decision
// on the one request path (engine.Do; a global limit's with a globalCall
// as its Remote). The items that consume (neither shadow nor refund) are
// decided all or nothing: the global ones one by one in Redis first, then
// the local ones with one engine.Multi, the global ones' tokens given back
// if the request is over a limit. A refund is applied only if the request
// is admitted; a shadow item is decided on its own, whatever the others
// say.
func (s *server) decideRLS(ctx context.Context, n *namedLimits, items []rls.Item, res []rls.Result, now int64) error {
	r := &rlsRequest{s: s, ctx: ctx, items: items, res: res, admitted: true,
		t: engine.Time{Now: now, At: now, Wait: s.cfg.LockWait}}
	if s.rec != nil {
		r.start = time.Now()
	}
	if err := r.resolve(n); err != nil {
		return err
	}
	if err := r.globals(); err != nil {
		r.giveBack()
		return err
	}
	if err := r.locals(); err != nil {
		r.giveBack()
		return err
	}
	if !r.admitted {
		r.giveBack()
	}
	return r.apart()
}

// rlsRequest is one request's items being decided.
type rlsRequest struct {
	s        *server
	ctx      context.Context // the gRPC call's: when Redis must have answered
	items    []rls.Item
	res      []rls.Result
	t        engine.Time
	start    time.Time   // for the metrics' durations; zero if not measured
	admitted bool        // no consuming item is over its limit (so far)
	call     *globalCall // the Remote of the global items; nil until one is decided
	limits   [rls.MaxDescriptors]*engine.Limit
	named    [rls.MaxDescriptors]*namedLimit // nil for a fixed window
	taken    []int                           // the global items that consumed
}

// consumes reports whether an item takes part in the all or nothing.
func consumes(it *rls.Item) bool { return !it.Shadow && !it.Refund }

// global reports whether item i is decided in Redis.
func (r *rlsRequest) global(i int) bool {
	return r.named[i] != nil && r.named[i].cfg.Scope == config.Global
}

// do decides op (ACQUIRE of n, PEEK or REFUND of n) on item i's bucket with
// engine.Do: in the table, or in Redis for a global limit. shadow answers
// a denied ACQUIRE as allowed (Result.Shadowed).
func (r *rlsRequest) do(i int, op proto.Opcode, n int64, shadow bool) (engine.Result, error) {
	req := engine.Request{Op: op, Key: r.items[i].Key, Limit: r.limits[i], N: n, Shadow: shadow, Time: r.t}
	if r.global(i) {
		if r.call == nil {
			r.call = &globalCall{g: r.s.global, ctx: r.ctx}
		}
		r.call.l = r.named[i].cfg
		req.Remote = r.call
	}
	var res engine.Result
	err := r.s.engine.Do(&req, &res)
	return res, err
}

// resolve finds each item's limit, and whether a blocked item denies the
// request.
func (r *rlsRequest) resolve(n *namedLimits) error {
	for i := range r.items {
		it := &r.items[i]
		if it.Kind == rls.Blocked && it.Hits > 0 && consumes(it) {
			r.admitted = false
		}
		switch it.Kind {
		case rls.Window:
			r.limits[i], r.res[i].Limit = &it.Window, it.Window.Bucket()
		case rls.Named:
			nl := n.m[it.Rule.Limit]
			if nl == nil {
				return fmt.Errorf("%w: %q is not in the config file", errUnknownName, it.Rule.Limit)
			}
			if nl.cfg.Scope == config.Global && r.s.global == nil {
				return errNoGlobal
			}
			r.named[i], r.limits[i] = nl, &nl.cfg.Engine
			it.Shadow = it.Shadow || nl.cfg.Shadow // the limit's own shadow: true
			r.res[i].Limit, r.res[i].Name = &nl.cfg.Bucket, nl.cfg.Name
		}
	}
	return nil
}

// globals decides the global items that consume, in Redis, one by one;
// once the request is denied, the rest are only looked at.
func (r *rlsRequest) globals() error {
	for i := range r.items {
		it := &r.items[i]
		if !it.Decides() || !consumes(it) || !r.global(i) {
			continue
		}
		peek := it.Hits == 0 || !r.admitted
		op := proto.OpAcquire
		if peek {
			op = proto.OpPeek
		}
		out, err := r.do(i, op, it.Hits, false)
		if err != nil {
			return err
		}
		d := out.Decision
		if peek {
			d.Allowed = it.Hits == 0 || d.Remaining >= it.Hits // what the request would have had
		} else if d.Allowed {
			r.taken = append(r.taken, i)
		}
		r.res[i].Decision = d
		r.s.record(r.named[i], r.named[i].cfg.Bucket.Algorithm, d.Allowed, false, r.start)
		r.admitted = r.admitted && d.Allowed
	}
	return nil
}

// locals decides the local items that consume, all or nothing: one
// engine.Multi (one engine.Do for one item), every cost 0 if the request
// is denied already.
func (r *rlsRequest) locals() error {
	var (
		multi [rls.MaxDescriptors]engine.Item
		of    [rls.MaxDescriptors]int // the item of each Multi item
		ds    [rls.MaxDescriptors]bucket.Decision
		n     int
	)
	for i := range r.items {
		if it := &r.items[i]; it.Decides() && consumes(it) && !r.global(i) {
			multi[n], of[n] = engine.Item{Key: it.Key, Limit: r.limits[i], Cost: it.Hits}, i
			if !r.admitted {
				multi[n].Cost = 0 // report, consume nothing
			}
			n++
		}
	}
	if n == 0 {
		return nil
	}
	got, ok := ds[:n], false
	var err error
	if n == 1 { // the same decision, without Multi's sorting and reservations
		var out engine.Result
		out, err = r.do(of[0], proto.OpAcquire, multi[0].Cost, false)
		ds[0], ok = out.Decision, out.Decision.Allowed
	} else {
		got, ok, err = r.s.engine.Multi(ds[:0], multi[:n], r.t)
	}
	if err != nil {
		return err
	}
	denied := !r.admitted
	r.admitted = r.admitted && ok
	for j := range got {
		d, it := got[j], &r.items[of[j]]
		if denied {
			d.Allowed = it.Hits == 0 || d.Remaining >= it.Hits // what the request would have had
		} else if !r.admitted && d.Allowed {
			d.Remaining = min(d.Remaining+it.Hits, d.Limit) // nothing was consumed
		}
		r.res[of[j]].Decision = d
		r.s.record(r.named[of[j]], r.res[of[j]].Limit.Algorithm, d.Allowed, false, r.start)
	}
	return nil
}

// apart decides the refunds (applied if the request is admitted, else
// only looked at) and the shadow items (decided on their own, a denial
// answered as allowed).
func (r *rlsRequest) apart() error {
	for i := range r.items {
		it := &r.items[i]
		if !it.Decides() || consumes(it) {
			continue
		}
		op := proto.OpAcquire
		switch {
		case it.Refund && r.admitted:
			op = proto.OpRefund
		case it.Refund:
			op = proto.OpPeek
		}
		out, err := r.do(i, op, it.Hits, !it.Refund)
		if err != nil {
			return err
		}
		d := out.Decision
		if it.Refund {
			d.Allowed = true
		} else {
			r.s.record(r.named[i], r.res[i].Limit.Algorithm, d.Allowed, out.Shadowed, r.start)
			if out.Shadowed {
				r.s.shadowDenied(r.named[i])
			}
		}
		r.res[i].Decision = d
	}
	return nil
}

// giveBack refunds the tokens the global items consumed, for a request
// that is over another limit, and reports them as remaining. A refund that
// fails is logged: the tokens stay spent.
func (r *rlsRequest) giveBack() {
	for _, i := range r.taken {
		if _, err := r.do(i, proto.OpRefund, r.items[i].Hits, false); err != nil {
			r.s.log.Warn("could not give back a global limit's tokens for a rate limit service request over another limit",
				"limit", r.named[i].cfg.Name, "err", errtext.String(err))
		}
		d := &r.res[i].Decision
		d.Remaining = min(d.Remaining+r.items[i].Hits, d.Limit)
	}
	r.taken = nil
}
