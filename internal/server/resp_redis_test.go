package server

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// rawConn sends commands and reads whole replies as raw bytes, whatever
// their RESP2 or RESP3 type.
type rawConn struct {
	t  testing.TB
	c  net.Conn
	rd *bufio.Reader
}

func dialRaw(t testing.TB, path string) *rawConn {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c, rd: bufio.NewReader(c)}
}

// do sends one command (its words) and returns its reply's bytes.
func (rc *rawConn) do(words ...string) string {
	rc.t.Helper()
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%d\r\n", len(words))
	for _, w := range words {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(w), w)
	}
	rc.c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := rc.c.Write(b.Bytes()); err != nil {
		rc.t.Fatal(err)
	}
	var out bytes.Buffer
	if err := readReply(rc.rd, &out); err != nil {
		rc.t.Fatalf("%q: %v (read %q)", words, err, out.String())
	}
	return out.String()
}

// readReply copies one whole reply from rd to out.
func readReply(rd *bufio.Reader, out *bytes.Buffer) error {
	line, err := rd.ReadString('\n')
	out.WriteString(line)
	if err != nil {
		return err
	}
	if len(line) < 3 || !strings.HasSuffix(line, "\r\n") {
		return fmt.Errorf("bad line %q", line)
	}
	n, _ := strconv.Atoi(line[1 : len(line)-2])
	switch line[0] {
	case '$', '=':
		if n < 0 {
			return nil
		}
		buf := make([]byte, n+2)
		_, err := io.ReadFull(rd, buf)
		out.Write(buf)
		return err
	case '*', '~':
		for range max(n, 0) {
			if err := readReply(rd, out); err != nil {
				return err
			}
		}
	case '%':
		for range 2 * n {
			if err := readReply(rd, out); err != nil {
				return err
			}
		}
	}
	return nil
}

// startRedis runs redis-server 7 on a Unix socket in a temporary directory,
// configured as Sluice describes itself (one database, no persistence).
func startRedis(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server is needed to compare replies with Redis (apt-get install redis-server)")
	}
	dir := shortDir(t)
	sock := filepath.Join(dir, "redis.sock")
	cmd := exec.Command(bin, "--port", "0", "--unixsocket", sock, "--save", "", "--appendonly", "no",
		"--databases", "1", "--dir", dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("redis-server did not listen within 10 s")
		}
	}
	rc := dialRaw(t, sock)
	if v := rc.do("INFO", "server"); !strings.Contains(v, "redis_version:7.") {
		t.Fatalf("the comparison needs Redis 7: %q", v)
	}
	return sock
}

// Differences that are not behaviour: who the server is, its version,
// connection ids, and the fields of a client's line Sluice has no use for.
var (
	helloFields = regexp.MustCompile(`(\$6\r\nserver\r\n|\$7\r\nversion\r\n)\$\d+\r\n[^\r]*\r\n`)
	idField     = regexp.MustCompile(`(\$2\r\nid\r\n):\d+\r\n`)
)

func normalize(cmd, reply string) string {
	switch {
	case strings.EqualFold(cmd, "hello"):
		reply = helloFields.ReplaceAllString(reply, "${1}X\r\n")
		reply = idField.ReplaceAllString(reply, "${1}:N\r\n")
	case strings.EqualFold(cmd, "client id"):
		reply = ":N\r\n"
	case strings.HasPrefix(strings.ToLower(cmd), "config get "):
		// Redis lists the parameters in its hash table's order.
		header, rest, _ := strings.Cut(reply, "\r\n")
		lines := strings.Split(strings.TrimSuffix(rest, "\r\n"), "\r\n")
		var pairs []string
		for i := 0; i+3 < len(lines); i += 4 {
			pairs = append(pairs, strings.Join(lines[i:i+4], "\r\n")+"\r\n")
		}
		sort.Strings(pairs)
		reply = header + "\r\n" + strings.Join(pairs, "")
	}
	return reply
}

// Ensure Sluice answers the connection, transaction and tooling commands
// byte for byte as redis-server 7 does (run side by side, on the same
// scripts), in RESP2 and RESP3. The rate-limit commands are Sluice's own
// and are checked against smyte/ratelimit's and redis-cell's replies
// elsewhere. (CLIENT SETINFO, which clients send on connecting, is Redis
// 7.2's; it is checked with CLIENT INFO below.)
func TestRESP_sameAsRedis(t *testing.T) {
	redisSock := startRedis(t)
	sc := start(t, Config{})
	scripts := [][][]string{
		{ // the handshake of redis-py 8 and go-redis v9, then the protocol's errors
			{"HELLO", "3"}, {"PING"}, {"ECHO", "hi"},
			{"HELLO"}, {"HELLO", "2"}, {"HELLO", "4"}, {"HELLO", "1"}, {"HELLO", "x"}, {"HELLO", "3", "FOO"},
			{"HELLO", "3", "AUTH", "default"}, {"HELLO", "3", "AUTH", "nobody", "pw"},
			{"HELLO", "3", "AUTH", "default", "pw", "SETNAME", "app-1"}, {"CLIENT", "GETNAME"},
			{"HELLO", "2", "SETNAME", "bad name"}, {"CLIENT", "GETNAME"},
		},
		{ // RESP3 nulls and maps
			{"HELLO", "3"}, {"CLIENT", "GETNAME"}, {"CONFIG", "GET", "save"}, {"CONFIG", "GET", "appendonly"},
			{"CONFIG", "GET", "save", "appendonly"}, {"CONFIG", "GET", "nosuch"}, {"COMMAND", "INFO", "nosuch"},
			{"COMMAND", "DOCS", "nosuch"},
		},
		{ // RESP2 replies of the tooling commands
			{"CONFIG", "GET", "save"}, {"CONFIG", "GET", "appendonly"}, {"CONFIG", "GET", "databases"},
			{"CONFIG", "GET", "nosuch"}, {"CONFIG", "GET", "save", "save"}, {"CONFIG", "GET"}, {"CONFIG"},
			{"CONFIG", "FOO"}, {"CONFIG", "SET", "foo", "bar"}, {"CONFIG", "SET", "foo"},
			{"CLIENT", "ID"}, {"CLIENT", "ID", "x"}, {"CLIENT", "GETNAME"}, {"CLIENT", "SETNAME", "w-1"},
			{"CLIENT", "GETNAME"}, {"CLIENT", "SETNAME", ""}, {"CLIENT", "GETNAME"}, {"CLIENT", "SETNAME"},
			{"CLIENT", "SETNAME", "a b"}, {"CLIENT", "GETNAME", "x"}, {"CLIENT", "FOO"}, {"CLIENT"},
			{"CLIENT", "LIST", "TYPE", "foo"}, {"CLIENT", "LIST", "FOO"}, {"CLIENT", "LIST", "ID", "999999"},
			{"DBSIZE", "x"}, {"SELECT", "0"}, {"SELECT", "1"}, {"SELECT", "x"}, {"SELECT", "-1"}, {"SELECT"},
			{"AUTH", "pw"}, {"AUTH", "default", "pw"}, {"AUTH", "nobody", "pw"}, {"AUTH", "a", "b", "c"},
			{"PING", "a", "b"}, {"ECHO"}, {"NOSUCH", "k", "x"}, {"UNWATCH"}, {"INFO", "keyspace"}, {"INFO", "nosuch"},
		},
		{ // transactions
			{"EXEC"}, {"DISCARD"}, {"MULTI"}, {"MULTI"}, {"PING"}, {"ECHO", "x"}, {"EXEC"},
			{"MULTI"}, {"EXEC"},
			{"MULTI"}, {"PING"}, {"DISCARD"}, {"EXEC"},
			{"MULTI"}, {"PING"}, {"NOSUCH", "a"}, {"PING"}, {"EXEC"}, {"EXEC"},
			{"MULTI"}, {"ECHO"}, {"EXEC"},
			{"MULTI"}, {"WATCH", "k"}, {"SELECT", "1"}, {"CLIENT", "GETNAME"}, {"UNWATCH"}, {"EXEC"},
			{"MULTI"}, {"DISCARD", "x"}, {"DISCARD"},
			{"MULTI"}, {"PING"}, {"EXEC", "x"}, {"EXEC"},
			{"MULTI"}, {"PING"}, {"MULTI", "x"}, {"EXEC"},
		},
		{ // a transaction in RESP3
			{"HELLO", "3"}, {"MULTI"}, {"CLIENT", "GETNAME"}, {"PING"}, {"CONFIG", "GET", "appendonly"}, {"EXEC"},
		},
	}
	for i, script := range scripts {
		r, s := dialRaw(t, redisSock), dialRaw(t, sc.cfg.RESPSocket)
		for _, words := range script {
			cmd := strings.Join(words, " ")
			want, got := normalize(cmd, r.do(words...)), normalize(cmd, s.do(words...))
			if len(words) > 0 && strings.EqualFold(words[0], "hello") {
				want, got = normalize("hello", want), normalize("hello", got)
			}
			if got != want {
				t.Errorf("script %d, %q:\n got %q\nwant %q", i+1, cmd, got, want)
			}
		}
	}
}

// Ensure CLIENT INFO and CLIENT LIST describe this connection with Redis's
// fields (a line ending in \n, a verbatim string in RESP3), and DBSIZE
// counts the buckets that hold something.
func TestRESP_clientInfoAndDBSize(t *testing.T) {
	sc := start(t, Config{})
	c := dialRaw(t, sc.cfg.RESPSocket)
	id := strings.TrimSuffix(strings.TrimPrefix(c.do("CLIENT", "ID"), ":"), "\r\n")
	c.do("CLIENT", "SETNAME", "w-1")
	c.do("CLIENT", "SETINFO", "LIB-NAME", "redis-py")
	info := c.do("CLIENT", "INFO")
	for _, f := range []string{"id=" + id + " ", "name=w-1 ", "db=0 ", "multi=-1 ", "cmd=client|info ", "resp=2 ", "lib-name=redis-py "} {
		if !strings.Contains(info, f) {
			t.Errorf("CLIENT INFO %q lacks %q", info, f)
		}
	}
	if !strings.HasPrefix(info, "$") || !strings.HasSuffix(info, "\n\r\n") {
		t.Errorf("CLIENT INFO in RESP2: %q", info)
	}
	if l := c.do("CLIENT", "LIST"); !strings.Contains(l, "id="+id+" ") || !strings.Contains(l, "cmd=client|list ") {
		t.Errorf("CLIENT LIST: %q", l)
	}
	if l := c.do("CLIENT", "LIST", "TYPE", "pubsub"); l != "$0\r\n\r\n" {
		t.Errorf("CLIENT LIST TYPE pubsub: %q", l)
	}
	c.do("HELLO", "3")
	if info := c.do("CLIENT", "INFO"); !strings.HasPrefix(info, "=") || !strings.Contains(info, "\r\ntxt:id="+id+" ") || !strings.Contains(info, " resp=3 ") {
		t.Errorf("CLIENT INFO in RESP3: %q", info)
	}
	if v := c.do("INFO"); !strings.HasPrefix(v, "=") || !strings.Contains(v, "txt:# Server\r\n") {
		t.Errorf("INFO in RESP3: %.60q", v)
	}
	if v := c.do("DBSIZE"); v != ":0\r\n" {
		t.Errorf("DBSIZE of an empty table: %q", v)
	}
	c.do("RL.REDUCE", "a", "10", "60")
	c.do("CL.THROTTLE", "b", "5", "1", "10")
	c.do("RL.GET", "c", "10", "60") // a peek creates nothing
	if v := c.do("DBSIZE"); v != ":2\r\n" {
		t.Errorf("DBSIZE after two buckets: %q", v)
	}
	if v := c.do("INFO", "keyspace"); !strings.Contains(v, "\r\ndb0:keys=2,") {
		t.Errorf("INFO's keyspace after two buckets: %q", v)
	}
	sc.clock.Add(61e9) // both are full again: fresh buckets hold nothing
	if v := c.do("DBSIZE"); v != ":0\r\n" {
		t.Errorf("DBSIZE once both refilled: %q", v)
	}
	// CONFIG GET reports Sluice's own settings.
	if v := c.do("CONFIG", "GET", "maxclients", "timeout"); v != "%2\r\n$10\r\nmaxclients\r\n$4\r\n1024\r\n$7\r\ntimeout\r\n$3\r\n300\r\n" {
		t.Errorf("CONFIG GET maxclients timeout: %q", v)
	}
	if v := c.do("CONFIG", "GET", "max*"); !strings.HasPrefix(v, "%3\r\n") {
		t.Errorf("CONFIG GET max*: %q", v)
	}
}

// Ensure random sequences of the connection and transaction commands get
// the same replies from Sluice as from redis-server 7 (the seed is printed;
// WATCH, which Sluice refuses, and QUIT, which ends the script, are left
// out).
func TestRESP_sameAsRedisRandom(t *testing.T) {
	redisSock := startRedis(t)
	sc := start(t, Config{})
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	pool := [][]string{
		{"MULTI"}, {"MULTI"}, {"EXEC"}, {"EXEC"}, {"DISCARD"}, {"MULTI", "x"}, {"EXEC", "x"}, {"DISCARD", "x"},
		{"PING"}, {"PING", "hi"}, {"PING", "a", "b"}, {"ECHO", "e"}, {"ECHO"}, {"NOSUCH", "k"}, {"UNWATCH"},
		{"SELECT", "0"}, {"SELECT", "1"}, {"SELECT", "x"}, {"CLIENT", "GETNAME"}, {"CLIENT", "SETNAME", "n1"},
		{"CLIENT", "SETNAME", ""}, {"CLIENT", "SETNAME", "a b"}, {"CLIENT", "NOSUCH"}, {"HELLO", "2"},
		{"HELLO", "3"}, {"HELLO", "4"}, {"HELLO", "3", "SETNAME", "n2"}, {"CONFIG", "GET", "appendonly"},
		{"CONFIG", "GET", "save"}, {"CONFIG", "GET"}, {"DBSIZE", "x"}, {"AUTH", "default", "pw"}, {"AUTH", "pw"},
		{"CLIENT", "GETNAME", "x"}, {"CLIENT"}, {"CONFIG", "SET", "a", "b"}, {"CONFIG", "SET", "a"}, {"CONFIG"},
		{"HELLO", "3", "AUTH", "nobody", "pw"}, {"HELLO", "x"}, {"HELLO", "3", "FOO"}, {"AUTH", "a", "b", "c"},
		{"SELECT", "0", "1"}, {"COMMAND", "INFO", "nosuch"}, {"COMMAND", "NOSUCH"}, {"COMMAND", "COUNT", "x"},
	}
	for i := range 20 {
		r, s := dialRaw(t, redisSock), dialRaw(t, sc.cfg.RESPSocket)
		var script []string
		for range 30 {
			words := pool[rng.IntN(len(pool))]
			cmd := strings.Join(words, " ")
			script = append(script, cmd)
			// HELLO's fields are normalized wherever they are (EXEC's replies too).
			want, got := normalize("hello", r.do(words...)), normalize("hello", s.do(words...))
			want, got = normalize(cmd, want), normalize(cmd, got)
			if got != want {
				t.Fatalf("script %d, after %q:\n got %q\nwant %q", i+1, script, got, want)
			}
		}
	}
}
