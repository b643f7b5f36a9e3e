package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/summary"
)

// ReasonKeepingResources: a GitRepo with keepResources is being deleted and
// waits until every agent has deployed keepResources before its Bundles
// are deleted.
const ReasonKeepingResources = "KeepingResources"

// keepPoll is how often a deletion waiting for keepResources to reach the
// agents looks again; the Bundle watch usually brings it back sooner.
const keepPoll = 5 * time.Second

// maxKeepShown caps the deployments named in the waiting message.
const maxKeepShown = 5

// keepBeforeDelete prepares the deletion of a GitRepo with keepResources.
// An agent decides whether to keep a deleted deployment's objects from the
// release it last deployed (its keep-resources storage label), so the
// flag must have been deployed before the BundleDeployment goes. A sync
// carries keepResources into the Bundles only when the repository can be
// fetched and built: set just before the deletion, or while the repo is
// unreachable or broken, the Bundles still say false and deleting them
// would uninstall everything. So the Bundles get keepResources here, and
// deletion waits until every BundleDeployment has it in its options and
// the agent has deployed them (or nothing was ever deployed). It returns
// what is still waited for, "" when the Bundles may be deleted. An
// unreachable cluster or a paused or rejected Bundle keeps the GitRepo
// until that changes, or keepResources is unset.
func (r *Reconciler) keepBeforeDelete(ctx context.Context, repo *fleet.GitRepo) (string, error) {
	var bundles fleet.BundleList
	if err := r.Client.List(ctx, &bundles, client.InNamespace(repo.Namespace), client.MatchingLabels{fleet.RepoLabel: repo.Name}); err != nil {
		return "", err
	}
	var waiting []string
	for i := range bundles.Items {
		b := &bundles.Items[i]
		if !b.DeletionTimestamp.IsZero() {
			// Already going (deleted by hand): nothing to keep it for.
			continue
		}
		if !b.Spec.KeepResources {
			orig := b.DeepCopy()
			b.Spec.KeepResources = true
			if err := r.Client.Patch(ctx, b, client.MergeFrom(orig)); client.IgnoreNotFound(err) != nil {
				return "", fmt.Errorf("setting keepResources on bundle %s: %w", b.Name, err)
			}
			waiting = append(waiting, "bundle "+b.Name+": keepResources set")
			continue
		}
		if c := summary.Rejection(b); c != nil {
			waiting = append(waiting, fmt.Sprintf("bundle %s is rejected: %s", b.Name, c.Message))
		} else if b.Status.ObservedGeneration != b.Generation {
			waiting = append(waiting, "bundle "+b.Name+": not processed yet")
		}
	}
	if len(waiting) > 0 {
		return keepMessage(waiting), nil
	}
	var bds fleet.BundleDeploymentList
	if err := r.Client.List(ctx, &bds, client.MatchingLabels{fleet.RepoLabel: repo.Name, fleet.BundleNamespaceLabel: repo.Namespace}); err != nil {
		return "", err
	}
	for i := range bds.Items {
		bd := &bds.Items[i]
		if !keepDeployed(bd) {
			what := "not deployed by its agent yet"
			if bd.Spec.Paused {
				what = "paused"
			}
			waiting = append(waiting, fmt.Sprintf("deployment %s/%s: %s", bd.Namespace, bd.Name, what))
		}
	}
	return keepMessage(waiting), nil
}

// keepDeployed says whether deleting bd leaves its objects: its options say
// keepResources and the agent has deployed them, or it never deployed
// anything.
func keepDeployed(bd *fleet.BundleDeployment) bool {
	if !bd.Spec.Options.KeepResources {
		return false
	}
	nothingDeployed := bd.Status.AppliedDeploymentID == "" && bd.Status.Release == ""
	return nothingDeployed || bd.Status.AppliedDeploymentID == bd.Spec.DeploymentID
}

func keepMessage(waiting []string) string {
	if len(waiting) == 0 {
		return ""
	}
	msg := strings.Join(waiting[:min(len(waiting), maxKeepShown)], "; ")
	if len(waiting) > maxKeepShown {
		msg += fmt.Sprintf(" (and %d more)", len(waiting)-maxKeepShown)
	}
	return "deleting with keepResources: waiting until every agent deployed keepResources: " + msg
}

// showKeeping tells on the status why the deletion waits.
func (r *Reconciler) showKeeping(ctx context.Context, repo *fleet.GitRepo, msg string) error {
	ctrl.LoggerFrom(ctx).V(1).Info("deletion waits for keepResources", "gitrepo", client.ObjectKeyFromObject(repo), "waiting", msg)
	cur := repo.DeepCopy()
	for _, typ := range []string{fleet.ConditionReady, fleet.ConditionReconciling} {
		status := metav1.ConditionFalse
		if typ == fleet.ConditionReconciling {
			status = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&cur.Status.Conditions, metav1.Condition{
			Type: typ, Status: status, Reason: ReasonKeepingResources, Message: msg, ObservedGeneration: repo.Generation,
		})
	}
	cur.Status.Display.State, cur.Status.Display.Message, cur.Status.Display.Error = "Deleting", msg, false
	if equality.Semantic.DeepEqual(repo.Status, cur.Status) {
		return nil
	}
	return client.IgnoreNotFound(r.Client.Status().Patch(ctx, cur, client.MergeFrom(repo)))
}
