package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/errtext"
	"github.com/sluicehq/sluice/proto"
	"github.com/sluicehq/sluice/shm"
	"github.com/sluicehq/sluice/vocab"
)

// The offline commands: inspect and verify read a state file directly,
// read-only, without the sidecar, and are safe beside a live one.

// exitDamaged is verify's status for a damaged file.
const exitDamaged = 1

func runInspect(x *cli, args []string) int {
	fs := x.flags("inspect")
	asJSON := fs.Bool("json", false, "print the report as a JSON object")
	pos, code, ok := x.parse("inspect", fs, args, 1, 1)
	if !ok {
		return code
	}
	im, err := shm.OpenImage(pos[0])
	if err != nil {
		return x.fail("inspect: %s", offlineError(err))
	}
	defer im.Close()
	r := im.Inspect(time.Now().UnixNano())
	if *asJSON {
		if err := json.NewEncoder(x.stdout).Encode(jsonReport(pos[0], &r)); err != nil {
			return x.failCmd("inspect", err)
		}
		return exitOK
	}
	printReport(x, pos[0], &r)
	return exitOK
}

func runVerify(x *cli, args []string) int {
	fs := x.flags("verify")
	pos, code, ok := x.parse("verify", fs, args, 1, 1)
	if !ok {
		return code
	}
	path := pos[0]
	im, err := shm.OpenImage(path)
	if err != nil {
		if damaged(err) {
			fmt.Fprintf(x.stdout, "%s: damaged\n  %s\n", path, offlineError(err))
			return exitDamaged
		}
		return x.fail("verify: %s", offlineError(err))
	}
	defer im.Close()
	r := im.Inspect(time.Now().UnixNano())
	if err := im.Verify(); err != nil {
		fmt.Fprintf(x.stdout, "%s: damaged (%s)\n", path, describeState(&r))
		for _, line := range strings.Split(err.Error(), "\n")[1:] {
			fmt.Fprintf(x.stdout, "  %s\n", line)
		}
		switch r.State {
		case shm.Dirty:
			fmt.Fprintln(x.stdout, "The file was not closed cleanly: sluiced's next open repairs it (damaged slots are reset to a conservative state).")
		case shm.Clean:
			fmt.Fprintln(x.stdout, "The file was closed cleanly, so this is damage at rest (disk, copy or bit flip): sluiced finds and resets these slots as it uses them.")
		}
		return exitDamaged
	}
	fmt.Fprintf(x.stdout, "%s: ok, %s slots checked (%s)\n", path, thousands(r.Geometry.SlotCount), describeState(&r))
	return exitOK
}

// damaged reports whether an error of OpenImage is about the file's content.
func damaged(err error) bool {
	for _, e := range []error{shm.ErrNotStateFile, shm.ErrTruncated, shm.ErrVersion, shm.ErrByteOrder, shm.ErrChecksum, shm.ErrGeometry} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// offlineError is err in words: without the packages' prefixes, and
// without the Go name of the system call that failed ("lstat x: no such
// file or directory" says "x: no such file or directory").
func offlineError(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Path + ": " + errtext.String(pe.Err)
	}
	return errtext.String(err)
}

func describeState(r *shm.Report) string {
	switch r.State {
	case shm.InUse:
		return fmt.Sprintf("in use by pid %d", r.Owner)
	case shm.Dirty:
		return "dirty: not closed cleanly, and no owner; the next open recovers it"
	}
	return "clean"
}

func printReport(x *cli, path string, r *shm.Report) {
	w := x.stdout
	g := r.Geometry
	line := func(k, format string, a ...any) { fmt.Fprintf(w, "%-14s %s\n", k, fmt.Sprintf(format, a...)) }
	line("state file", "%s", path)
	line("format", "version %d", r.Version)
	line("created", "%s", time.Unix(0, r.Created).UTC().Format(time.RFC3339))
	line("geometry", "%s slots of %d bytes, probe cap %d, %s", thousands(g.SlotCount), g.SlotSize, g.ProbeCap, bytesIEC(g.FileSize))
	if g.ArenaCells > 0 {
		st := r.Stats
		line("arena", "%s cells of 64 bytes, %s in blocks (%.1f%%), %s blocks refused (arena full)",
			thousands(g.ArenaCells), thousands(st.ArenaUsed), 100*float64(st.ArenaUsed)/float64(g.ArenaCells), thousands(st.ArenaFull))
	}
	line("state", "%s", describeState(r))
	if len(r.Holders) > 0 {
		pids := make([]string, len(r.Holders))
		for i, p := range r.Holders {
			pids[i] = strconv.Itoa(p)
		}
		line("holders", "%d of at most %s: pids %s", len(pids), thousands(uint64(r.MaxHolders)), strings.Join(pids, ", "))
	}
	if r.HighTime > 0 {
		line("high time", "%s", time.Unix(0, r.HighTime).UTC().Format(time.RFC3339Nano))
	}
	line("load", "%.3f (%s of %s slots used)", r.Load(), thousands(r.Used), thousands(g.SlotCount))
	line("live buckets", "%s (%s back to new, reclaimable)", thousands(r.Live), thousands(r.Fresh))
	for _, k := range sortedKinds(r.ByKind) {
		line("", "%-15s %s", kindName(k), thousands(r.ByKind[k]))
	}
	if r.Conservative > 0 {
		line("conservative", "%s slots reset after a tear, awaiting their next use", thousands(r.Conservative))
	}
	line("probe length", "displacement from the home slot, max %d", r.MaxDisplacement)
	var most uint64
	for _, n := range r.Displacement {
		most = max(most, n)
	}
	for k, n := range r.Displacement {
		label := "0"
		if k > 0 {
			lo, hi := uint64(1)<<(k-1), uint64(1)<<k-1
			label = strconv.FormatUint(lo, 10)
			if hi > lo {
				label += "-" + strconv.FormatUint(hi, 10)
			}
		}
		bar := strings.Repeat("#", int((n*40+most-1)/max(most, 1)))
		line("", "%-9s %12s %s", label, thousands(n), bar)
	}
	s := r.Stats
	line("counters", "inserts %s, reclaims %s, table_full %s, torn %s, locked_on_open %s, syncs %s, sync_errors %s",
		thousands(s.Inserts), thousands(s.Reclaims), thousands(s.TableFull), thousands(s.Torn),
		thousands(s.LockedOnOpen), thousands(s.Syncs), thousands(s.SyncErrors))
}

// jsonReport is the report of inspect --json.
func jsonReport(path string, r *shm.Report) any {
	byAlg := map[string]uint64{}
	for k, n := range r.ByKind {
		byAlg[kindName(k)] = n
	}
	return struct {
		Path            string            `json:"path"`
		Version         uint32            `json:"version"`
		Created         time.Time         `json:"created"`
		Slots           uint64            `json:"slots"`
		SlotSize        int               `json:"slot_size"`
		ProbeCap        int               `json:"probe_cap"`
		FileBytes       int64             `json:"file_bytes"`
		State           string            `json:"state"`
		Owner           int               `json:"owner_pid,omitempty"`
		Holders         []int             `json:"holder_pids"`
		MaxHolders      int               `json:"max_holders"`
		Load            float64           `json:"load"`
		Used            uint64            `json:"used_slots"`
		Live            uint64            `json:"live_buckets"`
		Fresh           uint64            `json:"fresh_buckets"`
		Conservative    uint64            `json:"conservative_slots"`
		ByAlgorithm     map[string]uint64 `json:"live_by_algorithm"`
		Displacement    []uint64          `json:"displacement_log2_histogram"`
		MaxDisplacement uint64            `json:"max_displacement"`
		Counters        shm.Stats         `json:"counters"`
	}{path, r.Version, time.Unix(0, r.Created).UTC(), r.Geometry.SlotCount, r.Geometry.SlotSize, r.Geometry.ProbeCap,
		r.Geometry.FileSize, r.State.String(), r.Owner, r.Holders, r.MaxHolders, r.Load(), r.Used, r.Live, r.Fresh, r.Conservative,
		byAlg, r.Displacement, r.MaxDisplacement, r.Stats}
}

func sortedKinds(m map[uint8]uint64) []uint8 {
	ks := make([]uint8, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// kindName names a slot's kind byte: the algorithm's name (the kind is its
// wire value), or "register" for a slot that holds a register.
func kindName(k uint8) string {
	if vocab.Algorithm(k) == vocab.RegisterKind {
		return "register"
	}
	return proto.Algorithm(k).String()
}

// thousands formats n with comma separators.
func thousands(n uint64) string {
	s := strconv.FormatUint(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// bytesIEC formats n bytes in KiB, MiB or GiB.
func bytesIEC(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
}
