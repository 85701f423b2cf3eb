package metrics

import (
	"sync"
	"sync/atomic"
)

// cowMap is a map of counters by label that readers load without a lock
// and writers copy on write, holding at most max labels: beyond them,
// other's counters.
type cowMap[V any] struct {
	m  atomic.Pointer[map[string]*V]
	mu sync.Mutex // serialises writers of m
}

// get returns key's counters, made by mk on first use; past max labels,
// other's.
func (c *cowMap[V]) get(key, other string, max int, mk func(label string) *V) *V {
	if m := c.m.Load(); m != nil {
		if v, ok := (*m)[key]; ok {
			return v
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var old map[string]*V
	if m := c.m.Load(); m != nil {
		old = *m
	}
	if v, ok := old[key]; ok {
		return v
	}
	if len(old) >= max {
		if v, ok := old[other]; ok {
			return v
		}
		key = other
	}
	m := make(map[string]*V, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	v := mk(key)
	m[key] = v
	c.m.Store(&m)
	return v
}

// load returns the map as it stands (nil if empty); it must not be
// modified.
func (c *cowMap[V]) load() map[string]*V {
	if m := c.m.Load(); m != nil {
		return *m
	}
	return nil
}
