package global

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Membership: the sidecars sharing a Redis count each other, so that a
// host's default share of a limit in an outage is its part of the fleet.
// Each one refreshes its entry in one sorted set every second, scored by
// Redis's clock (so the hosts' clocks never matter); entries older than
// three seconds are dropped, and the set expires with its last member.

// Defaults of Members.
const (
	DefaultMembersEvery = time.Second
	membersLife         = 3 // refresh periods a member stays counted without a refresh
)

// membersScript adds or refreshes ARGV[1] in the set KEYS[1] at Redis's
// time (ms), drops the members not refreshed within ARGV[2] ms, makes the
// set expire after as long, and returns how many are left.
var membersScript = redis.NewScript(`
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local life = tonumber(ARGV[2])
redis.call("ZADD", KEYS[1], now, ARGV[1])
redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", now - life)
redis.call("PEXPIRE", KEYS[1], life)
return redis.call("ZCARD", KEYS[1])
`)

// Members keeps this host counted among the sidecars that share the
// Store's Redis, and counts them. The set is the key "<prefix>{hosts}"
// (a hash tag: one Cluster slot).
//
// # Concurrency
//
// Members are safe for simultaneous use.
type Members struct {
	store *Store
	id    string
	key   string
	every time.Duration
	n     atomic.Int64 // the live hosts, as last seen; 0 before the first answer

	stop    chan struct{}
	stopped sync.WaitGroup
	once    sync.Once
}

// StartMembers registers this host in the set and refreshes it every
// every (0: DefaultMembersEvery) until Close. The first refresh is made
// before it returns (its error, if Redis cannot be reached, is returned
// with the Members, which keep trying).
func StartMembers(s *Store, every time.Duration) (*Members, error) {
	if every <= 0 {
		every = DefaultMembersEvery
	}
	host, _ := os.Hostname()
	var r [6]byte
	rand.Read(r[:])
	m := &Members{store: s, id: fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(r[:])),
		key: s.prefix + "{hosts}", every: every, stop: make(chan struct{})}
	err := m.refresh()
	m.stopped.Add(1)
	go m.loop()
	return m, err
}

// Count returns the sidecars sharing the Redis, this one included, as
// last seen: it does not change while Redis cannot be reached. It is 0
// until Redis has answered once.
func (m *Members) Count() int { return int(m.n.Load()) }

// ID returns this host's member name: hostname/pid/random.
func (m *Members) ID() string { return m.id }

// refresh refreshes this host's entry and reads the count.
func (m *Members) refresh() error {
	ctx, cancel := context.WithTimeout(context.Background(), m.store.timeout)
	defer cancel()
	life := membersLife * m.every.Milliseconds()
	n, err := membersScript.Run(ctx, m.store.rdb, []string{m.key}, m.id, life).Int64()
	if err != nil {
		return classify(err)
	}
	m.n.Store(n)
	return nil
}

func (m *Members) loop() {
	defer m.stopped.Done()
	t := time.NewTicker(m.every)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			m.refresh()
		}
	}
}

// Close stops refreshing and removes this host from the set, so the
// others count one host fewer at once (else after three seconds).
func (m *Members) Close(ctx context.Context) error {
	var err error
	m.once.Do(func() {
		close(m.stop)
		m.stopped.Wait()
		err = classify(m.store.rdb.ZRem(ctx, m.key, m.id).Err())
	})
	return err
}
