package global

import (
	"sync/atomic"
	"unsafe"
)

// Atomic words of the lease journal's mapping. Invariants: the mapping
// starts on a page boundary, records are 512 bytes from offset 64, and
// every word is at a multiple of 8 within its record, so every word is
// 8-byte aligned, as atomics need. The atomics order the stores: a record's
// fields are in memory before its held word says so, and a lowered token
// count before the decision it pays for.

func wordAt(b []byte, off int) *int64 { return (*int64)(unsafe.Pointer(&b[off : off+8][0])) }

func loadWord(b []byte, off int) int64 { return atomic.LoadInt64(wordAt(b, off)) }

func storeWord(b []byte, off int, v int64) { atomic.StoreInt64(wordAt(b, off), v) }

// ownedString returns b as a string without copying it: b must never be
// written again (a buffer filled for the string alone).
func ownedString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
