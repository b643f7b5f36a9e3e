package helmop

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// maxStatusAttempts bounds the re-reads after conflicts in one reconcile;
// past it the error goes back to the work queue, which retries later.
const maxStatusAttempts = 5

// writeStatus derives the status of op (as read from the cache at the
// start of the reconcile) from the last build's outcome o and the Bundle b,
// and writes it when it differs from the stored one.
//
// The cache may not yet hold this process's previous status write, and
// the watch ignores status-only updates, so no later event would correct
// a status left stale. Hence, as for GitRepos:
//   - a status equal to a cached copy that may predate the last write
//     (statuswrite.Versions) is compared with the API server's copy
//     before the write is skipped;
//   - the patch carries an optimistic lock: made against a stale copy it
//     would leave out the fields equal there, however different they are
//     in the stored status. It conflicts instead, and the status is
//     derived again from the API server's copy.
func (r *Reconciler) writeStatus(ctx context.Context, op *fleet.HelmOp, o outcome, b *fleet.Bundle) error {
	key := client.ObjectKeyFromObject(op)
	// Conditions describe the generation this reconcile built for, even
	// when a fresh read shows a newer one (whose event is on its way).
	generation := op.Generation
	fresh := false
	for attempt := 1; ; attempt++ {
		cur := op.DeepCopy()
		computeStatus(&cur.Status, generation, o, b)
		if equality.Semantic.DeepEqual(op.Status, cur.Status) {
			if r.statusRV.SkipEqual(key, op.ResourceVersion, fresh) {
				return nil
			}
		} else {
			err := r.Client.Status().Patch(ctx, cur, client.MergeFromWithOptions(op, client.MergeFromWithOptimisticLock{}))
			switch {
			case err == nil:
				r.statusRV.Wrote(key, cur.ResourceVersion)
				return nil
			case apierrors.IsNotFound(err):
				return nil
			case !apierrors.IsConflict(err) || attempt >= maxStatusAttempts:
				return err
			}
		}
		op = &fleet.HelmOp{}
		if err := r.APIReader.Get(ctx, key, op); err != nil {
			return client.IgnoreNotFound(err)
		}
		fresh = true
	}
}
