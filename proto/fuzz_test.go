package proto

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// checkDecodeErr fails t unless err, from decoding fuzz bytes, names the
// package and wraps a sentinel that has a status, and rest is nil.
func checkDecodeErr(t *testing.T, err error, rest []byte) {
	t.Helper()
	if !strings.HasPrefix(err.Error(), "proto: ") || StatusOf(err) == StatusInternal || rest != nil {
		t.Fatalf("error %q (status %v), rest %x", err, StatusOf(err), rest)
	}
}

// FuzzDecodeOp decodes arbitrary bytes as an operation: no panic, an error
// with a status, or an operation that encodes back to exactly the bytes
// consumed (decode(encode(x)) == x over every decodable x).
func FuzzDecodeOp(f *testing.F) {
	for _, op := range sampleOps() {
		f.Add(encodeOp(nil, &op))
	}
	for _, c := range goldenCases() {
		if c.kind == KindRequest && len(c.frame()) > HeaderLen {
			f.Add(c.frame()[HeaderLen:])
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var op Op
		rest, err := DecodeOp(data, &op)
		if err != nil {
			checkDecodeErr(t, err, rest)
			return
		}
		consumed := data[:len(data)-len(rest)]
		if re := encodeOp(nil, &op); !bytes.Equal(re, consumed) {
			t.Fatalf("re-encoded %x, decoded from %x", re, consumed)
		}
		var again Op
		if _, err := DecodeOp(consumed, &again); err != nil || !reflect.DeepEqual(viewOp(&again), viewOp(&op)) {
			t.Fatalf("second decode differs: %v", err)
		}
	})
}

// FuzzDecodeResult is FuzzDecodeOp for results.
func FuzzDecodeResult(f *testing.F) {
	for _, r := range sampleResults() {
		f.Add(encodeResult(nil, &r))
	}
	for _, c := range goldenCases() {
		if c.kind == KindResponse && len(c.frame()) > HeaderLen {
			f.Add(c.frame()[HeaderLen:])
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var r Result
		rest, err := DecodeResult(data, &r)
		if err != nil {
			checkDecodeErr(t, err, rest)
			return
		}
		consumed := data[:len(data)-len(rest)]
		if re := encodeResult(nil, &r); !bytes.Equal(re, consumed) {
			t.Fatalf("re-encoded %x, decoded from %x", re, consumed)
		}
		if err := r.Err(); (err == nil) != (r.Status == StatusOK) || StatusOf(err) != r.Status {
			t.Fatalf("status %v, Err() %v", r.Status, err)
		}
	})
}

// FuzzSplitFrame feeds arbitrary bytes to the reader's path: split, then
// decode the whole body. No panic; a frame is exactly what its header
// says; an error has a status.
func FuzzSplitFrame(f *testing.F) {
	for _, c := range goldenCases() {
		f.Add(c.frame())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		frame, rest, h, err := SplitFrame(data)
		switch {
		case err != nil:
			if frame != nil || rest != nil || StatusOf(err) == StatusInternal || StatusOf(err) == StatusOK {
				t.Fatalf("error %v with frame %x rest %x", err, frame, rest)
			}
			return
		case frame == nil:
			if !bytes.Equal(rest, data) || (len(data) >= HeaderLen && len(data) >= 4+int(h.Length)) {
				t.Fatalf("need more with %d bytes, length %d", len(data), h.Length)
			}
			return
		}
		if len(frame) != 4+int(h.Length) || !bytes.Equal(append(bytes.Clone(frame), rest...), data) {
			t.Fatalf("frame of %d bytes, length field %d", len(frame), h.Length)
		}
		if h.Version < MinVersion || h.Version > Version || h.Count == 0 || h.Count > MaxBatch || h.Length > MaxFrameLen {
			t.Fatalf("unchecked header %+v", h)
		}
		_, ops, rs, err := decodeAll(data)
		if err != nil {
			if StatusOf(err) == StatusInternal {
				t.Fatalf("error without a status: %v", err)
			}
			return
		}
		// A frame that decodes re-encodes to itself.
		b, start := BeginFrameVersion(nil, h.Version, h.Kind, h.ID)
		for i := range ops {
			b = encodeOp(b, &ops[i])
		}
		for i := range rs {
			b = encodeResult(b, &rs[i])
		}
		if b = EndFrame(b, start, int(h.Count)); !bytes.Equal(b, frame) {
			t.Fatalf("re-encoded %x, frame %x", b, frame)
		}
	})
}

// FuzzItemRoundTrip encodes an item operation from arbitrary fields, in a
// frame of an arbitrary version, a model of the rules decides whether it is
// valid, and DecodeOpVersion must agree and, if valid, give back the
// fields.
func FuzzItemRoundTrip(f *testing.F) {
	f.Add(uint8(OpAcquire), uint8(FlagStrict|FlagAt), uint8(TokenBucket), int64(10), int64(3600e9), int64(1), int64(1), t0, []byte("login:alice"), uint8(Version))
	f.Add(uint8(OpReset), uint8(8), uint8(9), int64(-1), int64(-1), int64(-1), int64(-1), int64(-1), []byte{}, uint8(1))
	f.Add(uint8(4), uint8(0), uint8(Concurrency), int64(10), int64(30e9), int64(0), int64(1), int64(0), []byte("k"), uint8(3))
	f.Add(uint8(5), uint8(0), uint8(Concurrency), int64(10), int64(30e9), int64(0), int64(7), int64(0), []byte("k"), uint8(3))
	f.Fuzz(func(t *testing.T, code, flags, alg uint8, p0, p1, p2, n, at int64, key []byte, version uint8) {
		c := []Opcode{OpAcquire, OpPeek, OpRefund, OpReset, OpLease, OpRelease}[code%6]
		v := MinVersion + version%(Version-MinVersion+1)
		// The encoder sets FlagNamed from the limit alone (here it has no name).
		want := Op{Code: c, Flags: Flags(flags) &^ FlagNamed, Limit: Limit{Algorithm: Algorithm(alg), P: [3]int64{p0, p1, p2}}, N: n, At: at, Key: key}
		if len(key) > 1<<16-1 {
			return
		}
		b := AppendItem(nil, c, want.Flags, want.Limit, n, at, key)
		mask := itemFlags
		if v < 2 {
			mask &^= FlagShadow
		}
		switch c {
		case OpLease:
			mask = 0
		case OpRelease:
			mask, want.Lease, want.N = 0, uint64(n), 0
		}
		valid := c.ValidIn(v) && want.Flags&^mask == 0 && Algorithm(alg).ValidIn(v) && len(key) >= 1 && len(key) <= MaxKeyLen &&
			(c != OpLease || n == 1) && (c != OpRelease || n != 0)
		var got Op
		rest, err := DecodeOpVersion(b, v, &got)
		if (err == nil) != valid {
			t.Fatalf("%v in version %d: valid %v, error %v", c, v, valid, err)
		}
		if err == nil && (len(rest) != 0 || !reflect.DeepEqual(viewOp(&got), viewOp(&want))) {
			t.Fatalf("decoded %+v, want %+v", viewOp(&got), viewOp(&want))
		}
	})
}

// FuzzParseLimit parses arbitrary specs: no panic, and a spec that parses
// formats to a canonical one that parses to the same limit.
func FuzzParseLimit(f *testing.F) {
	for _, s := range []string{
		"token_bucket:max=10,refill_time=1h,refill_amount=1", "gcra:burst=4,count=1,period=1s",
		"fixed_window:limit=100,window=1m", "sliding_window:limit=100,window=1m",
		"pacer:rate=4,period=1s,max_delay=2s", "gcra:burst=x", "pacer:rate=1,period=1.5h,max_delay=0",
		"sliding_log:limit=100,window=1m", "window_counters:limit=100,window=1h",
		"window_counters:limit=100,window=1h,counters=12,count_denied=true", "window_counters:count_denied=false,limit=1,window=1s",
		"window_counters:limit=1,window=1s,counters=256", "concurrency:limit=10,lease=30s",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseLimit(s)
		if err != nil {
			if StatusOf(err) != StatusInvalidLimit || !strings.HasPrefix(err.Error(), "proto: limit ") {
				t.Fatalf("error %v", err)
			}
			return
		}
		canon := l.String()
		again, err := ParseLimit(canon)
		if err != nil || again != l || again.String() != canon {
			t.Fatalf("%q -> %+v -> %q -> %+v, %v", s, l, canon, again, err)
		}
		for _, p := range l.P {
			if p < 0 {
				t.Fatalf("%q: negative parameter in %+v", s, l)
			}
		}
	})
}

// FuzzLimitString formats arbitrary limits of valid algorithms and
// non-negative parameters (those ParseLimit can return): the spec parses
// back to the same limit.
func FuzzLimitString(f *testing.F) {
	f.Add(uint8(TokenBucket), int64(10), int64(3600e9), int64(1))
	f.Add(uint8(Pacer), int64(1<<63-1), int64(1), int64(1<<63-1))
	f.Add(uint8(WindowCounters), int64(100), int64(3600e9), int64(60|CountDeniedBit))
	f.Fuzz(func(t *testing.T, alg uint8, p0, p1, p2 int64) {
		l := Limit{Algorithm: Algorithm(alg)%(numAlgorithms-1) + 1, P: [3]int64{p0 & (1<<63 - 1), p1 & (1<<63 - 1), p2 & (1<<63 - 1)}}
		switch l.Algorithm {
		case FixedWindow, SlidingWindow, SlidingLog, Concurrency:
			l.P[2] = 0
		case WindowCounters:
			l.P[2] &= WindowCountersBits
		}
		got, err := ParseLimit(l.String())
		if err != nil || got != l {
			t.Fatalf("%+v -> %q -> %+v, %v", l, l.String(), got, err)
		}
	})
}
