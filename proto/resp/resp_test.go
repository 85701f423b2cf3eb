package resp

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func words(args [][]byte) string {
	s := make([]string, len(args))
	for i, a := range args {
		s[i] = string(a)
	}
	return strings.Join(s, "|")
}

// Ensure commands parse from arrays and inline lines, and that partial
// input asks for more instead of failing.
func TestParse(t *testing.T) {
	cases := []struct {
		in   string
		want string
		n    int
	}{
		{"*3\r\n$9\r\nRL.REDUCE\r\n$1\r\nk\r\n$0\r\n\r\n", "RL.REDUCE|k|", 32},
		{"*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPING\r\n", "PING", 14},
		{"PING\r\n", "PING", 6},
		{"rl.get  abc\t10 60\n", "rl.get|abc|10|60", 18},
		{`SET "a b" "c\"d"` + "\r\n", `SET|a b|c"d`, 18},
		{"\r\n", "", 2},
		{"*0\r\n", "", 4},
		{"*-1\r\n", "", 5},
	}
	for _, c := range cases {
		args, n, err := Parse([]byte(c.in), nil)
		if err != nil || n != c.n || words(args) != c.want {
			t.Errorf("Parse(%q) = %q, %d, %v; want %q, %d", c.in, words(args), n, err, c.want, c.n)
		}
	}
	full := "*2\r\n$4\r\nECHO\r\n$5\r\nhello\r\n"
	for i := range len(full) {
		if args, n, err := Parse([]byte(full[:i]), nil); n != 0 || err != nil || len(args) != 0 {
			t.Errorf("prefix %q: %v %d %v", full[:i], words(args), n, err)
		}
	}
}

// Ensure malformed input is refused with the right error, and a declared
// length is checked before any wait for its bytes.
func TestParse_errors(t *testing.T) {
	cases := []struct {
		in   string
		want error
	}{
		{"*x\r\n", ErrArrayLen},
		{"*1\n", ErrArrayLen},
		{"*65\r\n", ErrTooManyArgs},
		{"*1\r\n+PING\r\n", ErrExpected},
		{"*1\r\n$-1\r\n", ErrBulkLen},
		{"*1\r\n$2147483648\r\n", ErrBulkTooLong},
		{"*1\r\n$99999999999\r\n", ErrBulkLen},
		{"*1\r\n$16385\r\n", ErrBulkTooLong},
		{"*1\r\n$4\r\nPINGxx", ErrCRLF},
		{"*99999999999999999999999", ErrArrayLen},
		{strings.Repeat("a", MaxInlineLen+1), ErrInline},
		{`GET "abc` + "\r\n", ErrQuotes},
		{strings.Repeat("a ", MaxArgs+1) + "\r\n", ErrTooManyArgs},
	}
	for _, c := range cases {
		if _, _, err := Parse([]byte(c.in), nil); !errors.Is(err, c.want) {
			t.Errorf("Parse(%.30q) = %v, want %v", c.in, err, c.want)
		}
	}
}

// Ensure the writers produce RESP2 and an error message cannot break the
// framing.
func TestWriters(t *testing.T) {
	var b []byte
	b = AppendSimple(b, "OK")
	b = AppendError(b, "Cell error:\r\nbad")
	b = AppendInt(b, -42)
	b = AppendBulk(b, []byte("hi"))
	b = AppendBulkString(b, "")
	b = AppendNull(b)
	b = AppendArray(b, 2)
	want := "+OK\r\n-Cell error:  bad\r\n:-42\r\n$2\r\nhi\r\n$0\r\n\r\n$-1\r\n*2\r\n"
	if string(b) != want {
		t.Errorf("got %q\nwant %q", b, want)
	}
}

// Ensure parsing allocates nothing when args has capacity.
func TestAllocs(t *testing.T) {
	buf := []byte("*3\r\n$9\r\nRL.REDUCE\r\n$3\r\nkey\r\n$2\r\n10\r\n")
	args := make([][]byte, 0, MaxArgs)
	if n := testing.AllocsPerRun(100, func() { args, _, _ = Parse(buf, args) }); n != 0 {
		t.Errorf("Parse allocates %v", n)
	}
	out := make([]byte, 0, 64)
	if n := testing.AllocsPerRun(100, func() { out = AppendInt(AppendError(out[:0], "x"), 5) }); n != 0 {
		t.Errorf("writers allocate %v", n)
	}
}

// FuzzParse: no panic, the consumed length never exceeds the input, every
// argument lies inside the input, and re-encoding an array command parses to
// the same arguments.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\n", "PING\r\n", `a "b c" d` + "\n", "*1\r\n$-1\r\n", "*-1\r\n", "$5\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		buf := bytes.Clone(in)
		args, n, err := Parse(buf, nil)
		if err != nil {
			return
		}
		if n > len(in) || n < 0 {
			t.Fatalf("consumed %d of %d", n, len(in))
		}
		if n == 0 {
			return
		}
		var enc []byte
		enc = AppendArray(enc, len(args))
		for _, a := range args {
			if len(a) > MaxBulkLen {
				t.Fatalf("argument of %d bytes", len(a))
			}
			enc = AppendBulk(enc, a)
		}
		again, m, err := Parse(enc, nil)
		if len(args) > 0 && (err != nil || m != len(enc) || fmt.Sprint(again) != fmt.Sprint(args)) {
			t.Fatalf("re-encoded %q parsed to %q (%d, %v)", enc, again, m, err)
		}
	})
}

// Ensure the RESP3 writers produce Redis 7's bytes (captured from
// redis-server 7.0 answering HELLO 3, CLIENT GETNAME, INFO and COMMAND INFO).
func TestWritersRESP3(t *testing.T) {
	for _, c := range []struct {
		got  []byte
		want string
	}{
		{AppendMap(nil, 7), "%7\r\n"},
		{AppendMap(nil, 0), "%0\r\n"},
		{AppendSet(nil, 2), "~2\r\n"},
		{AppendNull3(nil), "_\r\n"},
		{AppendVerbatim(nil, "txt", "# Server\r\nredis_version:7.0.15\r\n"), "=36\r\ntxt:# Server\r\nredis_version:7.0.15\r\n\r\n"},
		{AppendVerbatim(nil, "txt", ""), "=4\r\ntxt:\r\n"},
	} {
		if string(c.got) != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	out := make([]byte, 0, 64)
	if n := testing.AllocsPerRun(100, func() { out = AppendVerbatim(AppendMap(out[:0], 1), "txt", "x") }); n != 0 {
		t.Errorf("RESP3 writers allocate %v", n)
	}
}
