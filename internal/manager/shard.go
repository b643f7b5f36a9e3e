package manager

import (
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/controller/content"
	"github.com/fleetgo/fleet/internal/intern"
)

// ShardSelector selects the objects of shard id: labelled
// fleet.cattle.io/shard-ref=<id>, or, for the unsharded replica (id ""),
// not labelled at all. Objects naming a shard that does not run are never
// processed, as in Fleet.
func ShardSelector(id string) labels.Selector {
	var req *labels.Requirement
	if id == "" {
		req, _ = labels.NewRequirement(fleet.ShardLabel, selection.DoesNotExist, nil)
	} else {
		req, _ = labels.NewRequirement(fleet.ShardLabel, selection.Equals, []string{id})
	}
	return labels.NewSelector().Add(*req)
}

// shardCache limits what this replica's informers hold, so that a shard
// neither sees nor reconciles another shard's GitRepos, HelmOps and Bundles (and
// pays memory only for its own). Bundles and BundleDeployments carry their
// GitRepo's (and Bundle's) labels, hence the shard label.
//
// The unsharded replica still caches every BundleDeployment: it alone runs
// the cluster status and Content controllers, which count a cluster's
// deployments of all shards. Clusters and ClusterGroups are seen by all.
func shardCache(id string, gitOps, helmOps bool) cache.Options {
	sel := ShardSelector(id)
	by := map[client.Object]cache.ByObject{
		&fleet.Bundle{}: {Label: sel},
		// The only ClusterRoles the manager reads are the per-cluster
		// Content roles; a management cluster may hold thousands of others.
		&rbacv1.ClusterRole{}: {Label: contentRoles},
	}
	if id != "" {
		by[&fleet.BundleDeployment{}] = cache.ByObject{Label: sel}
	}
	// GitOps off: no GitRepo informer at all (clientOptions sends the few
	// GitRepo reads left to the API server).
	if gitOps {
		by[&fleet.GitRepo{}] = cache.ByObject{Label: sel}
	}
	// Also when the API server does not serve HelmOps yet (the cache's
	// mapper answers their scope while it is built, buildScopes): the
	// HelmOp controller started once they are served then sees this
	// shard's only.
	if helmOps {
		by[&fleet.HelmOp{}] = cache.ByObject{Label: sel}
	}
	// No controller reads managedFields, often a third of an object's size
	// (a Cluster carries the fields of the agent, the registration and the
	// status controllers). An update of a cached object without them leaves
	// them unchanged on the server. The strings that thousands of cached
	// objects repeat (a bundle's deploymentID in each of its deployments,
	// labels, conditions) are then kept once (internal/intern).
	return cache.Options{ByObject: by, DefaultTransform: intern.Transform(cache.TransformStripManagedFields())}
}

// contentRoles selects the ClusterRoles of the Content controller.
var contentRoles = func() labels.Selector {
	req, _ := labels.NewRequirement(content.RoleLabel, selection.Exists, nil)
	return labels.NewSelector().Add(*req)
}()
