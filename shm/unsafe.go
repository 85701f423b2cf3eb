package shm

// This file holds every pointer conversion of the package. The invariants
// that make them valid:
//
//   - t.base points at the first byte of a mapping (or of a heap buffer of
//     []uint64, hence 8-byte aligned) that is HeaderSize+slotCount*slotSize
//     bytes long and stays mapped until Close. Mapped memory is not managed by
//     the garbage collector; the heap buffer is kept alive by t.heap.
//   - HeaderSize and every slot size are multiples of 64, so every slot starts
//     on a 64-byte boundary and every field that format.go places at an offset
//     that is a multiple of 4 (8) is 4- (8-) byte aligned, as sync/atomic
//     requires. format_test.go asserts this.
//   - slotPtr is the only function that turns a slot index into memory, and
//     it is only called with i < t.n.

import (
	"sync/atomic"
	"unsafe"
)

// slotPtr returns the address of slot i. i must be < t.n.
func (t *Table) slotPtr(i uint64) unsafe.Pointer {
	return unsafe.Add(t.base, HeaderSize+uintptr(i)*t.slotSize)
}

// headerBytes returns the header page as a byte slice.
func (t *Table) headerBytes() []byte { return unsafe.Slice((*byte)(t.base), HeaderSize) }

// slotBytes returns slot i as a byte slice.
func (t *Table) slotBytes(i uint64) []byte {
	return unsafe.Slice((*byte)(t.slotPtr(i)), t.slotSize)
}

func u32at(p unsafe.Pointer, off uintptr) *uint32 { return (*uint32)(unsafe.Add(p, off)) }
func u64at(p unsafe.Pointer, off uintptr) *uint64 { return (*uint64)(unsafe.Add(p, off)) }
func i64at(p unsafe.Pointer, off uintptr) *int64  { return (*int64)(unsafe.Add(p, off)) }
func u8at(p unsafe.Pointer, off uintptr) *uint8   { return (*uint8)(unsafe.Add(p, off)) }
func u16at(p unsafe.Pointer, off uintptr) *uint16 { return (*uint16)(unsafe.Add(p, off)) }

// stateAt returns the state words of the slot at p.
func stateAt(p unsafe.Pointer) *[StateWords]int64 {
	return (*[StateWords]int64)(unsafe.Add(p, slotState))
}

// summedWords returns the words of the slot at p that its checksum covers.
func summedWords(p unsafe.Pointer) *[(summedTo - summedFrom) / 8]uint64 {
	return (*[(summedTo - summedFrom) / 8]uint64)(unsafe.Add(p, summedFrom))
}

// keyBytes returns the n inline key bytes of the slot at p.
func keyBytes(p unsafe.Pointer, n int) []byte {
	return unsafe.Slice((*byte)(unsafe.Add(p, slotKey)), n)
}

// loadFP reads the fingerprint of the slot at p without its lock. The two
// halves are read separately, so the result may mix an old and a new value
// while a slot is being claimed; callers confirm under the lock.
func loadFP(p unsafe.Pointer) Fingerprint {
	return Fingerprint{atomic.LoadUint64(u64at(p, slotFP0)), atomic.LoadUint64(u64at(p, slotFP1))}
}

// heapBuffer allocates an 8-byte-aligned zeroed buffer of n bytes (n a
// multiple of 8) and returns it with the pointer to its first byte.
func heapBuffer(n uintptr) ([]uint64, unsafe.Pointer) {
	buf := make([]uint64, n/8)
	return buf, unsafe.Pointer(unsafe.SliceData(buf))
}

// mappingBase returns the address of the first byte of a mapping.
func mappingBase(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }

// littleEndian reports whether this machine stores integers little-endian,
// as the file format requires for its atomically accessed fields.
func littleEndian() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}
