package manager

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/fleetgo/fleet/internal/metrics"
	"github.com/fleetgo/fleet/internal/transitions"
)

// setupOperations adds the Fleet-level metrics (computed at scrape time
// from this replica's cache) and the transition events. Both run on the
// elected leader only, so a standby replica never reports twice; cluster
// families and events come from the unsharded replica only. With GitOps
// off, the metrics report no GitRepos (withoutGitRepos).
func setupOperations(_ context.Context, mgr ctrl.Manager, opts Options) error {
	unsharded := opts.ShardID == ""
	var reader client.Reader = mgr.GetCache()
	if opts.DisableGitOps {
		reader = withoutGitRepos{Reader: reader}
	}
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		return metrics.Run(ctx, metrics.Source{Reader: reader, ShardID: opts.ShardID,
			HelmOps: !opts.DisableHelmOps, Clusters: unsharded})
	})); err != nil {
		return err
	}
	return transitions.Setup(mgr, transitions.Options{Clusters: unsharded})
}
