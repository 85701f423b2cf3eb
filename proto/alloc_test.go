package proto

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

// TestAllocs proves that the hot paths allocate nothing: encoding into a
// buffer with room, and decoding, of every operation and result, and the
// framing around them.
func TestAllocs(t *testing.T) {
	check := func(name string, f func()) {
		t.Helper()
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocations, want 0", name, n)
		}
	}
	buf := make([]byte, 0, 64<<10)
	var op Op
	for _, want := range sampleOps() {
		enc := encodeOp(nil, &want)
		name := fmt.Sprintf("%v key %d", want.Code, len(want.Key))
		check("encode "+name, func() {
			b, start := BeginFrame(buf[:0], KindRequest, 1)
			b = encodeOp(b, &want)
			EndFrame(b, start, 1)
		})
		check("decode "+name, func() {
			if _, err := DecodeOp(enc, &op); err != nil {
				panic(err)
			}
		})
	}
	var r Result
	for _, want := range sampleResults() {
		enc := encodeResult(nil, &want)
		name := fmt.Sprintf("%v %v", want.Code, want.Status)
		check("encode "+name, func() {
			b, start := BeginFrame(buf[:0], KindResponse, 1)
			b = encodeResultNoAlloc(b, &want)
			EndFrame(b, start, 1)
		})
		check("decode "+name, func() {
			if _, err := DecodeResult(enc, &r); err != nil {
				panic(err)
			}
			for e := r.Entries; len(e) > 0; {
				_, _, _, e, _ = NextScanEntry(e)
			}
			for s := r.Stats; len(s) > 0; {
				_, _, s, _ = NextStat(s)
			}
		})
	}
	frame := frameOf(KindRequest, 1, 1, AppendItem(nil, OpAcquire, FlagAt, GCRALimit(1, 1, time.Second), 1, t0, []byte("login:alice")))
	stream := bytes.Repeat(frame, 3)
	check("header", func() {
		if _, err := ParseHeader(frame); err != nil {
			panic(err)
		}
	})
	check("split", func() {
		for rest := stream; len(rest) > 0; {
			f, r, _, err := SplitFrame(rest)
			if err != nil || f == nil {
				panic(err)
			}
			rest = r
		}
	})
}

// encodeResultNoAlloc is encodeResult without its test conveniences that
// allocate: the message as a string, the scan keys and stat names.
func encodeResultNoAlloc(dst []byte, r *Result) []byte {
	switch {
	case r.Status != StatusOK:
		return AppendError(dst, r.Code, r.Status, "a message of some length")
	case r.Code == OpScan:
		b, start := BeginScanResult(dst, 0)
		for e := r.Entries; len(e) > 0; {
			alg, freshAt, key, rest, _ := NextScanEntry(e)
			b, e = AppendScanEntry(b, alg, freshAt, key), rest
		}
		return EndScanResult(b, start, r.Next, r.NEntries)
	case r.Code == OpStats:
		b, start := BeginStatsResult(dst)
		for i := range r.NStats {
			b = AppendStat(b, "used_slots", uint64(i))
		}
		return EndStatsResult(b, start, r.NStats)
	}
	return encodeResult(dst, r)
}
