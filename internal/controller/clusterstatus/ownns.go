package clusterstatus

import (
	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/target"
)

// ownNamespace reports whether c's status.namespace is the namespace the
// manager gives it (target.ClusterNamespace), the only value the targeting
// controllers trust. The agent's credential may patch the status: taking
// the field as it is would let one cluster's reconcile mark another
// cluster's BundleDeployments Offline and count them in its own summary.
// Such a cluster, like one without a namespace (not registered yet, or
// refused one that belongs to another Cluster), is left as it is rather
// than given the computed name: for a refused Cluster that is the other
// Cluster's namespace. Its status stays as last written until the manager
// sets the field back, which reconciles it again.
func ownNamespace(c *fleet.Cluster) bool {
	ns := c.Status.Namespace
	return ns != "" && ns == target.ClusterNamespace(c.Namespace, c.Name)
}
