package serve

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// Bounds of the live fallback: how long a miss (or a namespace's LIST) is
// remembered, how many misses and LISTs at most, and how long one shared
// live read may take.
const (
	missTTL         = 2 * time.Second
	maxMisses       = 1 << 14
	maxLists        = 1 << 10
	liveReadTimeout = 30 * time.Second
)

// liveCheck is the last look, at the API server, for a reference the cache
// and Published do not show: deployment bdName of ns (liveReferences), or
// any deployment of ns when the agent names none (listCheck). The agent
// chooses ns (its own), bdName and name, so a buggy or compromised agent
// could otherwise make every request of a loop cost the manager's shared
// client a read or a list: identical concurrent requests share one read
// (liveFlight), and a miss is remembered for missTTL (misses), so a Content
// and hint asked for again and again cost one read per missTTL. Reads of
// all flights together are capped (liveSlots, maxLiveReads). A
// deployment the cache has seen since, or this process has written, is
// answered before misses is consulted.
func (h *handler) liveCheck(ctx context.Context, ns, bdName, name string) (bool, error) {
	if bdName == "" {
		return h.listCheck(ctx, ns, name)
	}
	k := missKey{ns: ns, bd: bdName, name: name}
	if h.misses.has(k, h.clock()) {
		return false, nil
	}
	// Neither ns nor name contains a slash (parsePath), so the key is
	// unambiguous with the free-form hint last, and differs from
	// listCheck's (ns alone).
	v, err := shared(ctx, &h.liveFlight, ns+"/"+name+"/"+bdName, func() (any, error) {
		// A read that ended between the look above and this flight
		// answers as well.
		if h.misses.has(k, h.clock()) {
			return false, nil
		}
		// Shared by every waiter: not ended by the first one's request.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), liveReadTimeout)
		defer cancel()
		ok, err := h.liveReferences(ctx, types.NamespacedName{Namespace: ns, Name: bdName}, name)
		if err == nil && !ok {
			h.misses.add(k, h.clock())
		}
		return ok, err
	})
	if err != nil {
		return false, err
	}
	return v.(bool), nil
}

// listCheck is liveCheck without a hint: whether a deployment of ns, as a
// LIST of ns shows them, names Content name. Remembering misses per name
// does not bound it, since the agent chooses the name: asking for many
// random names would cost a LIST of the namespace each. So the latest LIST
// of a namespace answers every name asked for within missTTL of its start
// (lists), and requests of a namespace share one LIST in flight
// (liveFlight, keyed by the namespace): a namespace costs at most one
// hint-less LIST per missTTL, however many names it asks for. A deployment
// written after that LIST waits at most missTTL for a hint-less read (its
// agent retries), unless the cache or Published shows it first; the
// answers of one namespace's LIST are never used for another namespace.
func (h *handler) listCheck(ctx context.Context, ns, name string) (bool, error) {
	if names, ok := h.lists.get(ns, h.clock()); ok {
		_, found := names[name]
		return found, nil
	}
	v, err := shared(ctx, &h.liveFlight, ns, func() (any, error) {
		start := h.clock()
		// A LIST that ended between the look above and this flight
		// answers as well.
		if names, ok := h.lists.get(ns, start); ok {
			return names, nil
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), liveReadTimeout)
		defer cancel()
		names, err := referencedNames(ctx, h.liveReads(), ns)
		if err == nil {
			// From the LIST's start: it shows nothing written after it.
			h.lists.add(ns, names, start)
		}
		return names, err
	})
	if err != nil {
		return false, err
	}
	_, found := v.(contentNames)[name]
	return found, nil
}

// shared starts key's read fn in g, or joins the one in flight, and waits
// for it as long as ctx lasts. fn reads on a context of its own, so the
// read outlives any one waiter and answers all the others (and fills its
// cache) however many give up; a waiter whose request ends (the agent gave
// up, its connection closed, the aggregation layer timed out) returns its
// context's error at once instead of holding a goroutine and a server slot
// until the read ends (up to liveReadTimeout). DoChan's channel is
// buffered, so the read's end blocks on no waiter that has left.
func shared(ctx context.Context, g *singleflight.Group, key string, fn func() (any, error)) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err // gone already: start no read for it
	}
	select {
	case r := <-g.DoChan(key, recovered(fn)):
		return r.Val, r.Err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// recovered is fn with a panic turned into its error. DoChan runs fn on
// a goroutine of its own, where a panic would end the whole manager
// instead of one request as net/http's recovery did for Do.
func recovered(fn func() (any, error)) func() (any, error) {
	return func() (v any, err error) {
		defer func() {
			if p := recover(); p != nil {
				v, err = nil, fmt.Errorf("shared read panicked: %v", p)
			}
		}()
		return fn()
	}
}

func (h *handler) clock() time.Time {
	if h.now != nil {
		return h.now()
	}
	return time.Now()
}

// liveReferences reads one BundleDeployment from the API server and reports
// whether it references Content name. It asks the API server's watch cache
// first (resourceVersion 0: no etcd read), which is never older than the
// watch the agent saw the deployment on when both go to the same API
// server. If that copy is missing or does not reference the Content
// (another API server replica, lagging behind), it reads etcd. Both reads
// hold one slot of liveSlots, so the etcd read is never refused a slot
// after the watch cache's was served.
func (h *handler) liveReferences(ctx context.Context, key types.NamespacedName, name string) (bool, error) {
	release, err := h.liveSlots.acquire(ctx)
	if err != nil {
		return false, err
	}
	defer release()
	// etcd decides when the watch cache does not: with several API
	// servers the agent may have seen the deployment through another one
	// (coalesced and remembered as a miss by liveCheck, so a bogus name
	// costs one such read per miss period).
	for _, rv := range []string{"0", ""} {
		ok, err := deploymentReferences(ctx, h.live, key, name, &client.GetOptions{Raw: &metav1.GetOptions{ResourceVersion: rv}})
		if err != nil || ok {
			return ok, err
		}
	}
	return false, nil
}

// contentNames is the set of Contents the deployments of a namespace name.
type contentNames map[string]struct{}

// referencedNames lists the deployments of ns and returns the Contents they
// name (as references matches them).
func referencedNames(ctx context.Context, r client.Reader, ns string) (contentNames, error) {
	bds := &fleet.BundleDeploymentList{}
	if err := r.List(ctx, bds, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	names := contentNames{}
	for i := range bds.Items {
		for _, n := range contentsOf(&bds.Items[i]) {
			if n != "" {
				names[n] = struct{}{}
			}
		}
	}
	return names, nil
}

// missKey is one live check: Content name for deployment bd of namespace
// ns.
type missKey struct{ ns, bd, name string }

// missCache remembers live checks that found no reference, each until its
// time; at most maxMisses of them.
type missCache struct{ c expiring[missKey, struct{}] }

func (c *missCache) has(k missKey, now time.Time) bool {
	_, ok := c.c.get(k, now)
	return ok
}

func (c *missCache) add(k missKey, now time.Time) { c.c.add(k, struct{}{}, now, maxMisses) }

// listCache remembers the latest hint-less LIST of each namespace (what
// its deployments name) until missTTL after it started; at most maxLists
// namespaces.
type listCache struct {
	c expiring[string, contentNames]
}

func (c *listCache) get(ns string, now time.Time) (contentNames, bool) { return c.c.get(ns, now) }

func (c *listCache) add(ns string, names contentNames, start time.Time) {
	c.c.add(ns, names, start, maxLists)
}

// expiring maps keys to values for missTTL from when each was added. When
// it holds max entries, expired ones are dropped, then all: it bounds
// memory, not correctness (a dropped entry costs one more live read).
type expiring[K comparable, V any] struct {
	mu sync.Mutex
	m  map[K]expiringValue[V]
}

type expiringValue[V any] struct {
	v     V
	until time.Time
}

func (c *expiring[K, V]) get(k K, now time.Time) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok || !now.Before(e.until) {
		var zero V
		return zero, false
	}
	return e.v, true
}

func (c *expiring[K, V]) add(k K, v V, now time.Time, max int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[K]expiringValue[V]{}
	}
	if len(c.m) >= max {
		for old, e := range c.m {
			if !now.Before(e.until) {
				delete(c.m, old)
			}
		}
		if len(c.m) >= max {
			clear(c.m)
		}
	}
	c.m[k] = expiringValue[V]{v: v, until: now.Add(missTTL)}
}
