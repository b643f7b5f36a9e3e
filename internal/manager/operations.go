package manager

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/fleetgo/fleet/internal/metrics"
	"github.com/fleetgo/fleet/internal/transitions"
)

// setupOperations adds the Fleet-level metrics (computed at scrape time
// from this replica's cache) and the transition events. Both run on the
// elected leader only, so a standby replica never reports twice; cluster
// families and events come from the unsharded replica only.
func setupOperations(_ context.Context, mgr ctrl.Manager, opts Options) error {
	unsharded := opts.ShardID == ""
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		return metrics.Run(ctx, metrics.Source{Reader: mgr.GetCache(), ShardID: opts.ShardID,
			HelmOps: !opts.DisableHelmOps, Clusters: unsharded})
	})); err != nil {
		return err
	}
	return transitions.Setup(mgr, transitions.Options{Clusters: unsharded})
}
