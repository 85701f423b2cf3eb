package shm

import (
	"errors"
	"fmt"
	"math"

	"github.com/cespare/xxhash/v2"
)

// maxProblems bounds the problems Verify reports.
const maxProblems = 10

// Verify checks the table's invariants and returns ErrCorrupt, joined with a
// description of each problem found (at most ten), or nil. It must not run
// concurrently with any other method. The invariants:
//
//   - the header validates as Open would;
//   - no slot's lock is held and no lock word has stray bits;
//   - every slot's checksum matches; an empty slot is all zero;
//   - inline keys fit the slot and match their checksum;
//   - a slot that is not live has no state and FreshAt math.MinInt64;
//   - no fingerprint occupies two slots;
//   - every bucket is reachable: it lies within the probe cap and the reach
//     of its home slot, with no empty slot in between.
func (t *Table) Verify() error {
	var problems []error
	report := func(format string, args ...any) {
		if len(problems) < maxProblems {
			problems = append(problems, fmt.Errorf(format, args...))
		}
	}
	if v, err := validateHeader(t.headerBytes(), HeaderSize+int64(t.n)*int64(t.slotSize)); err != nil {
		report("header: %w", err)
	} else if v != FormatVersion {
		report("header: version %d, want %d", v, FormatVersion)
	}
	run := make([]uint16, t.n)
	t.runs(run, func(i uint64) bool { return loadFP(t.slotPtr(i)) != (Fingerprint{}) })
	seen := make(map[Fingerprint]uint64)
	for i := range t.n {
		p := t.slotPtr(i)
		s := Slot{p, i, t}
		if w := *u32at(p, slotLock); w&lockHeld != 0 || w&(1<<reachShift-1) != 0 {
			report("slot %d: lock word %#08x is held or has stray bits", i, w)
		}
		if got, want := *u32at(p, slotSum), checksumOf(p); got != want {
			report("slot %d: checksum %#08x, want %#08x", i, got, want)
		}
		fp := s.Fingerprint()
		if fp == (Fingerprint{}) {
			for _, b := range t.slotBytes(i) {
				if b != 0 {
					report("slot %d: empty slot is not zero", i)
					break
				}
			}
			continue
		}
		if n := int(*u16at(p, slotKeyLen)); n > 0 {
			if n > t.room {
				report("slot %d: inline key of %d bytes in a slot with room for %d", i, n, t.room)
			} else if *u32at(p, slotKeySum) != uint32(xxhash.Sum64(keyBytes(p, n))) {
				report("slot %d: inline key checksum mismatch", i)
			}
		}
		if f := *u8at(p, slotFlags); f&^(flagLive|flagConservative) != 0 || f == flagConservative {
			report("slot %d: invalid flags %#02x", i, f)
		}
		if !s.Live() && (s.FreshAt() != math.MinInt64 || *s.State() != [StateWords]int64{}) {
			report("slot %d: slot that is not live holds state", i)
		}
		if j, dup := seen[fp]; dup {
			report("slot %d: fingerprint also in slot %d", i, j)
		}
		seen[fp] = i
		h := t.home(fp)
		d := (i + t.n - h) % t.n
		if d >= t.probeCap || d >= uint64(run[i]) || d > t.reach(h) {
			report("slot %d: unreachable from its home slot %d (displacement %d, reach %d)", i, h, d, t.reach(h))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return errors.Join(append([]error{ErrCorrupt}, problems...)...)
}
