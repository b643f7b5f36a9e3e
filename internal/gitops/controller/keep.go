package controller

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/apply"
)

// ReasonKeepingResources: a GitRepo with keepResources is being deleted and
// waits until every agent has deployed keepResources before its Bundles
// are deleted. The HelmOp uses the same reason (see apply.KeepBeforeDelete).
const ReasonKeepingResources = apply.ReasonKeepingResources

// keepPoll is how often a deletion waiting for keepResources to reach the
// agents looks again; the Bundle watch usually brings it back sooner.
const keepPoll = apply.KeepPoll

// keepBeforeDelete prepares the deletion of a GitRepo with keepResources:
// its Bundles get keepResources, and it returns what is still waited for
// before they may be deleted ("" when nothing), as apply.KeepBeforeDelete
// explains. A sync carries keepResources into the Bundles only when the
// repository can be fetched and built, so it cannot be relied upon here.
func (r *Reconciler) keepBeforeDelete(ctx context.Context, repo *fleet.GitRepo) (string, error) {
	return apply.KeepBeforeDelete(ctx, r.Client, repo.Namespace, labels.SelectorFromSet(labels.Set{fleet.RepoLabel: repo.Name}))
}

// keepDeployed says whether deleting bd leaves its objects.
func keepDeployed(bd *fleet.BundleDeployment) bool { return apply.KeepDeployed(bd) }

// showKeeping tells on the status why the deletion waits.
func (r *Reconciler) showKeeping(ctx context.Context, repo *fleet.GitRepo, msg string) error {
	ctrl.LoggerFrom(ctx).V(1).Info("deletion waits for keepResources", "gitrepo", client.ObjectKeyFromObject(repo), "waiting", msg)
	cur := repo.DeepCopy()
	apply.SetKeeping(&cur.Status.StatusBase, repo.Generation, msg)
	if equality.Semantic.DeepEqual(repo.Status, cur.Status) {
		return nil
	}
	return client.IgnoreNotFound(r.Client.Status().Patch(ctx, cur, client.MergeFrom(repo)))
}
