package shm

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/sluicehq/sluice/vocab"
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
//   - on a table (not an image: tags on disk are rewritten by the next
//     open) every slot's tag is that of its fingerprint, 0 if it is empty;
//   - every bucket is reachable: it lies within the probe cap and the reach
//     of its home slot, with no empty slot in between;
//   - every block lies in the arena, overlaps no other, matches its
//     checksum and is marked in the bitmap, and (on a table, not an image
//     of a file in use) no cell is marked that no block holds.
func (t *Table) Verify() error { return t.verify(nil) }

// Image.Verify's patience with a slot that is being written: it reads a
// slot with a problem again this many times, this far apart.
const (
	liveRetries = 5
	liveBackoff = 2 * time.Millisecond
	maxRetried  = 1000
)

// verify checks the invariants Verify lists. With an image, the file may be
// in use: a lock held by a live process is not a problem (the slot is
// skipped, unless the lock stays held across the retries by a process that
// is gone), a version older than FormatVersion is not (the owner upgrades
// it), and a slot whose problems vanish when it is read again was being
// written.
func (t *Table) verify(im *Image) error {
	var problems []error
	total := 0
	report := func(err error) {
		total++
		if len(problems) < maxProblems {
			problems = append(problems, err)
		}
	}
	if v, err := validateHeader(t.headerBytes(), versionSize(t.version, t.n, int(t.slotSize), t.cells)); err != nil {
		report(fmt.Errorf("header: %w", err))
	} else if v != FormatVersion && im == nil {
		report(fmt.Errorf("header: version %d, want %d", v, FormatVersion))
	}
	// Only a file in use changes under the check; a damaged one would make
	// every retry wait for nothing, so retries stop after maxRetried slots.
	retried, live := 0, false
	if im != nil {
		st, _ := im.state()
		live = st == InUse
	}
	seen := make(map[Fingerprint]uint64)
	for i := range t.n {
		errs := t.checkSlot(i, im, seen)
		if live && len(errs) > 0 && retried < maxRetried {
			retried++
			for retry := 0; len(errs) > 0 && retry < liveRetries; retry++ {
				time.Sleep(liveBackoff)
				errs = t.checkSlot(i, im, seen)
			}
		}
		for _, err := range errs {
			report(err)
		}
		if fp := loadFP(t.slotPtr(i)); fp != (Fingerprint{}) {
			if _, dup := seen[fp]; !dup {
				seen[fp] = i
			}
		}
	}
	if !live {
		t.checkArena(report)
	}
	if total == 0 {
		return nil
	}
	if total > len(problems) {
		problems = append(problems, fmt.Errorf("and %d more problems", total-len(problems)))
	}
	return errors.Join(append([]error{ErrCorrupt}, problems...)...)
}

// checkSlot returns the problems of slot i; seen maps the fingerprints of
// the slots before it to their index.
func (t *Table) checkSlot(i uint64, im *Image, seen map[Fingerprint]uint64) []error {
	var problems []error
	report := func(format string, args ...any) {
		problems = append(problems, fmt.Errorf("slot %d: "+format, append([]any{i}, args...)...))
	}
	p := t.slotPtr(i)
	s := Slot{p, i, t}
	w := *u32at(p, slotLock)
	if w&lockHeld != 0 && im != nil {
		if _, live := im.liveHolder(w & genMask >> genShift); live {
			return nil // being written; a held lock is no damage
		}
		report("lock held by a process that is gone (the next open releases it)")
		return problems
	}
	if w&lockHeld != 0 || w&(1<<reachShift-1) != 0 {
		report("lock word %#08x is held or has stray bits", w)
	}
	if got, want := *u32at(p, slotSum), checksumOf(p); got != want {
		report("checksum %#08x, want %#08x (a torn write or a flipped bit)", got, want)
	}
	if im == nil && t.tags != nil {
		if got, want := t.tagAt(i), t.slotTag(i); got != want {
			report("tag %#02x, want %#02x", got, want)
		}
	}
	fp := s.Fingerprint()
	if fp == (Fingerprint{}) {
		for _, b := range t.slotBytes(i) {
			if b != 0 {
				report("empty slot is not zero")
				break
			}
		}
		return problems
	}
	if n := int(*u16at(p, slotKeyLen)); n > 0 {
		if n > t.room {
			report("inline key of %d bytes in a slot with room for %d", n, t.room)
		} else if *u32at(p, slotKeySum) != uint32(xxhash.Sum64(keyBytes(p, n))) {
			report("inline key checksum mismatch")
		}
	}
	if f := *u8at(p, slotFlags); f&^(flagLive|flagConservative|flagBlock) != 0 || f&flagLive == 0 && f != 0 {
		report("invalid flags %#02x", f)
	}
	if !s.Live() && (s.FreshAt() != math.MinInt64 || *s.State() != [StateWords]int64{}) {
		report("slot that is not live holds state")
	}
	if j, dup := seen[fp]; dup {
		report("fingerprint also in slot %d", j)
	}
	h := t.home(fp)
	d := (i + t.n - h) % t.n
	gap := false
	for k := uint64(1); k <= d && k <= t.probeCap; k++ {
		if loadFP(t.slotPtr((i+t.n-k)%t.n)) == (Fingerprint{}) {
			gap = true
			break
		}
	}
	if d >= t.probeCap || gap || d > t.reach(h) {
		report("unreachable from its home slot %d (displacement %d, reach %d)", h, d, t.reach(h))
	}
	return problems
}

// checkArena reports blocks outside the arena, overlapping or failing their
// checksum, and bitmap bits that disagree with the blocks.
func (t *Table) checkArena(report func(error)) {
	if t.cells == 0 {
		return
	}
	owned := make([]uint64, (t.cells+63)/64)
	for i := range t.n {
		p := t.slotPtr(i)
		if *u8at(p, slotFlags)&flagBlock == 0 {
			continue
		}
		start, words := blockOf(stateAt(p)[stateBlock])
		if !t.inArena(start, words) {
			report(fmt.Errorf("slot %d: block of %d words at cell %d is outside the arena of %d cells", i, words, start, t.cells))
			continue
		}
		if vocab.BlockSum(t.blockWords(start, words)) != stateAt(p)[stateSum] {
			report(fmt.Errorf("slot %d: block at cell %d fails its checksum", i, start))
		}
		for c := start; c < start+cellsFor(words); c++ {
			if owned[c/64]&(1<<(c%64)) != 0 {
				report(fmt.Errorf("slot %d: block at cell %d overlaps another at cell %d", i, start, c))
				break
			}
			owned[c/64] |= 1 << (c % 64)
		}
	}
	for w := range owned {
		if got := *t.bitmapWord(uint64(w)); got != owned[w] {
			report(fmt.Errorf("arena bitmap word %d is %#016x, the blocks hold %#016x", w, got, owned[w]))
			return
		}
	}
}
