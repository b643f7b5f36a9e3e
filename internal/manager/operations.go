package manager

import (
	"context"
	"errors"
	"sync/atomic"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/metrics"
	"github.com/fleetgo/fleet/internal/transitions"
)

// setupOperations adds the Fleet-level metrics (computed at scrape time
// from this replica's cache) and the transition events. Both run on the
// elected leader only, so a standby replica never reports twice; cluster
// families and events come from the unsharded replica only. With GitOps
// off, the metrics report no GitRepos (withoutGitRepos); HelmOps are
// reported once their controller runs (helmOpsOnceRunning).
func setupOperations(_ context.Context, mgr ctrl.Manager, opts Options) error {
	unsharded := opts.ShardID == ""
	var reader client.Reader = mgr.GetCache()
	if opts.DisableGitOps {
		reader = withoutGitRepos{Reader: reader}
	}
	if !opts.DisableHelmOps && opts.helmOpsRunning != nil {
		reader = helmOpsOnceRunning{Reader: reader, running: opts.helmOpsRunning}
	}
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		return metrics.Run(ctx, metrics.Source{Reader: reader, ShardID: opts.ShardID,
			HelmOps: !opts.DisableHelmOps, Clusters: unsharded})
	})); err != nil {
		return err
	}
	return transitions.Setup(mgr, transitions.Options{Clusters: unsharded})
}

// errHelmOpsNotRunning is what the metrics' reader answers for HelmOp
// lists before the HelmOp controller is set up.
var errHelmOpsNotRunning = errors.New("the HelmOp controller is not running yet: its CRD is not served")

// helmOpsOnceRunning is a cache reader that refuses HelmOp lists until the
// HelmOp controller is set up, which happens once the API server serves
// HelmOps (at start or later). Before, a list would ask discovery again at
// every scrape and fail; after, it reads the controller's informer.
type helmOpsOnceRunning struct {
	client.Reader
	running *atomic.Bool
}

func (r helmOpsOnceRunning) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*fleet.HelmOpList); ok && !r.running.Load() {
		return errHelmOpsNotRunning
	}
	return r.Reader.List(ctx, list, opts...)
}
