package server

import (
	"errors"
	"time"

	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/proto"
)

// Named limits that list several limits ("5 per second and 1,000 per day"
// under one name): every operation on the name applies to each of them, on
// the one key, and the answer is their combination (engine.Combine). A
// global list's are decided in Redis (globalmulti.go).

var (
	// errListLease answers a LEASE or RELEASE of a named list.
	errListLease = errors.New("a list of limits cannot be leased: lease a concurrency limit of its own name")
	// errListMulti answers a MULTI that names a list as an item.
	errListMulti = errors.New("a MULTI item cannot name a list of limits: name each limit, or acquire the list on its own")
)

// listScratch holds a list's items and decisions between requests.
type listScratch struct {
	items [proto.MaxMulti]engine.Item
	ds    []bucket.Decision
}

// listOp answers an operation on the named list nl: an ACQUIRE decides
// every limit of the list all or nothing (engine.Multi: nothing is
// consumed unless each allows), a PEEK, REFUND or RESET applies to each.
// The decision is the limits' combination, which reports the limit that
// denied (or the one with the least remaining): its limit and retry time,
// the least remaining of all.
func (s *server) listOp(b []byte, op *proto.Op, nl *namedLimit, c *conn, req *engine.Request, start time.Time) []byte {
	parts, sc := nl.parts, &c.list
	ds := sc.ds[:0]
	global := nl.cfg.Scope == config.Global // decided in Redis (globalmulti.go)
	outage := proto.OutageNone
	switch op.Code {
	case proto.OpLease, proto.OpRelease:
		return c.fail(b, op.Code, errListLease)
	case proto.OpAcquire:
		for i := range parts {
			sc.items[i] = engine.Item{Key: op.Key, Limit: &parts[i], Cost: op.N, Flags: req.Flags}
		}
		var err error
		if global {
			ds, outage, err = s.globalListAcquire(ds, op, nl, c, req)
		} else {
			ds, _, err = s.engine.Multi(ds, sc.items[:len(parts)], req.Time)
		}
		if err != nil {
			sc.ds = ds
			s.recordError(nl, &parts[0], err)
			return c.fail(b, op.Code, err)
		}
	default: // PEEK, REFUND, RESET: each limit on its own
		existed := false
		res := &c.res
		for i := range parts {
			r := *req
			r.Limit, r.Shadow = &parts[i], false
			if global {
				r.Remote = c.listRemote(op, nl, i)
			}
			if err := s.engine.Do(&r, res); err != nil {
				sc.ds = ds
				return c.fail(b, op.Code, err)
			}
			if res.Outage != proto.OutageNone {
				outage = res.Outage // the list's one policy
			}
			existed = existed || res.Existed
			ds = append(ds, res.Decision)
		}
		if op.Code == proto.OpReset {
			sc.ds = ds
			return proto.AppendReset(b, existed)
		}
	}
	sc.ds = ds
	d, which := engine.Combine(ds)
	shadowed := op.Code == proto.OpAcquire && req.Shadow && engine.Shadow(&d)
	b = c.answer(b, op, nl, parts[which].Bucket().Algorithm, &d, shadowed, start)
	return c.markGlobal(b, nl, outage)
}
