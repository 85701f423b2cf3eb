package proto

import (
	"encoding/binary"
	"math"
	"strconv"

	"github.com/sluicehq/sluice/vocab"
)

// Protocol constants. doc.go gives their meaning on the wire.
const (
	Version       = 7               // the version this package speaks: the version byte of the frames it begins
	MinVersion    = 1               // the oldest version a peer of this package still reads and answers
	HeaderLen     = 12              // bytes of the frame header, the length field included
	MaxFrameLen   = 1 << 20         // the largest length field: bytes after it, header rest and body
	MaxBatch      = vocab.MaxBatch  // the most operations (or results) in one frame
	MaxKeyLen     = vocab.MaxKeyLen // the longest key or scan prefix, in bytes
	MaxMulti      = vocab.MaxMulti  // the most items in one MULTI
	MaxMessageLen = 1024            // the longest error message of a result, in bytes
	MaxScanCount  = 1000            // the largest count of a SCAN
)

// Header field offsets, from the start of the frame.
const (
	offLength  = 0 // u32: bytes after this field
	offVersion = 4 // u8
	offKind    = 5 // u8
	offCount   = 6 // u16
	offID      = 8 // u32

	minLength = HeaderLen - 4 // the length field of a frame with an empty body
)

// Kind tells requests from responses: the header byte at offset 5.
type Kind uint8

// The frame kinds.
const (
	KindRequest  Kind = 1 // client to server: operations
	KindResponse Kind = 2 // server to client: results
)

// String returns "request", "response", or "kind(N)" for another value.
func (k Kind) String() string {
	switch k {
	case KindRequest:
		return "request"
	case KindResponse:
		return "response"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Header is a decoded frame header.
type Header struct {
	Length  uint32 // bytes after the length field: HeaderLen-4 + body length
	Version uint8  // Version
	Kind    Kind   // KindRequest or KindResponse
	Count   uint16 // operations (request) or results (response) in the body, 1..MaxBatch
	ID      uint32 // chosen by the client; a response carries its request's id
}

// ParseHeader decodes the frame header at the start of b, which must hold
// at least HeaderLen bytes, and checks, in this order: the version
// (ErrBadVersion), the kind (ErrMalformed), the length field against
// HeaderLen-4 (ErrMalformed) and MaxFrameLen (ErrFrameTooLarge), the count
// against 1 (ErrMalformed) and MaxBatch (ErrBatchTooLarge). With fewer than
// HeaderLen bytes it returns ErrShortHeader and a zero Header. On any other
// error the Header holds the fields as read, so a server can answer the
// frame's id.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderLen {
		return Header{}, errorf(ErrShortHeader, "%d of %d bytes", len(b), HeaderLen)
	}
	h := Header{
		Length:  binary.LittleEndian.Uint32(b[offLength:]),
		Version: b[offVersion],
		Kind:    Kind(b[offKind]),
		Count:   binary.LittleEndian.Uint16(b[offCount:]),
		ID:      binary.LittleEndian.Uint32(b[offID:]),
	}
	switch {
	case h.Version < MinVersion || h.Version > Version:
		return h, errorf(ErrBadVersion, "version %d, this side speaks %d to %d", h.Version, MinVersion, Version)
	case h.Kind != KindRequest && h.Kind != KindResponse:
		return h, errorf(ErrMalformed, "frame kind %d", h.Kind)
	case h.Length < minLength:
		return h, errorf(ErrMalformed, "frame length %d, below %d", h.Length, minLength)
	case h.Length > MaxFrameLen:
		return h, errorf(ErrFrameTooLarge, "length %d, limit %d", h.Length, MaxFrameLen)
	case h.Count == 0:
		return h, errorf(ErrMalformed, "frame count 0")
	case h.Count > MaxBatch:
		return h, errorf(ErrBatchTooLarge, "count %d, limit %d", h.Count, MaxBatch)
	}
	return h, nil
}

// SplitFrame returns the first complete frame in buf (header included), the
// bytes after it, and its header. frame == nil and err == nil means more
// bytes are needed: rest is then buf, and h is the zero Header when buf
// holds less than a header, the checked header otherwise (a reader grows its
// buffer to 4+h.Length bytes). The header is checked as ParseHeader does,
// before any body byte is needed, so a length above MaxFrameLen is refused
// before the caller allocates for it; on error h holds the fields as read
// (the id to answer) and frame and rest are nil.
//
// frame and rest alias buf; frame's capacity ends at its last byte, so
// appending to it cannot overwrite rest.
func SplitFrame(buf []byte) (frame, rest []byte, h Header, err error) {
	if len(buf) < HeaderLen {
		return nil, buf, Header{}, nil
	}
	h, err = ParseHeader(buf)
	if err != nil {
		return nil, nil, h, err
	}
	n := 4 + int(h.Length)
	if len(buf) < n {
		return nil, buf, h, nil
	}
	return buf[:n:n], buf[n:], h, nil
}

// BeginFrame appends a frame header to dst with the given kind and id and a
// placeholder length and count, and returns the extended buffer and the
// offset of the frame in it. Append the operations or results to b, then
// call EndFrame(b, start, count).
func BeginFrame(dst []byte, kind Kind, id uint32) (b []byte, start int) {
	return BeginFrameVersion(dst, Version, kind, id)
}

// BeginFrameVersion is BeginFrame for a frame of version v: a server
// answers each request in the request's version.
func BeginFrameVersion(dst []byte, v uint8, kind Kind, id uint32) (b []byte, start int) {
	start = len(dst)
	b = append(dst, 0, 0, 0, 0, v, byte(kind), 0, 0)
	b = binary.LittleEndian.AppendUint32(b, id)
	return b, start
}

// EndFrame writes the length and count fields of the frame BeginFrame
// started at offset start of b, and returns b. count is the number of
// operations or results appended since. The caller keeps the frame within
// the limits (count 1..MaxBatch, len(b)-start <= 4+MaxFrameLen): EndFrame
// writes what it is given, so tests can build bad frames, and panics only
// on values the fields cannot hold.
func EndFrame(b []byte, start int, count int) []byte {
	length := len(b) - start - 4
	if count < 0 || count > math.MaxUint16 || length < minLength || length > math.MaxUint32 {
		panic("proto: EndFrame: count " + strconv.Itoa(count) + " or length " +
			strconv.Itoa(length) + " does not fit the header")
	}
	binary.LittleEndian.PutUint32(b[start+offLength:], uint32(length))
	binary.LittleEndian.PutUint16(b[start+offCount:], uint16(count))
	return b
}
