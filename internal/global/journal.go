package global

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/bucket"
)

// The lease journal: the leases a host holds, in a file mapped into memory,
// so that a sidecar killed with kill -9 (or by a crash) does not take its
// leases' unused tokens with it. The Redis bucket counts a leased token as
// spent from its grant; without the journal, the tokens a dead host held
// stay spent until the bucket refills. The next process on the same file
// returns them (Journal.Recover), as Close would have.
//
// # Format
//
// Little-endian, a header of 64 bytes, then Records records of
// RecordSize (512) bytes:
//
//	header
//	0    8  magic "SLUICELJ"
//	8    4  version 2 (JournalVersion); 1 is read too (below)
//	12   4  record size, 512
//	16   4  records
//	20   44 zero
//
//	record
//	0    8  held: 0 free, 1 a lease's (written last on a grant, first on a return)
//	8    8  tokens: its unused tokens, i64, lowered before a token is admitted
//	16   8  until: the lease's end on Redis's clock, Unix ns (its return is a refund up to then)
//	24   8  expires: the lease's end on this host's clock, Unix ns
//	32   72 the limit: algorithm, max, refill_time, refill_amount, burst, count, period,
//	        window, max_delay (i64 each)
//	104  2  the key's length, 1..MaxJournalKey
//	106  k  the key
//	496  8  the limit's counters (window_counters), i64
//	504  8  the limit's flags: bit 0 count_denied (window_counters); the others 0
//
// Version 1 is version 2 without the last two words: its keys are up to
// 406 bytes, and it cannot hold a window_counters lease. A journal of
// version 1 is read as such: its leases are returned by Recover, and if it
// holds none when it is opened it is made a journal of version 2 (its
// header's version rewritten; every record is free). One that holds some
// stays of version 1 until a process opens it with none held (one that
// stopped cleanly): meanwhile its process journals what version 1 holds,
// and not its window_counters leases.
//
// A process writes a record's fields before it sets held, and clears held
// before the call that returns the tokens to Redis, so that tokens a
// record holds are never returned twice (a return whose reply is lost
// counts as made: under-admission, never over). A lease whose key is
// longer than MaxJournalKey, or that finds every record held, is not
// journaled: it is lost with its process, as before. Nor is a quota's: a
// record has no room for its calendar and time zone.
//
// The file is the sidecar's state file's path with ".leases" appended; the
// state file's instance lock keeps a second process off it.

// Journal constants.
const (
	JournalVersion = 2
	journalMagic   = "SLUICELJ"
	journalHeader  = 64
	recordSize     = 512
	recordFixed    = 106
	// MaxJournalKey is the longest key whose lease is journaled.
	MaxJournalKey = offCounters - offKey
	maxKeyV1      = recordSize - offKey // version 1: the key runs to the record's end
	// DefaultJournalRecords is the leases a journal holds at once.
	DefaultJournalRecords = 16384
)

// Record field offsets.
const (
	offHeld     = 0
	offTokens   = 8
	offUntil    = 16
	offExpires  = 24
	offLimit    = 32
	offKeyLen   = 104
	offKey      = 106
	offCounters = 496 // version 2
	offFlags    = 504 // version 2

	flagCountDenied = 1
)

// ErrJournal: a lease journal that cannot be used (another version, a size
// that does not match its header, a failed mapping).
var ErrJournal = errors.New("the lease journal cannot be used")

// Journal is a host's lease journal.
//
// # Concurrency
//
// A Journal is safe for simultaneous use; a record is written by the one
// lease that holds it, under that lease's lock.
type Journal struct {
	f       *os.File
	data    []byte // the mapping
	n       int
	version int // of the file's layout: 1 or JournalVersion

	mu      sync.Mutex
	free    []int // records free for a new lease
	pending []int // records of a dead process, not yet returned
}

// OpenJournal opens the journal at path, creating it with records records
// (0: DefaultJournalRecords) if it does not exist. The records the last
// process left held wait for Recover.
func OpenJournal(path string, records int) (*Journal, error) {
	if records <= 0 {
		records = DefaultJournalRecords
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrJournal, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: %w", ErrJournal, err)
	}
	size := int64(journalHeader + records*recordSize)
	fresh := st.Size() == 0
	if fresh {
		if err := f.Truncate(size); err != nil {
			f.Close()
			return nil, fmt.Errorf("%w: %w", ErrJournal, err)
		}
	} else {
		size = st.Size()
	}
	if size < journalHeader {
		f.Close()
		return nil, fmt.Errorf("%w: %s is not a lease journal", ErrJournal, path)
	}
	data, err := mapFile(f, int(size))
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: %w", ErrJournal, err)
	}
	j := &Journal{f: f, data: data}
	if fresh {
		copy(data, journalMagic)
		binary.LittleEndian.PutUint32(data[8:], JournalVersion)
		binary.LittleEndian.PutUint32(data[12:], recordSize)
		binary.LittleEndian.PutUint32(data[16:], uint32(records))
	}
	switch n, v := int(binary.LittleEndian.Uint32(data[16:])), binary.LittleEndian.Uint32(data[8:]); {
	case string(data[:8]) != journalMagic:
		err = fmt.Errorf("%w: %s is not a lease journal", ErrJournal, path)
	case v != 1 && v != JournalVersion:
		err = fmt.Errorf("%w: %s is of version %d, this sidecar reads 1 to %d", ErrJournal, path, v, JournalVersion)
	case binary.LittleEndian.Uint32(data[12:]) != recordSize || int64(journalHeader+n*recordSize) != size:
		err = fmt.Errorf("%w: %s has a size its header does not describe", ErrJournal, path)
	default:
		j.n, j.version = n, int(v)
	}
	if err != nil {
		j.Close()
		return nil, err
	}
	for i := j.n - 1; i >= 0; i-- {
		if j.word(i, offHeld) == 0 {
			j.free = append(j.free, i)
		} else {
			j.pending = append(j.pending, i)
		}
	}
	if j.version == 1 && len(j.pending) == 0 {
		// Nothing of version 1 to read: the records are free, and their
		// new words are written with their next lease.
		binary.LittleEndian.PutUint32(data[8:], JournalVersion)
		j.version = JournalVersion
	}
	return j, nil
}

// maxKey is the longest key a record of j holds.
func (j *Journal) maxKey() int {
	if j.version == 1 {
		return maxKeyV1
	}
	return MaxJournalKey
}

// record returns record i's bytes.
func (j *Journal) record(i int) []byte {
	o := journalHeader + i*recordSize
	return j.data[o : o+recordSize : o+recordSize]
}

// word reads a word of record i.
func (j *Journal) word(i, off int) int64 { return loadWord(j.record(i), off) }

// put journals a new lease and returns its record, -1 if it cannot be
// journaled (a long key, no record free).
func (j *Journal) put(l *bucket.Limit, key string, tokens int64, until string, expires time.Time) int {
	if j == nil || len(key) > j.maxKey() || l.Algorithm == bucket.Quota || j.version == 1 && l.Algorithm == bucket.WindowCounters {
		return -1
	}
	u, err := strconv.ParseInt(until, 10, 64)
	if err != nil {
		return -1
	}
	j.mu.Lock()
	if len(j.free) == 0 {
		j.mu.Unlock()
		return -1
	}
	i := j.free[len(j.free)-1]
	j.free = j.free[:len(j.free)-1]
	j.mu.Unlock()
	r := j.record(i)
	storeWord(r, offTokens, tokens)
	storeWord(r, offUntil, u)
	storeWord(r, offExpires, expires.UnixNano())
	for k, v := range [9]int64{int64(l.Algorithm), l.Max, l.RefillTime, l.RefillAmount, l.Burst, l.Count, l.Period, l.Window, l.MaxDelay} {
		storeWord(r, offLimit+8*k, v)
	}
	binary.LittleEndian.PutUint16(r[offKeyLen:], uint16(len(key)))
	copy(r[offKey:], key)
	if j.version != 1 {
		flags := int64(0)
		if l.CountDenied {
			flags |= flagCountDenied
		}
		storeWord(r, offCounters, l.Counters)
		storeWord(r, offFlags, flags)
	}
	storeWord(r, offHeld, 1) // last: the record is complete
	return i
}

// tokens records that lease record i has tokens unused.
func (j *Journal) tokens(i int, tokens int64) {
	if i >= 0 {
		storeWord(j.record(i), offTokens, tokens)
	}
}

// release frees record i: its tokens are returned, or being returned.
func (j *Journal) release(i int) {
	if i < 0 {
		return
	}
	storeWord(j.record(i), offHeld, 0) // first: a return is never made twice
	j.mu.Lock()
	j.free = append(j.free, i)
	j.mu.Unlock()
}

// Pending returns the leases a dead process left, not yet returned.
func (j *Journal) Pending() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.pending)
}

// Recover returns to Redis, through s, the unused tokens of the leases the
// last process left in the journal, and frees their records. It returns
// the tokens returned and the first error: a record whose return failed
// is freed all the same (its tokens stay spent in Redis until the bucket
// refills), except when Redis could not be reached at all: then nothing
// is tried and the records wait for the next Recover.
func (j *Journal) Recover(ctx context.Context, s *Store) (returned int64, err error) {
	if err := s.Ping(ctx); err != nil {
		return 0, err
	}
	j.mu.Lock()
	pending := j.pending
	j.pending = nil
	j.mu.Unlock()
	for _, i := range pending {
		r := j.record(i)
		var w [9]int64
		for k := range w {
			w[k] = loadWord(r, offLimit+8*k)
		}
		l := bucket.Limit{Algorithm: bucket.Algorithm(w[0]), Max: w[1], RefillTime: w[2], RefillAmount: w[3],
			Burst: w[4], Count: w[5], Period: w[6], Window: w[7], MaxDelay: w[8]}
		if j.version != 1 {
			l.Counters, l.CountDenied = loadWord(r, offCounters), loadWord(r, offFlags)&flagCountDenied != 0
		}
		n := int(binary.LittleEndian.Uint16(r[offKeyLen:]))
		tokens, until := loadWord(r, offTokens), strconv.FormatInt(loadWord(r, offUntil), 10)
		key := string(r[offKey : offKey+min(n, j.maxKey())])
		j.release(i)
		if tokens <= 0 || Check(l) != nil || n == 0 {
			continue
		}
		if _, e := s.lease(ctx, Request{Limit: l, Key: key, Op: lease_}, 1<<62, tokens, until, 0); e != nil {
			err = firstErr(err, e)
			continue
		}
		returned += tokens
	}
	return returned, err
}

// firstErr returns the first error of a and b.
func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// Close unmaps and closes the journal. The records stay as they are: the
// leases still held are returned by the next process, unless Leases.Close
// returned them first.
func (j *Journal) Close() error {
	if j == nil || j.f == nil {
		return nil
	}
	err := unmapFile(j.data)
	if cerr := j.f.Close(); err == nil {
		err = cerr
	}
	j.f, j.data = nil, nil
	return err
}
