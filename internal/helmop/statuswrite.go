package helmop

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/statuswrite"
)

// writeStatus derives the status of op (as read from the cache at the
// start of the reconcile) from the last build's outcome o and the Bundle b,
// and writes it through statuswrite.Write, as for GitRepos: the cache may
// not hold this process's previous status write, and the watch ignores
// status-only updates, so a skip or a patch against a stale copy would
// leave the status stale for good.
func (r *Reconciler) writeStatus(ctx context.Context, op *fleet.HelmOp, o outcome, b *fleet.Bundle) error {
	// Conditions describe the generation this reconcile built for, even
	// when a fresh read shows a newer one (whose event is on its way).
	generation := op.Generation
	return statuswrite.Write(ctx, op, statuswrite.Options[*fleet.HelmOp]{
		Versions: &r.statusRV,
		Compute:  func(cur *fleet.HelmOp) { computeStatus(&cur.Status, generation, o, b) },
		Equal:    func(x, y *fleet.HelmOp) bool { return equality.Semantic.DeepEqual(x.Status, y.Status) },
		Patch:    statuswrite.PatchStatus[*fleet.HelmOp](r.Client),
		Get:      statuswrite.ReadLive(r.APIReader, func() *fleet.HelmOp { return &fleet.HelmOp{} }),
	})
}
