package helmop

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/apply"
)

// ReasonKeepingResources: a HelmOp with keepResources is being deleted and
// waits until every agent has deployed keepResources before its Bundle is
// deleted, as a GitRepo does.
const ReasonKeepingResources = apply.ReasonKeepingResources

// keepBeforeDelete prepares the deletion of a HelmOp with keepResources.
// A build carries keepResources into the Bundle, but none may have run
// since keepResources was set (deleted at once), and none succeeds while
// the chart repository fails; deleting the Bundle then would have the
// agents uninstall the release. So, as for a GitRepo, the Bundle gets
// keepResources here and it returns what is still waited for before it
// may be deleted, "" when nothing (see apply.KeepBeforeDelete).
func (r *Reconciler) keepBeforeDelete(ctx context.Context, op *fleet.HelmOp) (string, error) {
	return apply.KeepBeforeDelete(ctx, r.Client, op.Namespace, ownSelector(op))
}

// showKeeping tells on the status why the deletion waits.
func (r *Reconciler) showKeeping(ctx context.Context, op *fleet.HelmOp, msg string) error {
	ctrl.LoggerFrom(ctx).V(1).Info("deletion waits for keepResources", "helmop", client.ObjectKeyFromObject(op), "waiting", msg)
	cur := op.DeepCopy()
	apply.SetKeeping(&cur.Status.StatusBase, op.Generation, msg)
	if equality.Semantic.DeepEqual(op.Status, cur.Status) {
		return nil
	}
	return client.IgnoreNotFound(r.Client.Status().Patch(ctx, cur, client.MergeFrom(op)))
}
