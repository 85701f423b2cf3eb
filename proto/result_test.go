package proto

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestResultRoundTrip(t *testing.T) {
	for _, want := range sampleResults() {
		t.Run(want.Code.String()+"/"+want.Status.String(), func(t *testing.T) {
			b := encodeResult([]byte("head"), &want)
			b = append(b, "tail"...)
			var got Result
			rest, err := DecodeResult(b[4:], &got)
			if err != nil {
				t.Fatal(err)
			}
			if string(rest) != "tail" {
				t.Fatalf("rest %q, want %q", rest, "tail")
			}
			if g, w := viewResult(&got), viewResult(&want); !reflect.DeepEqual(g, w) {
				t.Fatalf("decoded %+v\nwant    %+v", g, w)
			}
			if got.NEntries != want.NEntries || got.NStats != want.NStats {
				t.Fatalf("counts %d/%d, want %d/%d", got.NEntries, got.NStats, want.NEntries, want.NStats)
			}
		})
	}
}

func TestResultReuse(t *testing.T) {
	var r Result
	rs := sampleResults()
	for i := range 3 * len(rs) {
		want := &rs[(i*7)%len(rs)]
		if _, err := DecodeResult(encodeResult(nil, want), &r); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(viewResult(&r), viewResult(want)) {
			t.Fatalf("step %d: decoded %+v, want %+v", i, viewResult(&r), viewResult(want))
		}
		for j := r.NDecisions; j < MaxMulti; j++ {
			if r.Decisions[j] != (Decision{}) {
				t.Fatalf("step %d: decision %d of an earlier result shows through", i, j)
			}
		}
		for j := r.NLimits; j < MaxMulti; j++ {
			if r.Limits[j] != (Decision{}) {
				t.Fatalf("step %d: limit %d of an earlier result shows through", i, j)
			}
		}
	}
}

func TestDecodeResultErrors(t *testing.T) {
	set := func(r Result, off int, v ...byte) []byte {
		b := encodeResult(nil, &r)
		copy(b[off:], v)
		return b
	}
	cut := func(r Result, n int) []byte {
		b := encodeResult(nil, &r)
		return b[:len(b)-n]
	}
	acq := decisionResult(OpAcquire, Decision{Allowed: true, Remaining: 1, Limit: 2, RetryAfter: -1, ResetAfter: 0, Delay: 0})
	lea := leaseResult(Decision{Allowed: true, Remaining: 1, Limit: 2, RetryAfter: -1, ResetAfter: 0, Delay: 0}, 5)
	rel := releaseResult(true, Decision{Allowed: true, Remaining: 2, Limit: 2, RetryAfter: -1, ResetAfter: 0, Delay: 0})
	mul := multiResult(true, Decision{}, Decision{})
	lst := listResult(OpAcquire, 1, []Decision{{Allowed: true, Limit: 2}, {Limit: 3}})
	sc := scanResult(5, entryView{GCRA, 1, "a"}, entryView{GCRA, 2, "b"})
	st := statsResult(statView{"a", 1}, statView{"b", 2})
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrMalformed},
		{"one byte", []byte{2}, ErrMalformed},
		{"status 17", []byte{2, 17, 0, 0}, ErrMalformed},
		{"status 255", []byte{2, 255, 0, 0}, ErrMalformed},
		{"error without length", []byte{2, 9, 0}, ErrMalformed},
		{"error message too long", append([]byte{2, 9, 0x01, 0x04}, make([]byte, 1025)...), ErrMalformed},
		{"error message truncated", cut(errResult(OpPing, StatusInternal, "oops"), 1), ErrMalformed},
		{"OK opcode 0", []byte{0, 0}, ErrUnknownOpcode},
		{"OK opcode 16", []byte{16, 0}, ErrUnknownOpcode},
		{"hello truncated", cut(Result{Code: OpHello, Hello: testHello}, 1), ErrMalformed},
		{"decision truncated", cut(acq, 1), ErrMalformed},
		{"decision allowed 2", set(acq, 2, 2), ErrMalformed},
		{"lease truncated", cut(lea, 1), ErrMalformed},
		{"lease decision truncated", cut(lea, 9), ErrMalformed},
		{"lease allowed 2", set(lea, 2, 2), ErrMalformed},
		{"lease allowed and shadow-denied", set(lea, 2, 3), ErrMalformed},
		{"release truncated", cut(rel, 1), ErrMalformed},
		{"release released 2", set(rel, 2, 2), ErrMalformed},
		{"release allowed 2", set(rel, 3, 2), ErrMalformed},
		{"reset truncated", cut(Result{Code: OpReset}, 1), ErrMalformed},
		{"reset existed 2", set(Result{Code: OpReset}, 2, 2), ErrMalformed},
		{"limits truncated", cut(lst, 83), ErrMalformed},
		{"limits 0", set(lst, 2+41, 0), ErrMalformed},
		{"limits 17", set(lst, 2+41, 17), ErrMalformed},
		{"limits bound 2 of 2", set(lst, 2+41+1, 2), ErrMalformed},
		{"limits decision truncated", cut(lst, 1), ErrMalformed},
		{"limits decision allowed 2", set(lst, 2+43+41, 2), ErrMalformed},
		{"decision bit 6", set(acq, 2, 0x41), ErrMalformed},
		{"lease limits bit", set(lea, 2, 0x21), ErrMalformed},
		{"multi truncated", cut(mul, 83), ErrMalformed},
		{"multi allowed 2", set(mul, 2, 2), ErrMalformed},
		{"multi 0 decisions", set(mul, 3, 0), ErrMalformed},
		{"multi 17 decisions", set(mul, 3, 17), ErrMalformed},
		{"multi decision truncated", cut(mul, 1), ErrMalformed},
		{"multi decision allowed 2", set(mul, 4+41, 2), ErrMalformed},
		{"multi decision shadow-denied", set(mul, 4, 3), ErrMalformed},
		{"multi decision limits bit", set(mul, 4+41, 0x20), ErrMalformed},
		{"scan truncated", cut(sc, len(sc.Entries)+1), ErrMalformed},
		{"scan 1001 entries", set(sc, 10, 0xe9, 0x03), ErrMalformed},
		{"scan entry truncated", cut(sc, 1), ErrMalformed},
		{"scan entry algorithm 0", set(sc, 12, 0), ErrInvalidLimit},
		{"scan entry key empty", set(sc, 12+9, 0, 0), ErrInvalidKey},
		{"scan entry key too long", set(sc, 12+9, 0x01, 0x04), ErrInvalidKey},
		{"stats truncated", cut(st, len(st.Stats)+1), ErrMalformed},
		{"stats counter truncated", cut(st, 1), ErrMalformed},
		{"stats empty name", set(st, 4, 0), ErrMalformed},
		{"stats name past end", set(st, 4, 200), ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r Result
			rest, err := DecodeResult(tc.b, &r)
			checkErr(t, err, tc.want)
			if rest != nil {
				t.Fatalf("rest %x on error", rest)
			}
		})
	}
}

func TestDecodeResultTruncated(t *testing.T) {
	for _, r := range sampleResults() {
		b := encodeResult(nil, &r)
		for n := range len(b) {
			var got Result
			if _, err := DecodeResult(bytes.Clone(b[:n]), &got); StatusOf(err) != StatusMalformed {
				t.Fatalf("%v/%v cut to %d of %d bytes: %v, want malformed", r.Code, r.Status, n, len(b), err)
			}
		}
	}
}

func TestAppendError(t *testing.T) {
	for _, tc := range []struct {
		name    string
		s       Status
		msg     string
		wantS   Status
		wantMsg string
	}{
		{"short", StatusTableFull, "full", StatusTableFull, "full"},
		{"exactly the limit", StatusInternal, strings.Repeat("a", 1024), StatusInternal, strings.Repeat("a", 1024)},
		{"cut ASCII", StatusInternal, strings.Repeat("a", 1030), StatusInternal, strings.Repeat("a", 1024)},
		// "é" is 2 bytes; one "a" first puts a rune across the cut.
		{"cut at a rune", StatusInternal, "a" + strings.Repeat("é", 600), StatusInternal, "a" + strings.Repeat("é", 511)},
		{"cut at a 4-byte rune", StatusInternal, "ab" + strings.Repeat("😀", 300), StatusInternal, "ab" + strings.Repeat("😀", 255)},
		{"status OK", StatusOK, "x", StatusInternal, "x"},
		{"unknown status", 40, "x", StatusInternal, "x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r Result
			if _, err := DecodeResult(AppendError(nil, OpAcquire, tc.s, tc.msg), &r); err != nil {
				t.Fatal(err)
			}
			if r.Status != tc.wantS || string(r.Message) != tc.wantMsg {
				t.Fatalf("status %v message of %d bytes, want %v and %d bytes", r.Status, len(r.Message), tc.wantS, len(tc.wantMsg))
			}
			if !utf8.Valid(r.Message) {
				t.Fatalf("message is not UTF-8")
			}
		})
	}
}

func TestStatus(t *testing.T) {
	if StatusOK.Err() != nil || StatusOf(nil) != StatusOK {
		t.Fatal("StatusOK does not map to nil")
	}
	seen := map[error]Status{}
	for s := StatusMalformed; s <= StatusDenied; s++ {
		err := s.Err()
		if err == nil || !strings.HasPrefix(err.Error(), "proto: ") {
			t.Fatalf("%v.Err() = %v", s, err)
		}
		if prev, dup := seen[err]; dup {
			t.Fatalf("%v and %v share an error", prev, s)
		}
		seen[err] = s
		if got := StatusOf(fmt.Errorf("context: %w", err)); got != s {
			t.Fatalf("StatusOf(%v) = %v, want %v", err, got, s)
		}
	}
	for s, want := range map[Status]string{StatusOK: "OK", StatusTableFull: "TableFull", StatusDenied: "Denied", 17: "status(17)"} {
		if s.String() != want {
			t.Errorf("Status(%d).String() = %q, want %q", s, s.String(), want)
		}
	}
	if Status(17).Err() != ErrMalformed || Status(17).Valid() || !StatusDenied.Valid() {
		t.Fatal("status 17 is not malformed")
	}
	if StatusOf(ErrShortHeader) != StatusMalformed || StatusOf(errors.New("other")) != StatusInternal {
		t.Fatal("StatusOf fallbacks")
	}
	// Codec errors travel as statuses and come back as themselves.
	for _, err := range []error{ErrMalformed, ErrBadVersion, ErrFrameTooLarge, ErrBatchTooLarge,
		ErrUnknownOpcode, ErrInvalidLimit, ErrInvalidKey, ErrTooManyItems} {
		if StatusOf(err).Err() != err {
			t.Errorf("%v does not survive the wire", err)
		}
	}
}

func TestResultErr(t *testing.T) {
	r := errResult(OpAcquire, StatusTableFull, "shm: table full")
	err := r.Err()
	if !errors.Is(err, ErrStatusTableFull) || err.Error() != "proto: table full: shm: table full" {
		t.Fatalf("Err() = %v", err)
	}
	if r := errResult(OpAcquire, StatusBusy, ""); r.Err() != ErrStatusBusy {
		t.Fatalf("Err() without a message = %v", r.Err())
	}
	if r := (Result{Code: OpPing}); r.Err() != nil {
		t.Fatalf("OK result Err() = %v", r.Err())
	}
}

func TestScanResultPatch(t *testing.T) {
	// The server writes entries, then the cursor and count, in a buffer
	// that grows (moves) in between.
	b, start := BeginScanResult(make([]byte, 3, 3), 99)
	for i := range 100 {
		b = AppendScanEntry(b, FixedWindow, int64(i), []byte(fmt.Sprint("key", i)))
	}
	b = EndScanResult(b, start, 12345, 100)
	var r Result
	rest, err := DecodeResult(b[start:], &r)
	if err != nil || len(rest) != 0 {
		t.Fatalf("rest %d, err %v", len(rest), err)
	}
	v := viewResult(&r)
	if r.Next != 12345 || len(v.Entries) != 100 || v.Entries[99] != (entryView{FixedWindow, 99, "key99"}) {
		t.Fatalf("next %d, %d entries, last %+v", r.Next, len(v.Entries), v.Entries[len(v.Entries)-1])
	}
}
