package soak

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// The kernel's files the soak reads.
const (
	procMeminfo  = "/proc/meminfo"
	procVmstat   = "/proc/vmstat"
	procCPUInfo  = "/proc/cpuinfo"
	procVM       = "/proc/sys/vm/"
	clockSources = "/sys/devices/system/clocksource/clocksource0/current_clocksource"
)

// Meminfo is what the soak reads from /proc/meminfo, in kB (KiB, as the
// kernel writes it).
type Meminfo struct {
	MemTotalKB  uint64 `json:"mem_total_kb"`
	DirtyKB     uint64 `json:"dirty_kb"`     // page cache waiting to be written back
	WritebackKB uint64 `json:"writeback_kb"` // page cache being written back now
}

// Vmstat is what the soak reads from /proc/vmstat, in pages.
type Vmstat struct {
	NrDirty                    uint64 `json:"nr_dirty"`
	NrWriteback                uint64 `json:"nr_writeback"`
	NrDirtyThreshold           uint64 `json:"nr_dirty_threshold"`            // writers are throttled above it
	NrDirtyBackgroundThreshold uint64 `json:"nr_dirty_background_threshold"` // background writeback starts above it
}

// ParseMeminfo reads the fields of Meminfo from the text of /proc/meminfo
// ("Dirty:   1234 kB" lines). A missing or malformed field is an error
// wrapping ErrFormat.
func ParseMeminfo(text []byte) (Meminfo, error) {
	var m Meminfo
	fields := []struct {
		name string
		v    *uint64
	}{{"MemTotal", &m.MemTotalKB}, {"Dirty", &m.DirtyKB}, {"Writeback", &m.WritebackKB}}
	for _, f := range fields {
		v, err := lookup(text, f.name+":")
		if err != nil {
			return Meminfo{}, err
		}
		*f.v = v
	}
	return m, nil
}

// ParseVmstat reads the fields of Vmstat from the text of /proc/vmstat
// ("nr_dirty 1234" lines). A missing or malformed field is an error
// wrapping ErrFormat.
func ParseVmstat(text []byte) (Vmstat, error) {
	var v Vmstat
	fields := []struct {
		name string
		v    *uint64
	}{
		{"nr_dirty", &v.NrDirty}, {"nr_writeback", &v.NrWriteback},
		{"nr_dirty_threshold", &v.NrDirtyThreshold},
		{"nr_dirty_background_threshold", &v.NrDirtyBackgroundThreshold},
	}
	for _, f := range fields {
		n, err := lookup(text, f.name)
		if err != nil {
			return Vmstat{}, err
		}
		*f.v = n
	}
	return v, nil
}

// lookup returns the number after name on the line that starts with name
// followed by white space, ignoring a unit after it.
func lookup(text []byte, name string) (uint64, error) {
	for line := range bytes.Lines(text) {
		rest, ok := bytes.CutPrefix(line, []byte(name))
		if !ok || len(rest) == 0 || (rest[0] != ' ' && rest[0] != '\t') {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) == 0 {
			break
		}
		n, err := strconv.ParseUint(string(f[0]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%w: %s %q is not a count", ErrFormat, name, f[0])
		}
		return n, nil
	}
	return 0, fmt.Errorf("%w: no %s line", ErrFormat, name)
}

// ParseCPUModel returns the first "model name" of /proc/cpuinfo's text, or
// "unknown" if there is none (as on most ARM kernels).
func ParseCPUModel(text []byte) string {
	for line := range bytes.Lines(text) {
		k, v, ok := bytes.Cut(line, []byte(":"))
		if ok && string(bytes.TrimSpace(k)) == "model name" {
			if s := string(bytes.TrimSpace(v)); s != "" {
				return s
			}
		}
	}
	return "unknown"
}

// File system magic numbers (statfs f_type), from linux/magic.h.
const (
	magicExt4     = 0xEF53 // shared by ext2, ext3 and ext4
	magicTmpfs    = 0x01021994
	magicXFS      = 0x58465342
	magicBtrfs    = 0x9123683E
	magicOverlay  = 0x794C7630
	magicRamfs    = 0x858458F6
	magicNFS      = 0x6969
	magicZFS      = 0x2FC12FC1
	magicF2FS     = 0xF2F52010
	magicFUSE     = 0x65735546
	magicBcachefs = 0xCA451A4E
)

// FSName names the file system with statfs magic number m, e.g. "ext4", or
// "unknown (0x...)".
func FSName(m uint32) string {
	switch m {
	case magicExt4:
		return "ext4"
	case magicTmpfs:
		return "tmpfs"
	case magicXFS:
		return "xfs"
	case magicBtrfs:
		return "btrfs"
	case magicOverlay:
		return "overlayfs"
	case magicRamfs:
		return "ramfs"
	case magicNFS:
		return "nfs"
	case magicZFS:
		return "zfs"
	case magicF2FS:
		return "f2fs"
	case magicFUSE:
		return "fuse"
	case magicBcachefs:
		return "bcachefs"
	}
	return fmt.Sprintf("unknown (%#x)", m)
}

// readMeminfo reads /proc/meminfo.
func readMeminfo() (Meminfo, error) {
	b, err := os.ReadFile(procMeminfo)
	if err != nil {
		return Meminfo{}, fmt.Errorf("soak: %w", err)
	}
	m, err := ParseMeminfo(b)
	if err != nil {
		return Meminfo{}, fmt.Errorf("%w (reading %s)", err, procMeminfo)
	}
	return m, nil
}

// readVmstat reads /proc/vmstat.
func readVmstat() (Vmstat, error) {
	b, err := os.ReadFile(procVmstat)
	if err != nil {
		return Vmstat{}, fmt.Errorf("soak: %w", err)
	}
	v, err := ParseVmstat(b)
	if err != nil {
		return Vmstat{}, fmt.Errorf("%w (reading %s)", err, procVmstat)
	}
	return v, nil
}

// readInt reads a file holding one integer, as /proc/sys/vm/dirty_ratio.
func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("soak: %w", err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %q is not an integer (reading %s)", ErrFormat, strings.TrimSpace(string(b)), path)
	}
	return n, nil
}
