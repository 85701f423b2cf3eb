package server

import (
	"regexp"
	"testing"
	"time"

	"github.com/sluicehq/sluice/proto"
)

// goNames matches what a user should never read in an error: a package
// prefix ("proto: malformed") or a Go identifier ("MaxLogLimit",
// "proto.ErrMalformed").
var goNames = regexp.MustCompile(`\b(shm|proto|server|engine|config|global|bucket|slog|redis|sluice): |\b(Max|Min|Err|Default)[A-Z]\w*|\b[a-z]+\.[A-Z]\w+`)

// Ensure the error replies on the wire are sentences for people, for the
// native protocol and the Redis protocol alike: the malformed frame's
// "proto: malformed" and the sliding log's "(MaxLogLimit)" reached clients.
func TestServer_errorTexts(t *testing.T) {
	sc := start(t, Config{})
	key := []byte("k")
	for name, op := range map[string]func([]byte) []byte{
		"unknown opcode": func(b []byte) []byte { return append(b, 200) },
		"truncated":      func(b []byte) []byte { return append(b, byte(proto.OpAcquire), 0) },
		"no algorithm": func(b []byte) []byte {
			return proto.AppendItem(b, proto.OpAcquire, 0, proto.Limit{}, 1, 0, key)
		},
		"sliding log cap": func(b []byte) []byte {
			return proto.AppendItem(b, proto.OpAcquire, 0, proto.SlidingLogLimit(5000, time.Second), 1, 0, key)
		},
		"zero rate": func(b []byte) []byte {
			return proto.AppendItem(b, proto.OpAcquire, 0, proto.GCRALimit(1, 0, time.Second), 1, 0, key)
		},
		"empty key": func(b []byte) []byte {
			return proto.AppendItem(b, proto.OpAcquire, 0, proto.GCRALimit(1, 1, time.Second), 1, 0, nil)
		},
		"negative cost": func(b []byte) []byte {
			return proto.AppendItem(b, proto.OpAcquire, 0, proto.GCRALimit(1, 1, time.Second), -1, 0, key)
		},
		"lease of a gcra": func(b []byte) []byte { return proto.AppendLease(b, 0, proto.GCRALimit(1, 1, time.Second), key) },
		"acquire of a concurrency limit": func(b []byte) []byte {
			return proto.AppendItem(b, proto.OpAcquire, 0, proto.ConcurrencyLimit(1, time.Second), 1, 0, key)
		},
	} {
		r := dial(t, sc).do(op)
		if r.Status == proto.StatusOK || len(r.Message) == 0 || goNames.Match(r.Message) {
			t.Errorf("%s: %v %q, want an error in words", name, r.Status, r.Message)
		}
	}
	// A frame of a version the server does not speak.
	c := dial(t, sc)
	b, start := proto.BeginFrameVersion(nil, 99, proto.KindRequest, 1)
	c.c.Write(proto.EndFrame(proto.AppendPing(b), start, 1))
	if _, rs := c.recv(); len(rs) != 1 || goNames.Match(rs[0].Message) {
		t.Errorf("bad version: %q", rs[0].Message)
	}

	rdb := redisClient(t, sc)
	for _, cmd := range [][]any{
		{"CL.THROTTLE", "k", 1, 0, 1},
		{"CL.THROTTLE", "k", 1, 1, 0},
		{"RL.REDUCE", "k", 0, 1},
		{"RL.REDUCE", "", 10, 1},
		{"RL.REDUCE", "k", 10, 1, "TAKE", -1},
	} {
		err := rdb.Do(t.Context(), cmd...).Err()
		if err == nil || goNames.MatchString(err.Error()) {
			t.Errorf("%v: %v, want an error in words", cmd, err)
		}
	}
}
