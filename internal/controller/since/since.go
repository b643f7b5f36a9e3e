// Package since remembers, per key, since when a condition has held without
// a break. Controllers use it to let a passing state settle before they act
// on it (a cluster waiting for its agent, a role granting more than it
// needs). It lives in memory only: after a restart a condition simply
// counts again from its next observation, which only delays the action.
package since

import (
	"sync"
	"time"
)

// Tracker is safe for concurrent use; its zero value is ready.
type Tracker[K comparable] struct {
	mu sync.Mutex
	m  map[K]time.Time
}

// Mark records that the condition holds for k, observed at now, and
// returns since when it has held: now at the first observation, else the
// time of the first observation after the last Clear.
func (t *Tracker[K]) Mark(k K, now time.Time) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	if since, ok := t.m[k]; ok {
		return since
	}
	if t.m == nil {
		t.m = map[K]time.Time{}
	}
	t.m[k] = now
	return now
}

// Clear records that the condition does not hold for k (any more).
func (t *Tracker[K]) Clear(k K) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, k)
}
