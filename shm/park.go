package shm

import (
	"sync"
	"sync/atomic"
	"time"
)

// Parked waiters: a waiter that has slept maxSleep and still finds its lock
// held parks, and one goroutine of the table (the poller, running while
// any waiter is parked) looks at every parked waiter's lock word each
// maxSleep. It wakes a waiter when its lock is free, when its Wait's
// budget is spent, and when the lock's holder is found gone (asked every
// checkInterval); a waiter on a stopped holder is not woken otherwise. So
// waiting costs one look per parked waiter per maxSleep, in one goroutine,
// instead of each waiter waking up a thousand times a second.

// parking is a table's parked waiters.
type parking struct {
	mu      sync.Mutex
	waiters []*parked
	polling bool // the poller runs
}

// parked is one parked waiter.
type parked struct {
	l     *uint32       // the lock word it waits for
	until time.Time     // when its budget is spent; zero for none
	wake  chan struct{} // closed to wake it
}

// park waits until the lock word at l is free, until is past (if not
// zero), or the word's holder is found gone, give or take maxSleep.
func (t *Table) park(l *uint32, until time.Time) {
	p := &parked{l: l, until: until, wake: make(chan struct{})}
	t.parked.mu.Lock()
	t.parked.waiters = append(t.parked.waiters, p)
	if !t.parked.polling {
		t.parked.polling = true
		go t.poll()
	}
	t.parked.mu.Unlock()
	<-p.wake
}

// poll is the poller: it wakes parked waiters as park says, and ends when
// none is left.
func (t *Table) poll() {
	tick := time.NewTicker(maxSleep)
	defer tick.Stop()
	var checked time.Time
	for now := range tick.C {
		check := now.Sub(checked) >= checkInterval
		if check {
			checked = now
		}
		t.parked.mu.Lock()
		ws := t.parked.waiters
		for i := 0; i < len(ws); {
			p := ws[i]
			v := atomic.LoadUint32(p.l)
			if v&lockHeld == 0 || !p.until.IsZero() && !now.Before(p.until) ||
				check && !t.holderAlive((v&genMask)>>genShift, now) {
				close(p.wake)
				ws[i] = ws[len(ws)-1]
				ws[len(ws)-1] = nil
				ws = ws[:len(ws)-1]
				continue
			}
			i++
		}
		t.parked.waiters = ws
		if len(ws) == 0 {
			t.parked.polling = false
			t.parked.mu.Unlock()
			return
		}
		t.parked.mu.Unlock()
	}
}
