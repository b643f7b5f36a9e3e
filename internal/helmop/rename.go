package helmop

import (
	"context"
	"fmt"
	"maps"
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

// keptBundle is a Bundle of the HelmOp under an older name that
// pruneRenamed keeps, and why: the HelmOp's status names it
// (renameMessage) until it is deleted.
type keptBundle struct {
	Name, Why string
}

// pruneRenamed deletes op's Bundles named otherwise than op.Name once the
// Bundle named op.Name has taken over their deployments. It returns those
// it keeps (for the status), and whether they wait for a hand-over under
// way (the Bundle named op.Name exists), which the caller looks at again.
// On an error it returns no list: a partial one would drop notes from the
// status, so the caller keeps the last one.
// Such a Bundle is one an earlier version of this project wrote: it named
// the Bundle after the HelmOp made a Helm release name ("my.app" gave
// "my-app-deaa787f"), where Rancher Fleet, and now this controller, use
// the HelmOp's name as it is.
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
func (r *Reconciler) pruneRenamed(ctx context.Context, op *fleet.HelmOp) ([]keptBundle, bool, error) {
	var list fleet.BundleList
	if err := r.Client.List(ctx, &list, client.InNamespace(op.Namespace), client.MatchingLabelsSelector{Selector: ownSelector(op)}); err != nil {
		return nil, false, fmt.Errorf("listing bundles to prune: %w", err)
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
	if len(old) == 0 {
		return nil, false, nil
	}
	if cur == nil {
		// Not written yet (a failed or refused build, or before the
		// first), or a Bundle of that name belongs to something else
		// (the build then fails): the hand-over has not begun, and the
		// Bundle's creation wakes the HelmOp.
		kept := make([]keptBundle, 0, len(old))
		for _, b := range old {
			kept = append(kept, keptBundle{Name: b.Name, Why: fmt.Sprintf("bundle %s is not written by this HelmOp (yet)", op.Name)})
		}
		return kept, false, nil
	}
	curDeps, err := r.deployments(ctx, cur)
	if err != nil {
		return nil, false, err
	}
	log := ctrl.LoggerFrom(ctx).WithValues("helmop", client.ObjectKeyFromObject(op))
	var kept []keptBundle
	for _, b := range old {
		oldDeps, err := r.deployments(ctx, b)
		if err != nil {
			return nil, false, err
		}
		if ok, why := handedOver(oldDeps, curDeps, cur); !ok {
			log.V(1).Info("keeping the helmop's bundle of an older name", "bundle", b.Name, "why", why)
			kept = append(kept, keptBundle{Name: b.Name, Why: why})
			continue
		}
		log.Info("deleting the helmop's bundle of an older name, its deployments taken over", "bundle", b.Name, "by", cur.Name)
		if err := r.Client.Delete(ctx, b, client.Preconditions{UID: &b.UID}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return nil, false, fmt.Errorf("pruning bundle %s: %w", b.Name, err)
		}
	}
	return kept, len(kept) > 0, nil
}

// renameMessage tells, for the HelmOp's status, which Bundles of older
// names are kept and why, in name order; empty when none is. It is not a
// failure: the kept Bundle keeps deploying until its deployments are
// taken over.
func renameMessage(kept []keptBundle) string {
	kept = slices.Clone(kept)
	slices.SortFunc(kept, func(a, b keptBundle) int { return strings.Compare(a.Name, b.Name) })
	parts := make([]string, 0, len(kept))
	for _, k := range kept {
		parts = append(parts, fmt.Sprintf("bundle %s of an older name is kept until its deployments are taken over: %s", k.Name, k.Why))
	}
	return strings.Join(parts, "; ")
}

// deployment is what handedOver needs of one BundleDeployment: the
// cluster it was written for ("<namespace>/<name>", from the Bundle
// controller's labels; empty when they are missing) and its state. The
// state is summary.DeploymentState's, with the Offline mark: the Bundle
// status counts the deployment of an offline cluster Offline, and counting
// it ErrApplied here would let an unlisted failed target pass unseen.
type deployment struct {
	Cluster string
	State   fleet.BundleState
}

// deployments maps each cluster namespace holding a BundleDeployment of b
// to that deployment.
func (r *Reconciler) deployments(ctx context.Context, b *fleet.Bundle) (map[string]deployment, error) {
	var list fleet.BundleDeploymentList
	if err := r.Client.List(ctx, &list, client.MatchingLabels{
		fleet.BundleLabel: b.Name, fleet.BundleNamespaceLabel: b.Namespace,
	}); err != nil {
		return nil, fmt.Errorf("listing the deployments of bundle %s: %w", b.Name, err)
	}
	out := make(map[string]deployment, len(list.Items))
	for i := range list.Items {
		bd := &list.Items[i]
		d := deployment{State: summary.DeploymentState(bd)}
		if l := bd.Labels; l[fleet.ClusterNamespaceLabel] != "" && l[fleet.ClusterLabel] != "" {
			d.Cluster = l[fleet.ClusterNamespaceLabel] + "/" + l[fleet.ClusterLabel]
		}
		out[bd.Namespace] = d
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
func handedOver(old, curDeps map[string]deployment, cur *fleet.Bundle) (bool, string) {
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
	// A rejection first: it leaves observedGeneration behind too, but
	// waits for a change of the HelmOp, not for the Bundle controller.
	switch {
	case summary.Rejection(cur) != nil:
		return false, fmt.Sprintf("bundle %s is rejected", cur.Name)
	case st.ObservedGeneration != cur.Generation:
		return false, fmt.Sprintf("bundle %s is not processed yet", cur.Name)
	case st.NewlyCreated >= st.MaxNew:
		return false, fmt.Sprintf("bundle %s has deployments left to create", cur.Name)
	}
	failed, complete := targetErrors(st.Summary, curDeps)
	slices.Sort(missing)
	// In key order: the reason goes into the status, which must not
	// change on every look while nothing else does.
	keys := slices.Sorted(maps.Keys(failed))
	for _, ns := range missing {
		for _, key := range keys {
			if (key != "" && key == old[ns].Cluster) || clusterNamespaceOf(key) == ns {
				return false, fmt.Sprintf("bundle %s has a target error for cluster %s: %s", cur.Name, key, failed[key])
			}
		}
	}
	if !complete {
		return false, fmt.Sprintf("bundle %s has errors in clusters its status does not list", cur.Name)
	}
	return true, ""
}

// targetErrors are the clusters ("<namespace>/<name>") without a
// deployment in curDeps that the Bundle status lists in error, with their
// messages: only there can a target have failed. A failed target is
// counted and listed so (state ErrApplied, the error as message) after the
// deployments, up to summary.MaxNonReadyResources entries, while the count
// also holds the deployments in ErrApplied, which a rename makes of every
// new one (the agent refuses the release while the old deployment lives).
// complete is false when the count, less the deployments now in
// ErrApplied, says some failed targets are not listed, so any cluster
// without a deployment may be one of them.
func targetErrors(s fleet.BundleSummary, curDeps map[string]deployment) (map[string]string, bool) {
	out := map[string]string{}
	for _, r := range s.NonReadyResources {
		if r.State == fleet.ErrApplied && !deployedIn(curDeps, r.Name) {
			out[r.Name] = r.Message
		}
	}
	deployErrs := 0
	for _, d := range curDeps {
		if d.State == fleet.ErrApplied {
			deployErrs++
		}
	}
	return out, len(out) >= s.ErrApplied-deployErrs
}

// deployedIn reports whether deps has a deployment for the cluster key
// ("<namespace>/<name>"), by its labels or its namespace.
func deployedIn(deps map[string]deployment, key string) bool {
	if _, ok := deps[clusterNamespaceOf(key)]; ok {
		return true
	}
	for _, d := range deps {
		if d.Cluster != "" && d.Cluster == key {
			return true
		}
	}
	return false
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
