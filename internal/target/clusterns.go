package target

import (
	"sync"

	"github.com/fleetgo/fleet/internal/names"
)

// maxNamespaceMemo bounds the memo of ClusterNamespace: above the 100,000
// clusters of the paper model, so that only the names of deleted clusters
// can fill it, and then it starts over (about 17 MB at most).
const maxNamespaceMemo = 1 << 17

// clusterKey is a Cluster's workspace and name, neither of which can
// change for a given object.
type clusterKey struct{ workspace, name string }

// namespaceMemo holds names.ClusterNamespace per cluster. Bundle workers
// share it and run concurrently, so it has a lock; a value is a pure
// function of its key, so a race only computes it twice.
var namespaceMemo = struct {
	sync.RWMutex
	m map[clusterKey]string
}{m: map[clusterKey]string{}}

// ClusterNamespace is names.ClusterNamespace(workspace, name), computed
// once per cluster. Every targeting pass checks every cluster's
// status.namespace against it (the agent may write that field, only this
// name is trusted); at 10,000 clusters and 10 bundles a full retarget
// computed it 100,000 times, a sha256 and four allocations each.
func ClusterNamespace(workspace, name string) string {
	k := clusterKey{workspace: workspace, name: name}
	namespaceMemo.RLock()
	ns, ok := namespaceMemo.m[k]
	namespaceMemo.RUnlock()
	if ok {
		return ns
	}
	ns = names.ClusterNamespace(workspace, name)
	namespaceMemo.Lock()
	if len(namespaceMemo.m) >= maxNamespaceMemo {
		clear(namespaceMemo.m)
	}
	namespaceMemo.m[k] = ns
	namespaceMemo.Unlock()
	return ns
}
