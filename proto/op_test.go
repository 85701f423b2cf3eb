package proto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestOpRoundTrip(t *testing.T) {
	for _, want := range sampleOps() {
		t.Run(want.Code.String(), func(t *testing.T) {
			// Encoders append; decoders return what follows.
			b := encodeOp([]byte("head"), &want)
			b = append(b, "tail"...)
			var got Op
			rest, err := DecodeOp(b[4:], &got)
			if err != nil {
				t.Fatal(err)
			}
			if string(rest) != "tail" {
				t.Fatalf("rest %q, want %q", rest, "tail")
			}
			if g, w := viewOp(&got), viewOp(&want); !reflect.DeepEqual(g, w) {
				t.Fatalf("decoded %+v\nwant    %+v", g, w)
			}
		})
	}
}

// TestOpAliases checks that decoded keys alias the input and cannot grow
// into the bytes after them.
func TestOpAliases(t *testing.T) {
	b := AppendItem(nil, OpAcquire, 0, GCRALimit(1, 1, 1), 1, 0, []byte("key"))
	b = AppendPing(b)
	var op Op
	if _, err := DecodeOp(b, &op); err != nil {
		t.Fatal(err)
	}
	if &op.Key[0] != &b[45] || cap(op.Key) != len(op.Key) {
		t.Fatalf("key does not alias the frame with its capacity cut: cap %d", cap(op.Key))
	}
}

// TestOpReuse decodes into one Op again and again: nothing of an earlier
// operation shows through.
func TestOpReuse(t *testing.T) {
	var op Op
	ops := sampleOps()
	for i := range 3 * len(ops) {
		want := &ops[(i*7)%len(ops)]
		if _, err := DecodeOp(encodeOp(nil, want), &op); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(viewOp(&op), viewOp(want)) {
			t.Fatalf("step %d: decoded %+v, want %+v", i, viewOp(&op), viewOp(want))
		}
		if want.Code != OpMulti && (op.Flags != want.Flags || op.N != want.N) {
			t.Fatalf("step %d: stale fields", i)
		}
		for j := op.NItems; j < MaxMulti; j++ {
			if op.Items[j].Key != nil {
				t.Fatalf("step %d: item %d keeps a key of an earlier frame", i, j)
			}
		}
	}
}

func TestDecodeOpErrors(t *testing.T) {
	acquire := AppendItem(nil, OpAcquire, 0, TokenBucketLimit(10, time.Hour, 10), 1, 0, []byte("key"))
	set := func(b []byte, off int, v ...byte) []byte {
		b = append([]byte{}, b...)
		copy(b[off:], v)
		return b
	}
	twoItems := encodeOp(nil, &[]Op{multi(0, 0,
		MultiItem{Flags: 0, Limit: GCRALimit(1, 1, 1), Cost: 1, Key: []byte("a")}, MultiItem{Flags: 0, Limit: GCRALimit(1, 1, 1), Cost: 1, Key: []byte("b")})}[0])
	scanOp := AppendScan(nil, 0, 10, []byte("p"))
	u16 := func(v int) []byte { return binary.LittleEndian.AppendUint16(nil, uint16(v)) }
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrMalformed},
		{"opcode 0", []byte{0}, ErrUnknownOpcode},
		{"opcode 16", []byte{16}, ErrUnknownOpcode},
		{"opcode 255", []byte{255, 1, 2, 3}, ErrUnknownOpcode},
		{"item truncated", acquire[:44], ErrMalformed},
		{"item key truncated", acquire[:len(acquire)-1], ErrMalformed},
		{"item flag bit 7", set(acquire, 1, 0x80), ErrMalformed},
		{"item algorithm 0", set(acquire, 2, 0), ErrInvalidLimit},
		{"item algorithm 10", set(acquire, 2, 10), ErrInvalidLimit},
		{"item key empty", set(acquire, 43, u16(0)...)[:45], ErrInvalidKey},
		{"item key too long", append(set(acquire, 43, u16(MaxKeyLen+1)...)[:45], make([]byte, MaxKeyLen+1)...), ErrInvalidKey},
		{"multi truncated", twoItems[:10], ErrMalformed},
		{"multi flag STRICT", set(twoItems, 1, byte(FlagStrict)), ErrMalformed},
		{"multi no items", set(twoItems, 10, 0), ErrMalformed},
		{"multi 17 items", set(twoItems, 10, MaxMulti+1), ErrTooManyItems},
		{"multi 3 items, 2 present", set(twoItems, 10, 3), ErrMalformed},
		{"multi item truncated", twoItems[:len(twoItems)-38], ErrMalformed},
		{"multi item flag AT", set(twoItems, 11, byte(FlagAt)), ErrMalformed},
		{"multi item algorithm 10", set(twoItems, 12, 10), ErrInvalidLimit},
		{"multi item key empty", set(twoItems, 11+34, 0, 0), ErrInvalidKey},
		{"multi item key truncated", twoItems[:len(twoItems)-1], ErrMalformed},
		{"scan truncated", scanOp[:12], ErrMalformed},
		{"scan count 0", set(scanOp, 9, u16(0)...), ErrMalformed},
		{"scan count 1001", set(scanOp, 9, u16(MaxScanCount+1)...), ErrMalformed},
		{"scan prefix too long", set(scanOp, 11, u16(MaxKeyLen+1)...), ErrInvalidKey},
		{"scan prefix truncated", scanOp[:len(scanOp)-1], ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var op Op
			rest, err := DecodeOp(tc.b, &op)
			checkErr(t, err, tc.want)
			if rest != nil {
				t.Fatalf("rest %x on error", rest)
			}
			if len(tc.b) > 0 && op.Code != Opcode(tc.b[0]) {
				t.Fatalf("op.Code %v, want the opcode byte %d", op.Code, tc.b[0])
			}
		})
	}
}

// TestDecodeOpTruncated cuts every sample at every length: each prefix is
// malformed.
func TestDecodeOpTruncated(t *testing.T) {
	for _, op := range sampleOps() {
		b := encodeOp(nil, &op)
		for n := range len(b) {
			var got Op
			if _, err := DecodeOp(bytes.Clone(b[:n]), &got); StatusOf(err) != StatusMalformed {
				t.Fatalf("%v cut to %d of %d bytes: %v, want malformed", op.Code, n, len(b), err)
			}
		}
	}
}

func TestAppendItemPanics(t *testing.T) {
	for _, code := range []Opcode{OpPing, OpMulti, OpScan, 0, 16} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("AppendItem(%v) did not panic", code)
				}
			}()
			AppendItem(nil, code, 0, Limit{}, 0, 0, []byte("k"))
		}()
	}
	defer func() {
		if recover() == nil {
			t.Errorf("AppendItem with a 64 KiB key did not panic")
		}
	}()
	AppendItem(nil, OpAcquire, 0, Limit{}, 0, 0, make([]byte, 1<<16))
}

func TestOpcodeString(t *testing.T) {
	want := []string{"opcode(0)", "HELLO", "PING", "ACQUIRE", "PEEK", "REFUND", "RESET", "MULTI", "SCAN", "STATS",
		"LEASE", "RELEASE", "REGGET", "REGSET", "REGCAS", "REGDEL", "opcode(16)"}
	for i, w := range want {
		if got := Opcode(i).String(); got != w {
			t.Errorf("Opcode(%d).String() = %q, want %q", i, got, w)
		}
	}
}

// Named limits (version 2): the name takes the limit field's place, in
// items and MULTI items; a version-1 frame may not use them.
func TestDecodeOp_named(t *testing.T) {
	set := func(b []byte, off int, v byte) []byte {
		c := bytes.Clone(b)
		c[off] = v
		return c
	}
	item := AppendItem(nil, OpAcquire, FlagStrict, Named("login"), 2, 0, []byte("alice"))
	if item[1] != byte(FlagStrict|FlagNamed) || item[2] != 5 || string(item[3:8]) != "login" {
		t.Fatalf("encoded %x", item)
	}
	var op Op
	rest, err := DecodeOp(item, &op)
	if err != nil || len(rest) != 0 || string(op.Name) != "login" || op.Limit != (Limit{}) ||
		op.N != 2 || string(op.Key) != "alice" || op.Flags != FlagStrict|FlagNamed {
		t.Fatalf("decoded %+v, rest %x, %v", op, rest, err)
	}
	multi := AppendMulti(nil, 0, 0, []MultiItem{
		{Limit: Named("login"), Cost: 1, Key: []byte("a")},
		{Limit: GCRALimit(1, 1, time.Second), Cost: 1, Key: []byte("b")},
	})
	if _, err := DecodeOp(multi, &op); err != nil || op.NItems != 2 || string(op.Items[0].Name) != "login" ||
		op.Items[1].Name != nil || op.Items[1].Limit != GCRALimit(1, 1, time.Second) {
		t.Fatalf("multi decoded %+v, %v", op.Items[:op.NItems], err)
	}
	for _, tc := range []struct {
		name string
		b    []byte
		v    uint8
		want error
	}{
		{"named in version 1", item, 1, ErrMalformed},
		{"named multi item in version 1", multi, 1, ErrMalformed},
		{"name of 0 bytes", set(item, 2, 0), 2, ErrInvalidLimit},
		{"name of 65 bytes", set(item, 2, 65), 2, ErrInvalidLimit},
		{"name truncated", item[:6], 2, ErrMalformed},
		{"tail truncated", item[:10], 2, ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeOpVersion(tc.b, tc.v, &op)
			checkErr(t, err, tc.want)
		})
	}
}

func TestParseLimit_named(t *testing.T) {
	for _, s := range []string{"login", "api.v2-read_x", "a"} {
		l, err := ParseLimit(s)
		if err != nil || l != Named(s) || l.String() != s {
			t.Errorf("ParseLimit(%q) = %+v, %v", s, l, err)
		}
	}
	for _, s := range []string{"", "1abc", "has space", "x/y", strings.Repeat("n", MaxNameLen+1)} {
		if _, err := ParseLimit(s); !errors.Is(err, ErrInvalidLimit) {
			t.Errorf("ParseLimit(%q) = %v, want ErrInvalidLimit", s, err)
		}
	}
}

// A shadowed ACQUIRE's decision (version 2) reads back as allowed and
// shadow-denied; the bit means nothing elsewhere and is malformed there.
func TestShadowDecision(t *testing.T) {
	d := Decision{Allowed: true, Remaining: 0, Limit: 5, RetryAfter: -1, ResetAfter: 7}
	var r Result
	b := AppendShadowDecision(nil, OpAcquire, &d)
	if rest, err := DecodeResult(b, &r); err != nil || len(rest) != 0 || !r.ShadowDenied || r.Decision != d {
		t.Fatalf("decoded %+v, %v", r, err)
	}
	if _, err := DecodeResult(AppendDecision(nil, OpAcquire, &d), &r); err != nil || r.ShadowDenied {
		t.Fatalf("a plain decision decoded as shadowed: %+v, %v", r, err)
	}
	peek := AppendShadowDecision(nil, OpPeek, &d)
	if _, err := DecodeResult(peek, &r); !errors.Is(err, ErrMalformed) {
		t.Errorf("a shadowed PEEK decision = %v, want ErrMalformed", err)
	}
	denied := AppendDecision(nil, OpAcquire, &Decision{})
	denied[2] = shadowDeniedBit // shadowed but not allowed: never sent
	if _, err := DecodeResult(denied, &r); !errors.Is(err, ErrMalformed) {
		t.Errorf("shadow bit without allowed = %v, want ErrMalformed", err)
	}
}

// Version 3: LEASE and RELEASE, and the algorithms from sliding_log on,
// which a frame of version 1 or 2 may not carry.
func TestDecodeOp_version3(t *testing.T) {
	conc := ConcurrencyLimit(10, 30*time.Second)
	l := AppendLease(nil, 0, conc, []byte("upload:erin"))
	if want := AppendItem(nil, OpLease, 0, conc, 1, 0, []byte("upload:erin")); !bytes.Equal(l, want) {
		t.Fatalf("AppendLease %x, want %x", l, want)
	}
	r := AppendRelease(nil, 0, conc, 1<<64-1, []byte("upload:erin"))
	if want := AppendItem(nil, OpRelease, 0, conc, -1, 0, []byte("upload:erin")); !bytes.Equal(r, want) {
		t.Fatalf("AppendRelease %x, want %x", r, want)
	}
	var op Op
	if rest, err := DecodeOp(r, &op); err != nil || len(rest) != 0 || op.Lease != 1<<64-1 || op.N != 0 || op.Limit != conc {
		t.Fatalf("RELEASE decoded %+v, %v", viewOp(&op), err)
	}
	named := AppendLease(nil, 0, Named("uploads"), []byte("k"))
	if _, err := DecodeOp(named, &op); err != nil || string(op.Name) != "uploads" || op.Flags != FlagNamed || op.N != 1 {
		t.Fatalf("named LEASE decoded %+v, %v", viewOp(&op), err)
	}
	namedRelease := AppendRelease(nil, FlagNamed, Named("uploads"), 3, []byte("k"))
	if _, err := DecodeOp(namedRelease, &op); err != nil || string(op.Name) != "uploads" || op.Lease != 3 {
		t.Fatalf("named RELEASE decoded %+v, %v", viewOp(&op), err)
	}
	// at is not read without AT, which a lease may not set: a stray value passes.
	if _, err := DecodeOp(AppendItem(nil, OpLease, 0, conc, 1, t0, []byte("k")), &op); err != nil || op.At != t0 {
		t.Fatalf("LEASE with at: %+v, %v", viewOp(&op), err)
	}

	acquire := func(l Limit) []byte { return AppendItem(nil, OpAcquire, 0, l, 1, 0, []byte("k")) }
	multiOf := func(l Limit) []byte {
		return AppendMulti(nil, 0, 0, []MultiItem{{Limit: GCRALimit(1, 1, 1), Cost: 1, Key: []byte("a")}, {Limit: l, Cost: 1, Key: []byte("b")}})
	}
	v3 := []Limit{SlidingLogLimit(5, time.Second), WindowCountersLimit(5, time.Second, 60, true), conc}
	type tc struct {
		name string
		b    []byte
		v    uint8
		want error
	}
	var cases []tc
	for _, v := range []uint8{1, 2} {
		cases = append(cases,
			tc{"LEASE", l, v, ErrUnknownOpcode},
			tc{"RELEASE", r, v, ErrUnknownOpcode})
		for _, lim := range v3 {
			cases = append(cases,
				tc{"ACQUIRE " + lim.Algorithm.String(), acquire(lim), v, ErrInvalidLimit},
				tc{"MULTI item " + lim.Algorithm.String(), multiOf(lim), v, ErrInvalidLimit})
		}
	}
	for _, lim := range v3 {
		cases = append(cases,
			tc{"ACQUIRE " + lim.Algorithm.String(), acquire(lim), 3, nil},
			tc{"MULTI item " + lim.Algorithm.String(), multiOf(lim), 3, nil})
	}
	for _, f := range []Flags{FlagStrict, FlagSmyte, FlagAt, FlagShadow, 32, 128} {
		cases = append(cases,
			tc{fmt.Sprintf("LEASE flags %#x", f), AppendItem(nil, OpLease, f, conc, 1, 0, []byte("k")), 3, ErrMalformed},
			tc{fmt.Sprintf("RELEASE flags %#x", f), AppendItem(nil, OpRelease, f, conc, 1, 0, []byte("k")), 3, ErrMalformed})
	}
	for _, n := range []int64{0, 2, -1, 1 << 62} {
		cases = append(cases, tc{fmt.Sprint("LEASE n ", n), AppendItem(nil, OpLease, 0, conc, n, 0, []byte("k")), 3, ErrMalformed})
	}
	cases = append(cases,
		tc{"RELEASE of lease 0", AppendRelease(nil, 0, conc, 0, []byte("k")), 3, ErrMalformed},
		tc{"LEASE of algorithm 10", AppendLease(nil, 0, Limit{Algorithm: 10}, []byte("k")), 3, ErrInvalidLimit},
		tc{"LEASE without a key", AppendLease(nil, 0, conc, nil), 3, ErrInvalidKey},
		tc{"RELEASE truncated", r[:len(r)-1], 3, ErrMalformed},
		// proto checks the algorithm, not which one a lease takes: the server answers InvalidLimit.
		tc{"LEASE of a gcra", AppendLease(nil, 0, GCRALimit(1, 1, 1), []byte("k")), 3, nil},
		tc{"LEASE in version 3", l, 3, nil},
	)
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s in version %d", c.name, c.v), func(t *testing.T) {
			var op Op
			rest, err := DecodeOpVersion(c.b, c.v, &op)
			checkErr(t, err, c.want)
			if err != nil && (rest != nil || op.Code != Opcode(c.b[0])) {
				t.Fatalf("rest %x, code %v on error", rest, op.Code)
			}
			if err == nil && len(rest) != 0 {
				t.Fatalf("rest %x", rest)
			}
		})
	}
	for _, c := range []Opcode{OpLease, OpRelease} {
		if c.ValidIn(2) || !c.ValidIn(3) || !c.Valid() {
			t.Errorf("%v valid in 2: %v, in 3: %v", c, c.ValidIn(2), c.ValidIn(3))
		}
	}
	if !OpStats.ValidIn(1) || Opcode(12).ValidIn(3) || OpRegGet.ValidIn(5) || !OpRegDel.ValidIn(6) || Opcode(16).ValidIn(6) || Opcode(0).ValidIn(3) {
		t.Error("ValidIn at the edges")
	}
}

// An ACQUIRE of a limit whose spec says shadow=true carries FlagShadow; the
// other operations do not, and the limit field is the same either way.
func TestAppendItem_shadowSpec(t *testing.T) {
	l, err := ParseLimit("gcra:burst=1,count=1,period=1s,shadow=true")
	if err != nil || !l.Shadow {
		t.Fatalf("%+v, %v", l, err)
	}
	plain := l
	plain.Shadow = false
	for _, code := range []Opcode{OpAcquire, OpPeek, OpRefund, OpReset} {
		var op Op
		if _, err := DecodeOp(AppendItem(nil, code, FlagStrict, l, 1, 0, []byte("k")), &op); err != nil {
			t.Fatal(err)
		}
		want := FlagStrict
		if code == OpAcquire {
			want |= FlagShadow
		}
		if op.Flags != want || op.Limit != plain {
			t.Errorf("%v: flags %v, limit %v; want flags %v", code, op.Flags, op.Limit, want)
		}
	}
}

// Each operation's oldest version: 1 for what version 1 had, 2 for named
// limits and shadow requests, 3 for leases and the algorithms from
// sliding_log on; a MULTI takes its items' highest (a shadow spec's flag is
// not sent in a MULTI).
func TestItemVersion(t *testing.T) {
	tb := TokenBucketLimit(10, time.Second, 1)
	shadowed := tb
	shadowed.Shadow = true
	for _, c := range []struct {
		code Opcode
		f    Flags
		l    Limit
		want uint8
	}{
		{OpAcquire, FlagStrict | FlagAt, tb, 1},
		{OpPeek, 0, shadowed, 1},
		{OpAcquire, 0, shadowed, 2},
		{OpAcquire, FlagShadow, tb, 2},
		{OpRefund, 0, Named("login"), 2},
		{OpAcquire, 0, SlidingLogLimit(5, time.Second), 3},
		{OpReset, 0, WindowCountersLimit(5, time.Second, 60, false), 3},
		{OpLease, 0, Named("jobs"), 3},
		{OpRelease, 0, ConcurrencyLimit(2, time.Second), 3},
		{OpAcquire, FlagDeadline, Named("login"), 4},
		{OpReset, FlagDeadline, tb, 4},
		{OpAcquire, FlagAll, Named("login"), 7},
		{OpPeek, FlagAll | FlagDeadline, Named("login"), 7},
	} {
		if got := ItemVersion(c.code, c.f, &c.l); got != c.want {
			t.Errorf("%v %v %v: version %d, want %d", c.code, c.f, c.l, got, c.want)
		}
	}
	items := []MultiItem{{Limit: shadowed}, {Limit: tb, Flags: FlagStrict}}
	if v := MultiVersion(items); v != 1 {
		t.Errorf("MULTI of specs: version %d", v)
	}
	if v := MultiVersion(append(items, MultiItem{Limit: Named("x")})); v != 2 {
		t.Errorf("MULTI with a named limit: version %d", v)
	}
	if v := MultiVersion(append(items, MultiItem{Limit: SlidingLogLimit(1, time.Second)})); v != 3 {
		t.Errorf("MULTI with a sliding_log: version %d", v)
	}
}

// Version 4: DEADLINE puts the client's deadline in the at field, of
// ACQUIRE, PEEK, REFUND and RESET only, never with AT, and is reserved in
// the frames of older versions.
func TestDecodeOp_deadline(t *testing.T) {
	const deadline = int64(1_700_000_000_050_000_000)
	named := Named("login")
	for _, c := range []struct {
		name string
		b    []byte
		v    uint8
		want error
	}{
		{"acquire", AppendItem(nil, OpAcquire, FlagDeadline, named, 1, deadline, []byte("k")), 4, nil},
		{"peek", AppendItem(nil, OpPeek, FlagDeadline, named, 0, deadline, []byte("k")), 4, nil},
		{"refund", AppendItem(nil, OpRefund, FlagDeadline, named, 2, deadline, []byte("k")), 4, nil},
		{"reset", AppendItem(nil, OpReset, FlagDeadline, named, 0, deadline, []byte("k")), 4, nil},
		{"version 3", AppendItem(nil, OpAcquire, FlagDeadline, named, 1, deadline, []byte("k")), 3, ErrMalformed},
		{"with AT", AppendItem(nil, OpAcquire, FlagDeadline|FlagAt, named, 1, deadline, []byte("k")), 4, ErrMalformed},
		{"lease", AppendItem(nil, OpLease, FlagDeadline, named, 1, deadline, []byte("k")), 4, ErrMalformed},
	} {
		t.Run(c.name, func(t *testing.T) {
			var op Op
			_, err := DecodeOpVersion(c.b, c.v, &op)
			checkErr(t, err, c.want)
			if c.want == nil && (op.Deadline != deadline || op.At != 0 || op.Flags != FlagDeadline|FlagNamed) {
				t.Errorf("decoded deadline %d, at %d, flags %v", op.Deadline, op.At, op.Flags)
			}
		})
	}
	multi := AppendMulti(nil, 0, 0, []MultiItem{{Flags: FlagDeadline, Limit: named, Cost: 1, Key: []byte("k")}})
	var op Op
	if _, err := DecodeOp(multi, &op); !errors.Is(err, ErrMalformed) {
		t.Errorf("a MULTI item with DEADLINE: %v, want ErrMalformed", err)
	}
}

// Version 4: a decision of ACQUIRE, PEEK or REFUND may say which outage
// policy made it and that its limit fails closed, each alone or with the
// others and the shadow bit.
func TestOutageDecision(t *testing.T) {
	d := Decision{Allowed: false, Remaining: 0, Limit: 5, RetryAfter: 5e6}
	var r Result
	for _, closed := range []bool{false, true} {
		for _, o := range []Outage{OutageNone, OutageLocal, OutageOpen, OutageClosed} {
			for _, code := range []Opcode{OpAcquire, OpPeek, OpRefund} {
				b := MarkOutage(AppendDecision(nil, code, &d), o)
				if closed {
					b = MarkFailsClosed(b)
				}
				if rest, err := DecodeResult(b, &r); err != nil || len(rest) != 0 || r.Outage != o || r.FailsClosed != closed || r.Decision != d || r.ShadowDenied {
					t.Fatalf("%v marked %q, fails closed %v: decoded %+v, %v", code, o, closed, r, err)
				}
			}
		}
	}
	allowed := Decision{Allowed: true, Limit: 5, RetryAfter: -1}
	b := MarkFailsClosed(MarkOutage(AppendShadowDecision(nil, OpAcquire, &allowed), OutageClosed))
	if b[2] != 0x1f {
		t.Errorf("every bit of a version-4 decision: first byte %#02x, want 0x1f", b[2])
	}
	if _, err := DecodeResult(b, &r); err != nil || !r.ShadowDenied || r.Outage != OutageClosed || !r.FailsClosed || !r.Decision.Allowed {
		t.Fatalf("a shadowed decision of the closed policy: %+v, %v", r, err)
	}
	b = MarkFailsClosed(AppendDecision(nil, OpPeek, &allowed))
	if _, err := DecodeResult(b, &r); err != nil || r.Outage != OutageNone || !r.FailsClosed || !r.Decision.Allowed {
		t.Fatalf("Redis's decision of a limit that fails closed: %+v, %v", r, err)
	}
	for _, c := range []byte{0x20, 0x40, 0x80} {
		b = AppendDecision(nil, OpAcquire, &d)
		b[2] = c // bits 5-7: reserved
		if _, err := DecodeResult(b, &r); !errors.Is(err, ErrMalformed) {
			t.Errorf("decision byte %#02x = %v, want ErrMalformed", c, err)
		}
	}
	for _, c := range []byte{failsClosedBit, shadowDeniedBit, 0x20} {
		b = AppendLeaseResult(nil, &d, 0)
		b[2] = c // a LEASE's decision carries allowed and an outage policy only
		if _, err := DecodeResult(b, &r); !errors.Is(err, ErrMalformed) {
			t.Errorf("a LEASE decision byte %#02x = %v, want ErrMalformed", c, err)
		}
	}
	// Version 5: a LEASE's or RELEASE's decision says which outage policy
	// made it.
	for _, o := range []Outage{OutageNone, OutageLocal, OutageOpen, OutageClosed} {
		lease := MarkLeaseOutage(AppendLeaseResult(nil, &allowed, 7), OpLease, o)
		if rest, err := DecodeResult(lease, &r); err != nil || len(rest) != 0 || r.Outage != o || r.Decision != allowed || r.Lease != 7 {
			t.Fatalf("a LEASE marked %q: decoded %+v, %v", o, r, err)
		}
		release := MarkLeaseOutage(AppendReleaseResult(nil, true, &d), OpRelease, o)
		if rest, err := DecodeResult(release, &r); err != nil || len(rest) != 0 || r.Outage != o || r.Decision != d || !r.Released {
			t.Fatalf("a RELEASE marked %q: decoded %+v, %v", o, r, err)
		}
	}
	if got := OutageClosed.String(); got != "closed" {
		t.Errorf("OutageClosed.String() = %q", got)
	}
}
