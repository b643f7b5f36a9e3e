package deployer

import (
	"sync"
	"time"
)

// LookupMaxAge is how long the Deployer trusts what it last saw of two
// things every deploy needs and that rarely change: whether the
// DefaultServiceAccount exists in the agent namespace, and that a release
// namespace exists with the labels and annotations the bundle asks for.
// Each was one GET per deploy on the downstream API server, two of the
// sixteen requests of a five-object upgrade. A deploy that fails forgets
// its namespace, so the retry looks again; a fleet-default account created
// or deleted takes effect within this time. Both lookups are now mostly
// avoided: the agent watches the account (DefaultAccounts; the GET is the
// fallback until the watch has listed), and an upgrade whose release is
// stored in its namespace does not look the namespace up, unless the
// bundle asks for namespace labels or annotations.
const LookupMaxAge = 10 * time.Second

// recent remembers, per key, a value and when it was looked up. Safe for
// concurrent use. Entries older than maxAge are dropped when new ones are
// added, so its size is bounded by the keys looked up in the last maxAge.
type recent[V any] struct {
	maxAge time.Duration
	now    func() time.Time

	mu      sync.Mutex
	entries map[string]recentEntry[V]
}

type recentEntry[V any] struct {
	value V
	at    time.Time
}

func newRecent[V any](maxAge time.Duration) *recent[V] {
	return &recent[V]{maxAge: maxAge, now: time.Now, entries: map[string]recentEntry[V]{}}
}

// get returns the value for key if it was put less than maxAge ago.
func (r *recent[V]) get(key string) (V, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.entries[key]
	if !ok || r.now().Sub(e.at) >= r.maxAge {
		var zero V
		return zero, false
	}
	return e.value, true
}

// put records v for key as of now.
func (r *recent[V]) put(key string, v V) {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, e := range r.entries {
		if now.Sub(e.at) >= r.maxAge {
			delete(r.entries, k)
		}
	}
	r.entries[key] = recentEntry[V]{value: v, at: now}
}

// forget drops key.
func (r *recent[V]) forget(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.entries, key)
}

// clear drops every entry.
func (r *recent[V]) clear() {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.entries)
}
