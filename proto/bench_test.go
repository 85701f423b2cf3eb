package proto

import (
	"bytes"
	"encoding/binary"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkCodec measures what a request costs the codec: encoding and
// decoding an ACQUIRE frame and the decision frame that answers it, for
// short and the longest keys. The baseline does the same for the decision
// with encoding/binary's reflection-based Write and Read.
func BenchmarkCodec(b *testing.B) {
	limit := TokenBucketLimit(10, time.Hour, 1)
	d := Decision{Allowed: true, Remaining: 9, Limit: 10, RetryAfter: -1, ResetAfter: 3600 * sec}
	for _, size := range []int{16, MaxKeyLen} {
		key := []byte(strings.Repeat("k", size))
		req := frameOf(KindRequest, 1, 1, AppendItem(nil, OpAcquire, FlagAt, limit, 1, t0, key))
		buf := make([]byte, 0, 4096)
		var op Op
		var r Result
		name := "key=" + strconv.Itoa(size)

		b.Run(name+"/acquire-encode", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(req)))
			for b.Loop() {
				f, start := BeginFrame(buf[:0], KindRequest, 1)
				f = AppendItem(f, OpAcquire, FlagAt, limit, 1, t0, key)
				buf = EndFrame(f, start, 1)
			}
		})
		b.Run(name+"/acquire-decode", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(req)))
			for b.Loop() {
				frame, _, _, err := SplitFrame(req)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := DecodeOp(frame[HeaderLen:], &op); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/roundtrip", func(b *testing.B) {
			// Client encodes, server decodes and answers, client decodes.
			b.ReportAllocs()
			for b.Loop() {
				f, start := BeginFrame(buf[:0], KindRequest, 1)
				f = EndFrame(AppendItem(f, OpAcquire, FlagAt, limit, 1, t0, key), start, 1)
				frame, _, h, err := SplitFrame(f)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := DecodeOp(frame[HeaderLen:], &op); err != nil {
					b.Fatal(err)
				}
				f, start = BeginFrame(f[len(f):], KindResponse, h.ID)
				f = EndFrame(AppendDecision(f, op.Code, &d), start, 1)
				frame, _, _, err = SplitFrame(f[start:])
				if err != nil {
					b.Fatal(err)
				}
				if _, err := DecodeResult(frame[HeaderLen:], &r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("decision-encode", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 64)
		for b.Loop() {
			buf = AppendDecision(buf[:0], OpAcquire, &d)
		}
	})
	b.Run("decision-decode", func(b *testing.B) {
		b.ReportAllocs()
		enc := AppendDecision(nil, OpAcquire, &d)
		var r Result
		for b.Loop() {
			if _, err := DecodeResult(enc, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("baseline/decision-binary.Write+Read", func(b *testing.B) {
		b.ReportAllocs()
		var buf bytes.Buffer
		var got Decision
		for b.Loop() {
			buf.Reset()
			if err := binary.Write(&buf, binary.LittleEndian, &d); err != nil {
				b.Fatal(err)
			}
			if err := binary.Read(&buf, binary.LittleEndian, &got); err != nil {
				b.Fatal(err)
			}
		}
	})
}
