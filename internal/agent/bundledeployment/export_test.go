package bundledeployment

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

var (
	started   []*Reconciler
	startedMu sync.Mutex
)

func init() {
	onSetup = func(r *Reconciler) {
		proxyContents(r)
		startedMu.Lock()
		defer startedMu.Unlock()
		started = append(started, r)
	}
}

// WatchedObjects is how many downstream objects of a BundleDeployment the
// drift watches of the reconcilers started in this test binary follow.
func WatchedObjects(namespace, name string) int {
	startedMu.Lock()
	defer startedMu.Unlock()
	n := 0
	for _, r := range started {
		n += r.watcher.Watched(types.NamespacedName{Namespace: namespace, Name: name})
	}
	return n
}
