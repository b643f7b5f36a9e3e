package contentapi

import (
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// PublishedMemory is how long Published remembers a write: longer than
// the manager's cache takes to show its own write, even on a saturated API
// server.
const PublishedMemory = 30 * time.Second

// Published remembers which Contents the BundleDeployments this manager
// process wrote in the last PublishedMemory reference, so that the content
// API can answer an agent that saw a new deployment before the manager's
// own cache did.
//
// That is the common case in a rollout: the agent's watch carries its own
// namespace, the manager's carries every deployment, and in a 1,000-cluster
// change 908 of 1,000 Content reads arrived before the manager's cache had
// the deployment, each costing a GET of it from the API server. The
// manager is the only writer of a deployment's spec (a sharded bundle has
// one replica), so its own last write is what the API server holds;
// deleting a deployment forgets it. A miss here still falls back to that
// GET. The zero value is not usable; a nil *Published remembers nothing.
type Published struct {
	now func() time.Time

	mu      sync.Mutex
	entries map[types.NamespacedName]publishedEntry
	records int
}

type publishedEntry struct {
	contents []string
	at       time.Time
}

// NewPublished returns an empty Published.
func NewPublished() *Published {
	return &Published{now: time.Now, entries: map[types.NamespacedName]publishedEntry{}}
}

// sweepEvery is how many records pass between two sweeps of expired
// entries, which keeps the map to about the writes of the last
// PublishedMemory at a cost that is constant per record.
const sweepEvery = 1024

// Record notes that the deployment key, as just written, references
// contents (its deployment's and staged deployment's Contents).
func (p *Published) Record(key types.NamespacedName, contents []string) {
	if p == nil {
		return
	}
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.entries[key] = publishedEntry{contents: slices.Clone(contents), at: now}
	p.records++
	if p.records%sweepEvery == 0 {
		for k, e := range p.entries {
			if now.Sub(e.at) >= PublishedMemory {
				delete(p.entries, k)
			}
		}
	}
}

// Forget drops what is known of key (it was deleted).
func (p *Published) Forget(key types.NamespacedName) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.entries, key)
}

// References reports whether this process wrote key less than
// PublishedMemory ago referencing Content name.
func (p *Published) References(key types.NamespacedName, name string) bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.entries[key]
	return ok && p.now().Sub(e.at) < PublishedMemory && slices.Contains(e.contents, name)
}
