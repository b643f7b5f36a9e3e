package helmop

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/names"
	"github.com/fleetgo/fleet/internal/summary"
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
// one has one, or has been processed and does not target that cluster at
// all (see handedOver). Nothing is deleted while the Bundle named op.Name
// does not exist (its build failed, or was refused): the old one keeps
// deploying.
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
	curDeps, err := r.deployments(ctx, cur)
	if err != nil {
		return false, err
	}
	log := ctrl.LoggerFrom(ctx).WithValues("helmop", client.ObjectKeyFromObject(op))
	waiting := false
	for _, b := range old {
		oldDeps, err := r.deployments(ctx, b)
		if err != nil {
			return false, err
		}
		if ok, why := handedOver(oldDeps, curDeps, cur); !ok {
			log.V(1).Info("keeping the helmop's bundle of an older name", "bundle", b.Name, "why", why)
			waiting = true
			continue
		}
		log.Info("deleting the helmop's bundle of an older name, its deployments taken over", "bundle", b.Name, "by", cur.Name)
		if err := r.Client.Delete(ctx, b, client.Preconditions{UID: &b.UID}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return false, fmt.Errorf("pruning bundle %s: %w", b.Name, err)
		}
	}
	return waiting, nil
}

// deployments maps each cluster namespace holding a BundleDeployment of b
// to the cluster it was written for ("<namespace>/<name>", from the
// Bundle controller's labels; empty when they are missing).
func (r *Reconciler) deployments(ctx context.Context, b *fleet.Bundle) (map[string]string, error) {
	var list fleet.BundleDeploymentList
	if err := r.Client.List(ctx, &list, client.MatchingLabels{
		fleet.BundleLabel: b.Name, fleet.BundleNamespaceLabel: b.Namespace,
	}); err != nil {
		return nil, fmt.Errorf("listing the deployments of bundle %s: %w", b.Name, err)
	}
	out := make(map[string]string, len(list.Items))
	for i := range list.Items {
		l := list.Items[i].Labels
		key := ""
		if l[fleet.ClusterNamespaceLabel] != "" && l[fleet.ClusterLabel] != "" {
			key = l[fleet.ClusterNamespaceLabel] + "/" + l[fleet.ClusterLabel]
		}
		out[list.Items[i].Namespace] = key
	}
	return out, nil
}

// handedOver reports whether a Bundle with the deployments old (cluster
// namespace → cluster, see deployments) may be deleted now that cur, with
// the deployments curDeps, replaces it, and if not, why. A namespace is
// handed over when cur has a BundleDeployment there, or when cur does not
// target its cluster at all: the Bundle controller has processed cur's
// generation, created every deployment it wants (fewer new ones in its
// last pass than its maxNew allows) and records no target error for that
// cluster. A failed target (a values template failing for the cluster, a
// tampered status.namespace) gets no BundleDeployment either, but it is a
// cluster cur wants: deleting the old Bundle would uninstall the release
// there, so it stays until the error is fixed.
func handedOver(old, curDeps map[string]string, cur *fleet.Bundle) (bool, string) {
	var missing []string
	for ns := range old {
		if _, ok := curDeps[ns]; !ok {
			missing = append(missing, ns)
		}
	}
	if len(missing) == 0 {
		return true, ""
	}
	st := &cur.Status
	switch {
	case st.ObservedGeneration != cur.Generation:
		return false, fmt.Sprintf("bundle %s is not processed yet", cur.Name)
	case summary.Rejection(cur) != nil:
		return false, fmt.Sprintf("bundle %s is rejected", cur.Name)
	case st.NewlyCreated >= st.MaxNew:
		return false, fmt.Sprintf("bundle %s has deployments left to create", cur.Name)
	}
	failed, complete := targetErrors(st.Summary)
	slices.Sort(missing)
	for _, ns := range missing {
		for key, msg := range failed {
			if (key != "" && key == old[ns]) || clusterNamespaceOf(key) == ns {
				return false, fmt.Sprintf("bundle %s has a target error for cluster %s: %s", cur.Name, key, msg)
			}
		}
	}
	if !complete {
		return false, fmt.Sprintf("bundle %s has errors in clusters its status does not list", cur.Name)
	}
	return true, ""
}

// targetErrors are the clusters ("<namespace>/<name>") the Bundle status
// lists in error, with their messages. A failed target is counted and
// listed so (state ErrApplied, the error as message) after the
// deployments, up to summary.MaxNonReadyResources entries; complete is
// false when the count says some are not listed, so any cluster may be
// one of them.
func targetErrors(s fleet.BundleSummary) (map[string]string, bool) {
	out := map[string]string{}
	for _, r := range s.NonReadyResources {
		if r.State == fleet.ErrApplied {
			out[r.Name] = r.Message
		}
	}
	return out, len(out) >= s.ErrApplied
}

// clusterNamespaceOf is the namespace of the BundleDeployments of the
// cluster key ("<namespace>/<name>"), or "" for a malformed key.
func clusterNamespaceOf(key string) string {
	ns, name, ok := strings.Cut(key, "/")
	if !ok || ns == "" || name == "" {
		return ""
	}
	return names.ClusterNamespace(ns, name)
}
