package server

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/proto"
	"github.com/sluicehq/sluice/proto/resp"
)

// info answers INFO [section ...].
func (rc *respConn) info(args [][]byte) { rc.text(rc.s.info(args[1:], rc.at(rc.now))) }

// dbsize answers DBSIZE: the live buckets.
func (rc *respConn) dbsize([][]byte) {
	if n, err := rc.s.liveBuckets(rc.at(rc.now)); err != nil {
		rc.fail(err)
	} else {
		rc.out = resp.AppendInt(rc.out, n)
	}
}

// info is INFO's report, in Redis's "# Section" / "field:value" form: the
// sections named in args (any case), or every one if none is named (or
// "default", "all", "everything"). An unknown section adds nothing.
func (s *server) info(args [][]byte, now engine.Time) string {
	want := func(section string) bool {
		if len(args) == 0 {
			return true
		}
		for _, a := range args {
			if is(a, section) || is(a, "default") || is(a, "all") || is(a, "everything") {
				return true
			}
		}
		return false
	}
	snap := s.snapshot(false)
	var b strings.Builder
	w := func(k string, v any) { fmt.Fprintf(&b, "%s:%v\r\n", k, v) }
	section := func(name string) bool {
		if !want(name) {
			return false
		}
		if b.Len() > 0 {
			b.WriteString("\r\n")
		}
		b.WriteString("# " + strings.ToUpper(name[:1]) + name[1:] + "\r\n")
		return true
	}
	if section("server") {
		w("redis_version", redisVersion)
		w("sluice_protocol_version", proto.Version)
		w("redis_mode", "standalone")
		w("process_id", pid)
	}
	for _, name := range []string{"clients", "memory", "stats"} {
		if section(name) {
			snap.Info(name, func(k string, v uint64) { w(k, v) })
		}
	}
	if section("keyspace") {
		// As DBSIZE; Redis lists no empty database (nor a count that gave
		// up waiting for a lock).
		if n, err := s.liveBuckets(now); err == nil && n > 0 {
			w("db0", "keys="+strconv.FormatInt(n, 10)+",expires=0,avg_ttl=0")
		}
	}
	return b.String()
}

// liveBuckets counts the buckets that hold information at t.Now: live and
// not yet back to their fresh state (what DBSIZE reports).
func (s *server) liveBuckets(t engine.Time) (int64, error) {
	n, err := s.engine.Live(t)
	return int64(n), err
}
