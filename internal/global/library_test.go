package global

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/bucket"
	"github.com/sluicehq/sluice/internal/redistest"
)

// Ensure that a Store loads the function library into a Redis that lacks
// it (a new one, or one whose functions were flushed) and sends the calls
// again; that the library holds a function per algorithm; and that a
// bucket a function wrote is the bucket a script reads, and back.
func TestStoreLibrary(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	s := newStore(t, Options{Addrs: []string{srv.Addr}})
	ctx := context.Background()
	l := tokenBucket(100, hour)
	decide := func(want int64) {
		t.Helper()
		d, err := s.Decide(ctx, Request{Limit: l, Key: "k", Cost: 1})
		if err != nil || !d.Allowed || d.Remaining != want {
			t.Fatalf("%+v, %v; want allowed with %d remaining", d, err, want)
		}
	}
	decide(99)
	libs, err := rdb.FunctionList(ctx, redis.FunctionListQuery{}).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(libs) != 1 || libs[0].Name != libraryName || len(libs[0].Functions) != len(algorithms)+2 {
		t.Fatalf("Redis holds %+v, want the library %s with %d functions (one per algorithm, the multi and the batch)", libs, libraryName, len(algorithms)+2)
	}
	if st := s.Stats(); st.ScriptLoads != 1 {
		t.Fatalf("%d loads, want 1", st.ScriptLoads)
	}
	decide(98)
	if err := rdb.FunctionFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	decide(97)
	if st := s.Stats(); st.ScriptLoads != 2 || st.Errors != 0 {
		t.Fatalf("stats %+v: want 2 loads and no errors", st)
	}
	if d, err := Eval(ctx, rdb, s.Prefix(), Request{Limit: l, Key: "k", Cost: 1}); err != nil || d.Remaining != 96 {
		t.Fatalf("the script after the function: %+v, %v; want 96 remaining", d, err)
	}
	decide(95)
}

// Ensure that a Store on a Redis that refuses functions decides with
// scripts: a Redis without FCALL (before 7.0; here renamed away), an ACL
// that denies FCALL, and one that runs functions but may not load them. It
// says so once in its log.
func TestStoreScripts(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string // redis-server's
		acl  []string // the Store's user's rules, if any
	}{
		{"no FCALL", []string{"--rename-command", "FCALL", ""}, nil},
		{"ACL without functions", nil, []string{"-fcall", "-function"}},
		{"ACL without FUNCTION LOAD", nil, []string{"-function|load"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := redistest.Start(t, c.args...)
			ctx := context.Background()
			o := Options{Addrs: []string{srv.Addr}}
			if c.acl != nil {
				rules := append([]string{"on", ">pw", "~*", "+@all"}, c.acl...)
				if err := srv.Client(t).ACLSetUser(ctx, "limits", rules...).Err(); err != nil {
					t.Fatal(err)
				}
				o.Username, o.Password = "limits", "pw"
			}
			var mu sync.Mutex
			var logs bytes.Buffer
			o.Logger = slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))
			s := newStore(t, o)
			l := tokenBucket(100, hour)
			for i := range 5 {
				d, err := s.Decide(ctx, Request{Limit: l, Key: "k", Cost: 1})
				if err != nil || !d.Allowed || d.Remaining != 99-int64(i) {
					t.Fatalf("request %d: %+v, %v; want allowed with %d remaining", i, d, err, 99-i)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if n := strings.Count(logs.String(), "they run as scripts"); n != 1 || !s.scripts.Load() {
				t.Fatalf("%d warnings, scripts %v; want one and scripts:\n%s", n, s.scripts.Load(), logs.String())
			}
			t.Log(strings.TrimSpace(logs.String()))
		})
	}
}

// Ensure that a bucket holding something the scripts never write is an
// error that says so, as a function and as a script, and not a decision.
func TestScriptMalformed(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	s := newStore(t, Options{Addrs: []string{srv.Addr}})
	ctx := context.Background()
	l := tokenBucket(100, hour)
	key := string(AppendKey(nil, s.Prefix(), &l, "k"))
	for _, v := range []string{"garbage", "1 2", "1 2 3 4", "-1 2 0", "1  2 0", "1 2 0 "} {
		if err := rdb.Set(ctx, key, v, 0).Err(); err != nil {
			t.Fatal(err)
		}
		_, err := s.Decide(ctx, Request{Limit: l, Key: "k", Cost: 1})
		_, err2 := Eval(ctx, rdb, s.Prefix(), Request{Limit: l, Key: "k", Cost: 1})
		for _, err := range []error{err, err2} {
			if !errors.Is(err, ErrScript) || !strings.Contains(err.Error(), "is malformed") {
				t.Fatalf("a bucket holding %q: %v, want ErrScript saying it is malformed", v, err)
			}
		}
		if got := rdb.Get(ctx, key).Val(); got != v {
			t.Fatalf("the bucket holding %q now holds %q", v, got)
		}
	}
}

// Ensure only a refusal sends a Store to scripts for good: a load that
// timed out or lost its connection (the library is loaded on the next
// call that finds it missing), or that found the library loaded by
// another process, is not one.
func TestRefusesFunctions(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("ERR unknown command 'fcall', with args beginning with: "), true},
		{errors.New("ERR unknown command 'function', with args beginning with: 'load'"), true},
		{errors.New("NOPERM User u has no permissions to run the 'function|load' command"), true},
		{errors.New("NOPERM User u has no permissions to run the 'fcall' command"), true},
		{errors.New("ERR Library 'sluice_0123456789ab' already exists"), false},
		{&net.OpError{Op: "read", Net: "unix", Err: os.ErrDeadlineExceeded}, false},
		{context.DeadlineExceeded, false},
		{io.EOF, false},
	} {
		if got := refusesFunctions(c.err); got != c.want {
			t.Errorf("refusesFunctions(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// Ensure that a batch whose requests differ in shape (leases, with four
// more arguments, among acquires; limits of more and fewer parameters)
// decides each as its function does alone, and that a malformed batch is
// refused with an error.
func TestBatchShapes(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	loadLibrary(t, rdb)
	ctx := context.Background()
	tb, gcra := tokenBucket(100, hour), bucket.Limit{Algorithm: bucket.GCRA, Burst: 99, Count: 1, Period: hour}
	ptb, pgcra := prepare(&tb, 0), prepare(&gcra, 0)
	mk := func(prefix, key string, l bucket.Limit, op Op, cost int64) *call {
		p := ptb
		if l.Algorithm == bucket.GCRA {
			p = pgcra
		}
		r := Request{Limit: l, Key: key, Cost: cost, Op: op, At: t0}
		k, args := r.args(prefix, p, 4)
		if op == lease_ {
			args = append(args, int64(3), int64(0), "", int64(hour))
		}
		return &call{alg: p.g, key: [1]string{k}, args: args, params: p.params}
	}
	shapes := []struct {
		key  string
		l    bucket.Limit
		op   Op
		cost int64
	}{
		{"a", tb, Acquire, 7}, {"b", tb, lease_, 10}, {"a", tb, Acquire, 1}, {"c", tb, lease_, 20},
		{"g", gcra, lease_, 5}, {"g", gcra, Acquire, 1}, {"b", tb, Acquire, 5}, {"b", tb, Refund, 2},
	}
	var calls []*call
	for _, s := range shapes {
		calls = append(calls, mk("batch:", s.key, s.l, s.op, s.cost))
	}
	cmds := make([]*redis.Cmd, len(calls))
	splitBatch(ctx, rdb.FCall(ctx, batchFunction, calls[0].key[:], batchArgs(calls)...), cmds)
	for i, s := range shapes {
		c := mk("alone:", s.key, s.l, s.op, s.cost)
		want, err := rdb.FCall(ctx, c.alg.function, c.key[:], c.args...).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got, err := cmds[i].Result(); err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("request %d (%+v) in the batch: %v, %v; alone: %v", i, s, got, err, want)
		}
	}
	for _, argv := range [][]any{
		{1, "k", 1, "a"},                             // no cost
		{99, "k", 2, "a", 1},                         // no such algorithm
		{0, 4, 100, hour, 100, 0, 1, "k", 5, "a", 1}, // its arguments cut short
	} {
		err := rdb.FCall(ctx, batchFunction, []string{"k"}, argv...).Err()
		if err == nil || !strings.Contains(err.Error(), "malformed batch") {
			t.Fatalf("the batch %v: %v, want a malformed batch", argv, err)
		}
	}
}

// Ensure that a batch at Redis's clock decides at the TIME it read: a new
// bucket's refill clock, written by its first acquire, lies between the
// TIMEs read before and after the call.
func TestBatchRedisClock(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	loadLibrary(t, rdb)
	ctx := context.Background()
	l := tokenBucket(100, hour)
	p := prepare(&l, 0)
	var calls []*call
	for _, key := range []string{"a", "b"} {
		r := Request{Limit: l, Key: key, Cost: 1}
		k, args := r.args("clock:", p, 0)
		calls = append(calls, &call{alg: p.g, key: [1]string{k}, args: args, params: p.params})
	}
	before, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.FCall(ctx, batchFunction, calls[0].key[:], batchArgs(calls)...).Err(); err != nil {
		t.Fatal(err)
	}
	after, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range calls {
		v, err := rdb.Get(ctx, c.key[0]).Result()
		if err != nil {
			t.Fatal(err)
		}
		var tokens, at, zero int64
		if _, err := fmt.Sscanf(v, "%d %d %d", &tokens, &at, &zero); err != nil || tokens != 99 {
			t.Fatalf("the bucket at %s is %q (%v), want 99 tokens", c.key[0], v, err)
		}
		if at < before.UnixNano() || at > after.UnixNano() {
			t.Fatalf("the bucket at %s was decided at %d, not between the TIMEs %d and %d around its batch", c.key[0], at, before.UnixNano(), after.UnixNano())
		}
	}
}
