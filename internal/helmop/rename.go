package helmop

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// renamePoll is how often a HelmOp whose Bundle under an older name waits
// for the hand-over is looked at again, besides the Bundle events that
// wake it.
const renamePoll = 5 * time.Second

// pruneRenamed deletes op's Bundles named otherwise than op.Name once the
// Bundle named op.Name has taken over their deployments, and reports
// whether one still waits. Such a Bundle is one an earlier version of this
// project wrote: it named the Bundle after the HelmOp made a Helm release
// name ("my.app" gave "my-app-deaa787f"), where Rancher Fleet, and now
// this controller, use the HelmOp's name as it is.
//
// The default release name of both is the same (names.HelmReleaseName of
// the Bundle name, which leaves a release name as it is), so the agent
// moves the release to the new BundleDeployment and upgrades it, as for a
// renamed GitRepo bundle, provided it sees the new BundleDeployment before
// the old one's deletion; otherwise it uninstalls the release and the new
// one installs it afresh. The old Bundle is therefore deleted only once the
// new one has a BundleDeployment in every cluster namespace where the old
// one has one, or has been processed and wants no more (see handedOver).
// Nothing is deleted while the Bundle named op.Name does not exist (its
// build failed, or was refused): the old one keeps deploying.
func (r *Reconciler) pruneRenamed(ctx context.Context, op *fleet.HelmOp) (bool, error) {
	var list fleet.BundleList
	if err := r.Client.List(ctx, &list, client.InNamespace(op.Namespace), client.MatchingLabelsSelector{Selector: ownSelector(op)}); err != nil {
		return false, fmt.Errorf("listing bundles to prune: %w", err)
	}
	var cur *fleet.Bundle
	var old []*fleet.Bundle
	for i := range list.Items {
		b := &list.Items[i]
		switch {
		case b.Name == op.Name:
			cur = b
		case b.DeletionTimestamp == nil:
			old = append(old, b)
		}
	}
	if cur == nil || len(old) == 0 {
		return false, nil
	}
	curNS, err := r.deploymentNamespaces(ctx, cur)
	if err != nil {
		return false, err
	}
	waiting := false
	for _, b := range old {
		oldNS, err := r.deploymentNamespaces(ctx, b)
		if err != nil {
			return false, err
		}
		if !handedOver(oldNS, curNS, cur) {
			waiting = true
			continue
		}
		ctrl.LoggerFrom(ctx).Info("deleting the helmop's bundle of an older name, its deployments taken over",
			"helmop", client.ObjectKeyFromObject(op), "bundle", b.Name, "by", cur.Name)
		if err := r.Client.Delete(ctx, b, client.Preconditions{UID: &b.UID}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return false, fmt.Errorf("pruning bundle %s: %w", b.Name, err)
		}
	}
	return waiting, nil
}

// deploymentNamespaces are the cluster namespaces holding a
// BundleDeployment of b.
func (r *Reconciler) deploymentNamespaces(ctx context.Context, b *fleet.Bundle) (map[string]bool, error) {
	var list fleet.BundleDeploymentList
	if err := r.Client.List(ctx, &list, client.MatchingLabels{
		fleet.BundleLabel: b.Name, fleet.BundleNamespaceLabel: b.Namespace,
	}); err != nil {
		return nil, fmt.Errorf("listing the deployments of bundle %s: %w", b.Name, err)
	}
	out := make(map[string]bool, len(list.Items))
	for i := range list.Items {
		out[list.Items[i].Namespace] = true
	}
	return out, nil
}

// handedOver reports whether a Bundle deployed to the cluster namespaces
// oldNS may be deleted now that cur replaces it (curNS: where cur has
// BundleDeployments): cur has one wherever the old one has, or the Bundle
// controller has processed cur's generation and created every deployment
// it wants (fewer new ones in its last pass than its maxNew allows), so a
// namespace without one is no target of cur and nothing there is handed
// over.
func handedOver(oldNS, curNS map[string]bool, cur *fleet.Bundle) bool {
	covered := true
	for ns := range oldNS {
		if !curNS[ns] {
			covered = false
			break
		}
	}
	if covered {
		return true
	}
	st := cur.Status
	return st.ObservedGeneration == cur.Generation && st.NewlyCreated < st.MaxNew
}
