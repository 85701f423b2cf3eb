package global

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
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
