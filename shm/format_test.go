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
		{"ownerTag", offOwnerTag, 4}, {"lastTag", offLastTag, 4},
		{"v5Holders", offV5Holders, v5Holders * holderSize}, {"v5Busy", offV5Busy, v5Holders * 4},
		{"arenaCells", offArenaCells, 8},
	}
	registry := []field{{"holders", 0, NumHolders * holderSize}, {"busy", offBusy, NumHolders * busyStride}}
	for _, c := range []struct {
		name   string
		fields []field
		end    uintptr
	}{{"slot", slot, MinSlotSize}, {"header", header, offArenaCells + 8}, {"registry", registry, registrySize}} {
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
	if offArenaUsed+8 > offInsertLocks || offInsertLocks+numInsertLocks*4 > HeaderSize {
		t.Errorf("header regions overflow the header page")
	}
	if busyStride%64 != 0 || offBusy%64 != 0 || registryOffset(3, 64, 0)%4096 != 0 || registryOffset(3, 64, 1000)%4096 != 0 {
		t.Errorf("the registry's busy counts do not each have a cache line")
	}
	if NumHolders > maxTag {
		t.Errorf("%d holders cannot have distinct 15-bit tags", NumHolders)
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
