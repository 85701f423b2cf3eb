package global

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/bucket"
)

// algorithm is the global form of one of package bucket's algorithms: the
// script Redis runs for each of its decisions, and what the Go side knows
// of it. Everything that differs between algorithms is here and in the
// script.
type algorithm struct {
	// params appends the parameters its script reads after the op and the
	// cost (ARGV[3] on), for a request with flags.
	params func(args []any, l *bucket.Limit, f bucket.Flags) []any
	// identity is how many words of bucket.Limit.Identity name a bucket in
	// its key (AppendKey).
	identity int
	// check returns an error, a sentence naming the parameter, if l passes
	// the bounds within which its script is exact (MaxCount, MaxDuration).
	check func(l bucket.Limit) error
	// limit is bucket.Decision.Limit for l.
	limit func(l *bucket.Limit) int64
	// share scales l's counts and rates down to a share of them (Share).
	share func(l *bucket.Limit, s scaling)
	// leased reports whether its buckets can be leased.
	leased bool
	// periods reports whether its script reads, after the parameters, the
	// boundaries of three periods of the limit's calendar around the
	// request's time (appendPeriods).
	periods bool

	// script is the EVAL form of its script: lua/<name>.lua with its
	// includes resolved, then "return run(KEYS, ARGV)".
	script *redis.Script
	// function is its function in the library (FCALL): the same text.
	function string
	// index is its block's place in the library, from 1: what a batch
	// (lua/batch.lua) names it by.
	index int
}

// algorithms are the algorithms a global limit can use. Adding one is
// adding its script, lua/<name>.lua (name as bucket.Algorithm.String), and
// its entry here (doc.go, "Algorithms").
var algorithms = map[bucket.Algorithm]*algorithm{
	bucket.TokenBucket: {
		params: func(a []any, l *bucket.Limit, f bucket.Flags) []any {
			return append(a, l.Max, l.RefillTime, l.RefillAmount, int64(f&(bucket.Strict|bucket.Smyte)))
		},
		identity: 3,
		check: func(l bucket.Limit) error {
			if err := count("max", l.Max); err != nil {
				return err
			}
			k := (l.Max + l.RefillAmount - 1) / l.RefillAmount // no overflow: Max <= 2^52
			if k > MaxDuration/l.RefillTime {
				return unsupported("the time to refill an empty bucket, %d steps of %d ns,", k, l.RefillTime)
			}
			return nil
		},
		limit: func(l *bucket.Limit) int64 { return l.Max },
		share: func(l *bucket.Limit, s scaling) {
			ra := l.RefillAmount
			l.Max = s.count(l.Max)
			l.RefillAmount = min(ra, l.Max)
			// rate RefillAmount/RefillTime becomes share * ra/RefillTime.
			l.RefillTime = s.stretch(l.RefillTime, float64(l.RefillAmount)/(float64(ra)*s.share))
		},
		leased: true,
	},
	bucket.GCRA: {
		params: func(a []any, l *bucket.Limit, _ bucket.Flags) []any {
			return append(a, l.Period/l.Count, l.Burst+1)
		},
		check: func(l bucket.Limit) error {
			if err := count("burst+1", l.Burst+1); err != nil {
				return err
			}
			t := l.Period / l.Count
			if l.Burst+1 > MaxDuration/t {
				return unsupported("the tolerance (burst+1)*period/count = %d*%d ns", l.Burst+1, t)
			}
			return nil
		},
		limit: func(l *bucket.Limit) int64 { return l.Burst + 1 },
		share: func(l *bucket.Limit, s scaling) {
			l.Burst = s.count(l.Burst+1) - 1
			l.Period = s.stretch(l.Period, 1/s.share)
		},
		leased: true,
	},
	bucket.FixedWindow: {
		params:   windowParams,
		identity: 1,
		check: func(l bucket.Limit) error {
			return firstErr(count("limit", l.Max), duration("the window", l.Window))
		},
		limit:  func(l *bucket.Limit) int64 { return l.Max },
		share:  func(l *bucket.Limit, s scaling) { l.Max = s.count(l.Max) },
		leased: true,
	},
	bucket.SlidingWindow: {
		params:   windowParams,
		identity: 1,
		check: func(l bucket.Limit) error {
			// A sliding window remembers two windows.
			return firstErr(count("limit", l.Max), duration("twice the window", 2*l.Window))
		},
		limit:  func(l *bucket.Limit) int64 { return l.Max },
		share:  func(l *bucket.Limit, s scaling) { l.Max = s.count(l.Max) },
		leased: true,
	},
	bucket.Pacer: {
		params: func(a []any, l *bucket.Limit, _ bucket.Flags) []any {
			return append(a, pacerInterval(*l), l.MaxDelay)
		},
		check: func(l bucket.Limit) error {
			return duration("max_delay plus one interval", l.MaxDelay+pacerInterval(l))
		},
		limit:  func(l *bucket.Limit) int64 { return l.MaxDelay/pacerInterval(*l) + 1 },
		share:  func(l *bucket.Limit, s scaling) { l.Period = s.stretch(l.Period, 1/s.share) },
		leased: false, // its replies carry a delay
	},
	bucket.SlidingLog: {
		params:   windowParams,
		identity: 2, // max sizes its ring
		check: func(l bucket.Limit) error {
			return duration("the window", l.Window)
		},
		limit:  func(l *bucket.Limit) int64 { return l.Max },
		share:  func(l *bucket.Limit, s scaling) { l.Max = s.count(l.Max) },
		leased: true,
	},
	bucket.WindowCounters: {
		params: func(a []any, l *bucket.Limit, _ bucket.Flags) []any {
			countDenied := 0
			if l.CountDenied {
				countDenied = 1
			}
			return append(a, l.Max, l.Window, l.Counters, countDenied)
		},
		identity: 2, // window, counters
		check: func(l bucket.Limit) error {
			w := (l.Window + l.Counters - 1) / l.Counters
			return firstErr(count("limit", l.Max), duration("the window plus one sub-window", l.Window+w))
		},
		limit:  func(l *bucket.Limit) int64 { return l.Max },
		share:  func(l *bucket.Limit, s scaling) { l.Max = s.count(l.Max) },
		leased: true,
	},
	bucket.Quota: {
		params:   func(a []any, l *bucket.Limit, _ bucket.Flags) []any { return append(a, l.Max) },
		periods:  true,
		identity: 2,
		check: func(l bucket.Limit) error {
			if err := count("limit", l.Max); err != nil {
				return err
			}
			if quotaLongest(l) > MaxDuration {
				return fmt.Errorf("%w: a global quota's period is at most about 50 days (days, weeks or one month), got %d %s", ErrUnsupported, l.Every, l.Calendar)
			}
			return nil
		},
		limit:  func(l *bucket.Limit) int64 { return l.Max },
		share:  func(l *bucket.Limit, s scaling) { l.Max = s.count(l.Max) },
		leased: true,
	},
	bucket.Concurrency: {
		params: func(a []any, l *bucket.Limit, _ bucket.Flags) []any {
			return append(a, l.Max, l.Lease)
		},
		identity: 1, // max sizes its entries
		check: func(l bucket.Limit) error {
			return duration("the lease", l.Lease)
		},
		limit:  func(l *bucket.Limit) int64 { return l.Max },
		share:  func(l *bucket.Limit, s scaling) { l.Max = s.count(l.Max) },
		leased: false, // its leases are its own
	},
}

// quotaLongest bounds the length of a quota's period: its units at their
// longest, with two hours to spare for a change of offset (a day of 25
// hours, or 23).
func quotaLongest(l bucket.Limit) int64 {
	const day, spare = 24 * 3600e9, 2 * 3600e9
	unit := int64(day)
	switch l.Calendar {
	case bucket.CalWeek:
		unit = 7 * day
	case bucket.CalMonth:
		unit = 31 * day
	case bucket.CalYear:
		unit = 366 * day
	}
	if l.Every > MaxDuration/unit {
		return MaxDuration + 1
	}
	return l.Every*unit + spare
}

// appendPeriods appends the boundaries of the three periods of quota l
// around now (the request's explicit time, or this host's clock), b0 < b1
// < b2 < b3 with now in [b1, b2): the script takes the period that holds
// Redis's time, so a host whose clock is off by less than a period still
// counts each request in the period Redis's clock says.
func appendPeriods(a []any, l *bucket.Limit, now int64) []any {
	if now == 0 {
		now = time.Now().UnixNano()
	}
	b1, b2 := l.CalendarPeriod(now)
	b0, _ := l.CalendarPeriod(b1 - 1)
	_, b3 := l.CalendarPeriod(b2)
	return append(a, b0, b1, b2, b3)
}

// windowParams are the window algorithms' parameters: max, window.
func windowParams(a []any, l *bucket.Limit, _ bucket.Flags) []any {
	return append(a, l.Max, l.Window)
}

// scaling scales a limit's counts and rates by share, in (0, 1] (Share).
type scaling struct{ share float64 }

// count scales a capacity, rounded down but at least 1.
func (s scaling) count(v int64) int64 { return max(1, int64(math.Floor(float64(v)*s.share))) }

// stretch lengthens a period d by f, rounded up (past bucket.MaxDuration:
// bucket.MaxDuration+1, which fails Validate).
func (s scaling) stretch(d int64, f float64) int64 {
	x := math.Ceil(float64(d) * f)
	if x > float64(bucket.MaxDuration) {
		return bucket.MaxDuration + 1
	}
	return int64(x)
}

// lookup returns a's global form, or nil if it has none.
func lookup(a bucket.Algorithm) *algorithm { return algorithms[a] }

//go:embed lua/*.lua
var luaFiles embed.FS

// The function library: each algorithm's script in a block of its own
// (the text its EVAL form runs), which registers its run as the function
// <library>_<algorithm> and keeps it in the table runs; then
// lua/multi.lua, registered as <library>_multi (Store.Multi), which
// decides several requests together; then lua/batch.lua, registered as
// <library>_batch, which runs several requests in one call. The library's
// name, sluice_ and the first 12 hex digits of the SHA-1 of its blocks,
// changes with any change of a script,
// so processes of different versions sharing a Redis each find their own.
var library, libraryName, batchFunction string

// loadScript returns the text of lua/name with its includes resolved: a
// line "-- #include FILE" is replaced by lua/FILE (its own includes
// resolved), the first time FILE is included; later includes of it are
// dropped.
func loadScript(name string) (string, error) {
	var b strings.Builder
	done := make(map[string]bool)
	var include func(name string) error
	include = func(name string) error {
		done[name] = true
		text, err := fs.ReadFile(luaFiles, "lua/"+name)
		if err != nil {
			return err
		}
		for line := range strings.Lines(string(text)) {
			if f, ok := strings.CutPrefix(line, "-- #include "); ok {
				if f = strings.TrimSpace(f); !done[f] {
					if err := include(f); err != nil {
						return fmt.Errorf("%s: %w", name, err)
					}
				}
				continue
			}
			b.WriteString(line)
		}
		return nil
	}
	err := include(name)
	return b.String(), err
}

func init() {
	var algs []bucket.Algorithm
	for a := range algorithms {
		algs = append(algs, a)
	}
	slices.Sort(algs) // a fixed order: one library per version
	texts := make([]string, len(algs))
	h := sha1.New()
	for i, a := range algs {
		text, err := loadScript(a.String() + ".lua")
		if err != nil {
			panic(err)
		}
		texts[i] = text
		algorithms[a].script = redis.NewScript("local batch_time\n" + text + "return run(KEYS, ARGV)\n")
		io.WriteString(h, text)
	}
	batch, err := loadScript("batch.lua")
	if err != nil {
		panic(err)
	}
	io.WriteString(h, batch)
	multi := initMulti(algs, texts)
	io.WriteString(h, multi)
	libraryName = "sluice_" + hex.EncodeToString(h.Sum(nil)[:6])
	var b strings.Builder
	b.WriteString("#!lua name=" + libraryName + "\nlocal runs, batch_time = {}, nil\n")
	for i, a := range algs {
		g := algorithms[a]
		g.function, g.index = libraryName+"_"+a.String(), i+1
		fmt.Fprintf(&b, "do\n%sredis.register_function('%s', run)\nruns[%d] = run\nend\n", texts[i], g.function, g.index)
	}
	multiAlgorithm.function, multiAlgorithm.index = libraryName+"_multi", len(algs)+1
	fmt.Fprintf(&b, "do\n%sredis.register_function('%s', multi)\nruns[%d] = multi\nend\n", multi, multiAlgorithm.function, multiAlgorithm.index)
	batchFunction = libraryName + "_batch"
	fmt.Fprintf(&b, "do\n%sredis.register_function{function_name = '%s', callback = batch, flags = {'allow-cross-slot-keys'}}\nend\n", batch, batchFunction)
	library = b.String()
}
