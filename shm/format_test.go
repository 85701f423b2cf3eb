package shm

import (
	"testing"
	"unsafe"
)

// Ensure that every field is aligned for atomic access and that the fields
// tile the slot and header without gaps or overlaps.
func TestFormat_layout(t *testing.T) {
	type field struct {
		name      string
		off, size uintptr
	}
	slot := []field{
		{"lock", slotLock, 4}, {"sum", slotSum, 4}, {"fp0", slotFP0, 8}, {"fp1", slotFP1, 8},
		{"kind", slotKind, 1}, {"flags", slotFlags, 1}, {"keyLen", slotKeyLen, 2}, {"keySum", slotKeySum, 4},
		{"freshAt", slotFreshAt, 8}, {"state", slotState, StateWords * 8},
	}
	header := []field{
		{"magic", offMagic, 8}, {"version", offVersion, 4}, {"byteOrder", offByteOrder, 4},
		{"headerSize", offHeaderSize, 4}, {"slotSize", offSlotSize, 4}, {"slotCount", offSlotCount, 8},
		{"seed0", offSeed0, 8}, {"seed1", offSeed1, 8}, {"probeCap", offProbeCap, 4}, {"reserved", offProbeCap + 4, 4},
		{"created", offCreated, 8}, {"checksum", offChecksum, 8}, {"cleanFlag", offCleanFlag, 4},
		{"reserved2", offCleanFlag + 4, 4}, {"v1HighTime", offV1HighTime, 8}, {"counters", offCounters, numCounters * 8},
		{"highMarks", offHighMarks, numHighMarks * highMarkSize},
		{"ownerTag", offOwnerTag, 4}, {"reserved3", offOwnerTag + 4, 4}, {"holders", offHolders, numHolders * holderSize},
	}
	for _, c := range []struct {
		name   string
		fields []field
		end    uintptr
	}{{"slot", slot, MinSlotSize}, {"header", header, offHolders + numHolders*holderSize}} {
		var next uintptr
		for _, f := range c.fields {
			if f.off != next {
				t.Errorf("%s.%s at %#x, want %#x (gap or overlap)", c.name, f.name, f.off, next)
			}
			if a := min(f.size, 8); f.size > 1 && f.off%a != 0 {
				t.Errorf("%s.%s at %#x is not %d-byte aligned", c.name, f.name, f.off, a)
			}
			next = f.off + f.size
		}
		if next != c.end {
			t.Errorf("%s fields end at %#x, want %#x", c.name, next, c.end)
		}
	}
	if offHolders+numHolders*holderSize > offInsertLocks || offInsertLocks+numInsertLocks*4 > HeaderSize {
		t.Errorf("header regions overflow the header page")
	}
	if checksummed != offChecksum || summedFrom != slotFP0 || summedTo != MinSlotSize {
		t.Errorf("checksummed ranges moved")
	}
	for _, n := range []int{64, 128, 256} {
		if n%slotAlign != 0 || HeaderSize%n != 0 {
			t.Errorf("slot size %d breaks cache-line alignment", n)
		}
	}
}

// Ensure that slot memory handed to atomics is aligned in a real table.
func TestFormat_runtimeAlignment(t *testing.T) {
	for _, size := range []int{64, 128, 256} {
		tb := newHeap(t, Options{SlotCount: 3, SlotSize: size})
		for i := range tb.n {
			if p := uintptr(tb.slotPtr(i)); p%64 != 0 {
				t.Errorf("size %d: slot %d at %#x is not 64-byte aligned", size, i, p)
			}
		}
		if uintptr(unsafe.Pointer(tb.counter(0)))%8 != 0 {
			t.Errorf("counters misaligned")
		}
	}
}
