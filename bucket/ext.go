package bucket

import (
	"fmt"

	"github.com/sluicehq/sluice/vocab"
)

// The extended algorithms (sliding_log, window_counters, concurrency) keep
// state that does not fit in a State: their extension, ext, a block of
// l.ExtWords() int64 words that the table allocates beside the slot, which
// every entry point (apply.go) takes beside the State; the others take nil.
//
// State words of the extended algorithms. Word 0 is the algorithm's (see
// each one); word 1 is vocab.BlockSum(ext) after every method that writes, kept up
// to date word by word as the extension changes, so that the table can tell
// a torn block on recovery (s[extSum] != vocab.BlockSum(ext): use Drained); word
// 2 belongs to the table (it keeps the block's reference there) and is never
// read or written here.
const extSum = 1

// ExtWords returns the number of int64 words of l's extension: sliding_log
// Max; window_counters Counters+1; concurrency 2*Max; 0 for the algorithms
// whose State holds everything. l must have passed Validate.
func (l *Limit) ExtWords() int {
	switch l.Algorithm {
	case SlidingLog:
		return int(l.Max)
	case WindowCounters:
		return int(l.Counters) + 1
	case Concurrency:
		return 2 * int(l.Max)
	}
	return 0
}

// setExt stores v in ext[i], keeping s[extSum] the checksum of ext, and
// reports whether the word changed.
func setExt(s *State, ext []int64, i int, v int64) bool {
	old := ext[i]
	if old == v {
		return false
	}
	ext[i] = v
	s[extSum] = int64(uint64(s[extSum]) + vocab.BlockTerm(i, v) - vocab.BlockTerm(i, old))
	return true
}

// checkExt panics unless ext has l's length (nil for an algorithm whose
// State holds everything): the table allocated the wrong block, a broken
// invariant of the caller like an unvalidated Limit.
func (l *Limit) checkExt(ext []int64) {
	if n := l.ExtWords(); len(ext) != n {
		panic(fmt.Sprintf("bucket: %v: extension of %d words, want %d", l.Algorithm, len(ext), n))
	}
}
