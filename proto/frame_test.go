package proto

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"strings"
	"testing"
)

// header returns a 12-byte header with the given fields.
func header(length uint32, version uint8, kind Kind, count uint16, id uint32) []byte {
	b := binary.LittleEndian.AppendUint32(nil, length)
	b = append(b, version, byte(kind))
	b = binary.LittleEndian.AppendUint16(b, count)
	return binary.LittleEndian.AppendUint32(b, id)
}

func TestParseHeader(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"request", header(9, 1, KindRequest, 1, 7), nil},
		{"response", header(9, 1, KindResponse, 1, 7), nil},
		{"empty body", header(8, 1, KindRequest, 1, 7), nil},
		{"largest", header(MaxFrameLen, 1, KindRequest, MaxBatch, 7), nil},
		{"short", header(9, 1, KindRequest, 1, 7)[:11], ErrShortHeader},
		{"version 0", header(9, 0, KindRequest, 1, 7), ErrBadVersion},
		{"version 2", header(9, 2, KindRequest, 1, 7), nil},
		{"version 3", header(9, 3, KindRequest, 1, 7), nil},
		{"version 4", header(9, 4, KindRequest, 1, 7), nil},
		{"version 5", header(9, 5, KindRequest, 1, 7), nil},
		{"version 8", header(9, 8, KindRequest, 1, 7), ErrBadVersion},
		{"version before length", header(1<<31, 8, KindRequest, 1, 7), ErrBadVersion},
		{"kind 0", header(9, 1, 0, 1, 7), ErrMalformed},
		{"kind 3", header(9, 1, 3, 1, 7), ErrMalformed},
		{"length 7", header(7, 1, KindRequest, 1, 7), ErrMalformed},
		{"length too large", header(MaxFrameLen+1, 1, KindRequest, 1, 7), ErrFrameTooLarge},
		{"length max u32", header(1<<32-1, 1, KindRequest, 1, 7), ErrFrameTooLarge},
		{"count 0", header(9, 1, KindRequest, 0, 7), ErrMalformed},
		{"count too large", header(9, 1, KindRequest, MaxBatch+1, 7), ErrBatchTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := ParseHeader(tc.b)
			checkErr(t, err, tc.want)
			if tc.want == ErrShortHeader {
				if h != (Header{}) {
					t.Fatalf("short header returned %+v", h)
				}
				return
			}
			// The fields are returned as read even on error: the id to answer.
			want := Header{binary.LittleEndian.Uint32(tc.b), tc.b[4], Kind(tc.b[5]), binary.LittleEndian.Uint16(tc.b[6:]), 7}
			if h != want {
				t.Fatalf("header %+v, want %+v", h, want)
			}
		})
	}
}

func TestSplitFrame(t *testing.T) {
	ping := frameOf(KindRequest, 1, 1, AppendPing(nil))
	acquire := frameOf(KindRequest, 2, 1, AppendItem(nil, OpAcquire, 0, GCRALimit(1, 1, 1), 1, 0, []byte("k")))
	stream := append(append([]byte{}, ping...), acquire...)

	// Every prefix of the stream splits into the complete frames it holds.
	for n := 0; n <= len(stream); n++ {
		var got [][]byte
		rest := stream[:n]
		for {
			frame, r, h, err := SplitFrame(rest)
			if err != nil {
				t.Fatalf("prefix %d: %v", n, err)
			}
			if frame == nil {
				if !bytes.Equal(r, rest) {
					t.Fatalf("prefix %d: need more, but rest is not the input", n)
				}
				if len(rest) >= HeaderLen && int(h.Length)+4 <= len(rest) {
					t.Fatalf("prefix %d: complete frame not returned", n)
				}
				break
			}
			if len(frame) != int(h.Length)+4 || cap(frame) != len(frame) {
				t.Fatalf("prefix %d: frame len %d cap %d, header length %d", n, len(frame), cap(frame), h.Length)
			}
			got, rest = append(got, frame), r
		}
		var want [][]byte
		if n >= len(ping) {
			want = append(want, ping)
		}
		if n == len(stream) {
			want = append(want, acquire)
		}
		if len(got) != len(want) || (len(got) > 0 && !bytes.Equal(bytes.Join(got, nil), bytes.Join(want, nil))) {
			t.Fatalf("prefix %d: got %d frames, want %d", n, len(got), len(want))
		}
	}

	// A length above MaxFrameLen is refused from the header alone.
	big := header(MaxFrameLen+1, 1, KindRequest, 1, 9)
	frame, rest, h, err := SplitFrame(big)
	checkErr(t, err, ErrFrameTooLarge)
	if frame != nil || rest != nil || h.ID != 9 {
		t.Fatalf("got frame %v rest %v id %d", frame, rest, h.ID)
	}
}

// TestFrameExample checks the example in doc.go.
func TestFrameExample(t *testing.T) {
	req := frameOf(KindRequest, 1, 1, AppendPing(nil))
	resp := frameOf(KindResponse, 1, 1, AppendPong(nil))
	for _, tc := range []struct {
		got  []byte
		want string
	}{
		{req, "09000000 07 01 0100 01000000 02"},
		{resp, "0a000000 07 02 0100 01000000 02 00"},
	} {
		want, err := hex.DecodeString(strings.ReplaceAll(tc.want, " ", ""))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(tc.got, want) {
			t.Errorf("got %x, want %s", tc.got, tc.want)
		}
	}
}

func TestBeginEndFrame(t *testing.T) {
	// Frames append after existing bytes and patch only their own header.
	b := []byte("prefix")
	b, start := BeginFrame(b, KindResponse, 0xdeadbeef)
	if start != 6 || len(b) != 6+HeaderLen {
		t.Fatalf("start %d len %d", start, len(b))
	}
	b = AppendPong(b)
	b = AppendPong(b)
	b = EndFrame(b, start, 2)
	if string(b[:6]) != "prefix" {
		t.Fatalf("prefix overwritten: %q", b[:6])
	}
	h, err := ParseHeader(b[start:])
	if err != nil {
		t.Fatal(err)
	}
	if want := (Header{12, Version, KindResponse, 2, 0xdeadbeef}); h != want {
		t.Fatalf("header %+v, want %+v", h, want)
	}
}

func TestEndFramePanics(t *testing.T) {
	for _, count := range []int{-1, 1 << 16} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("EndFrame(count %d) did not panic", count)
				}
			}()
			b, start := BeginFrame(nil, KindRequest, 0)
			EndFrame(b, start, count)
		}()
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{KindRequest: "request", KindResponse: "response", 0: "kind(0)", 9: "kind(9)"} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", k, got, want)
		}
	}
}
