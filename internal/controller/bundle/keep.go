package bundle

import (
	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/target"
)

// keeps reports whether target t keeps the bundle's deployment bd (nil:
// none) in t's cluster namespace from being deleted as untargeted.
//
// A target that deploys keeps it. A failed target keeps what is there, so
// that a cluster whose options cannot be computed, or whose status.namespace
// was cleared or rewritten (target.Compute then gives it the namespace the
// manager computes for it), does not lose what it runs. The exception is a
// deployment labelled for another Cluster: two Clusters whose long names
// shorten to one namespace both compute it, and registration refuses the
// second one (NamespaceConflict, no status.namespace); that one must not
// hold on to the owner's deployment after the bundle stopped targeting the
// owner. A deployment without the cluster labels names no other Cluster
// and is kept: an unknown owner is no reason to delete. A Refused target
// (registration refused the cluster's namespace) keeps nothing, not even a
// deployment labelled for its own cluster: the namespace is the owner's,
// whose agent would run it.
func keeps(t *target.Target, bd *fleet.BundleDeployment) bool {
	if t.Refused {
		return false
	}
	if t.Err == nil || bd == nil {
		return true
	}
	ws, name := bd.Labels[fleet.ClusterNamespaceLabel], bd.Labels[fleet.ClusterLabel]
	if ws == "" && name == "" {
		return true
	}
	return ws == t.Cluster.Namespace && name == t.Cluster.Name
}
