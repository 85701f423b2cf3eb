package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
)

// FuzzTable decodes the input into a sequence of operations on a small table
// and checks each result against a Go map: a bucket whose FreshAt is still
// ahead is never lost, a bucket never reads another's value, ErrTableFull
// happens only when the probe window really is full, and the table verifies
// at the end.
func FuzzTable(f *testing.F) {
	f.Add([]byte{0, 1, 5, 0, 2, 5, 1, 1, 0, 3, 3, 2, 1, 0, 1, 0})
	f.Add([]byte{0, 1, 7, 0, 2, 7, 0, 3, 7, 0, 4, 7, 0, 5, 7, 3, 9, 0, 6, 1, 1, 1, 0})
	f.Add([]byte("\x00\x01\x02\x00\x11\x02\x00\x21\x02\x02\x01\x00\x01\x01\x00\x03\x05\x00"))
	f.Fuzz(func(t *testing.T, ops []byte) {
		const keys = 24
		tb := newHeap(t, Options{SlotCount: 16, ProbeCap: 4})
		type bucket struct{ v, freshAt int64 }
		model := map[int]bucket{}
		now := int64(0)
		name := func(k int) string { return fmt.Sprintf("key-%d", k) }
		for i := 0; i+2 < len(ops); i += 3 {
			op, k, arg := ops[i]%4, int(ops[i+1])%keys, int64(ops[i+2])
			switch op {
			case 0: // create or update
				s, found, err := tb.LookupOrInsert(fp(tb, name(k)), 1, nil, now, nil)
				if errors.Is(err, ErrTableFull) {
					h := tb.home(fp(tb, name(k)))
					for j := range tb.probeCap {
						p := tb.slotPtr((h + j) % tb.n)
						if loadFP(p) == (Fingerprint{}) || reclaimable(p, now) {
							t.Fatalf("op %d: table full with slot %d free", i/3, (h+j)%tb.n)
						}
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				if m, ok := model[k]; ok && m.freshAt > now && (!found || !s.Live() || s.State()[0] != m.v) {
					t.Fatalf("op %d: %s found=%v live=%v, model has %d", i/3, name(k), found, s.Live(), m.v)
				}
				v := int64(i)
				*s.State() = [StateWords]int64{v}
				s.Commit(now + arg%8)
				model[k] = bucket{v, now + arg%8}
			case 1: // read
				v, ok := get(tb, name(k))
				m, inModel := model[k]
				if ok && (!inModel || v != m.v) {
					t.Fatalf("op %d: %s = %d, model %v %d", i/3, name(k), v, inModel, m.v)
				}
				if !ok && inModel && m.freshAt > now {
					t.Fatalf("op %d: %s lost before it was fresh", i/3, name(k))
				}
			case 2: // reset
				if s, ok := tb.lookup(fp(tb, name(k))); ok {
					s.Clear(nil)
				}
				delete(model, k)
			case 3: // time passes
				now += arg % 4
			}
		}
		// Every bucket still ahead of its FreshAt is present.
		for k, m := range model {
			if v, ok := get(tb, name(k)); m.freshAt > now && (!ok || v != m.v) {
				t.Fatalf("end: %s = %d, %v; model %d", name(k), v, ok, m.v)
			}
		}
	})
}

// FuzzValidateHeader: validating any header bytes never panics, and a header
// that validates describes a geometry that fits the file size it was
// checked against.
func FuzzValidateHeader(f *testing.F) {
	good := make([]byte, HeaderSize)
	if err := writeHeader(good, Options{SlotCount: 8, SlotSize: 64, ProbeCap: 8}, 0); err != nil {
		f.Fatal(err)
	}
	f.Add(good[:checksummed+8], fileSize(8, 64, 0))
	f.Add([]byte(magic), int64(0))
	f.Fuzz(func(t *testing.T, prefix []byte, size int64) {
		hdr := make([]byte, HeaderSize)
		copy(hdr, prefix)
		v, err := validateHeader(hdr, size)
		if err != nil {
			return
		}
		le := binary.LittleEndian
		n, ss, pc, cells := le.Uint64(hdr[offSlotCount:]), int(le.Uint32(hdr[offSlotSize:])), uint64(le.Uint32(hdr[offProbeCap:])), uint64(0)
		if v >= arenaVersion {
			cells = le.Uint64(hdr[offArenaCells:])
		}
		own := versionSize(v, n, ss, cells)
		upgraded := grownSize(hdr, v, size)
		if size != own && !upgraded || pc < 1 || pc > n {
			t.Fatalf("validated header: %d slots of %d bytes, probe cap %d, file of %d bytes", n, ss, pc, size)
		}
	})
}
