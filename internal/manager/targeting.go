package manager

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/fleetgo/fleet/internal/controller/bundle"
	"github.com/fleetgo/fleet/internal/controller/clusterstatus"
	"github.com/fleetgo/fleet/internal/controller/content"
)

// setupTargeting adds the Bundle controller: Bundle → BundleDeployments and
// rollout (every shard, for its own Bundles).
func setupTargeting(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	return bundle.Setup(ctx, mgr, bundle.Options{
		Workers: opts.Workers, ShardID: opts.ShardID, ContentRBAC: opts.ContentRBAC(), Published: opts.ContentAPI.Published,
		Policies: opts.policies,
	})
}

// setupClusterStatus adds the controllers that must run once per
// installation (unsharded replica): Content reference counting and
// per-cluster Content RBAC, Cluster and ClusterGroup status.
func setupClusterStatus(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	if err := content.Setup(ctx, mgr, content.Options{ContentRBAC: opts.ContentRBAC()}); err != nil {
		return err
	}
	return clusterstatus.Setup(ctx, mgr, clusterstatus.Options{OfflineThreshold: opts.OfflineThreshold, Workers: opts.Workers})
}
