package apply

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/summary"
)

// ReasonKeepingResources: a Bundle owner (GitRepo, HelmOp) with
// keepResources is being deleted and waits until every agent has deployed
// keepResources before its Bundles are deleted.
const ReasonKeepingResources = "KeepingResources"

// KeepPoll is how often a deletion waiting for keepResources to reach the
// agents looks again; the Bundle watch usually brings it back sooner
// (BundleDeployments are not watched by the owners' controllers).
const KeepPoll = 5 * time.Second

// maxKeepShown caps the deployments named in the waiting message.
const maxKeepShown = 5

// KeepBeforeDelete prepares the deletion of a Bundle owner with
// keepResources; owned selects its Bundles in namespace, by fleet.cattle.io/
// labels only, which the BundleDeployments inherit, so that the same
// selector finds their deployments.
//
// An agent decides whether to keep a deleted deployment's objects from the
// release it last deployed (its keep-resources storage label), so the flag
// must have been deployed before the BundleDeployment goes. The owner
// carries keepResources into its Bundles only when it builds them, which
// fails while its source is unreachable or broken, and which has not
// happened yet when keepResources is set just before the deletion: the
// Bundles still say false and deleting them would uninstall everything. So
// the Bundles get keepResources here, and deletion waits until every
// BundleDeployment has it in its options and the agent has deployed them
// (or nothing was ever deployed). It returns what is still waited for, ""
// when the Bundles may be deleted. An unreachable cluster, a cluster off
// schedule (outside its Schedule's windows) or a paused or rejected Bundle
// keeps the owner until that changes, or keepResources is unset. So does
// a deployment the Bundle no longer targets but keeps while its cluster is
// off schedule: nothing here can tell it from a target whose write failed
// or is yet to show, and skipping one of those would uninstall its
// release; it is deleted once a window opens, which ends the wait.
func KeepBeforeDelete(ctx context.Context, c client.Client, namespace string, owned labels.Selector) (string, error) {
	var bundles fleet.BundleList
	if err := c.List(ctx, &bundles, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: owned}); err != nil {
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
			if err := c.Patch(ctx, b, client.MergeFrom(orig)); client.IgnoreNotFound(err) != nil {
				return "", fmt.Errorf("setting keepResources on bundle %s: %w", b.Name, err)
			}
			waiting = append(waiting, "bundle "+b.Name+": keepResources set")
			continue
		}
		if cond := summary.Rejection(b); cond != nil {
			waiting = append(waiting, fmt.Sprintf("bundle %s is rejected: %s", b.Name, cond.Message))
		} else if b.Status.ObservedGeneration != b.Generation {
			waiting = append(waiting, "bundle "+b.Name+": not processed yet")
		}
	}
	if len(waiting) > 0 {
		return keepMessage(waiting), nil
	}
	inNamespace, err := labels.NewRequirement(fleet.BundleNamespaceLabel, selection.Equals, []string{namespace})
	if err != nil {
		return "", err
	}
	// Read only, so not copied: this runs every KeepPoll while the owner
	// waits, and its deployments may be one per cluster of a large fleet.
	var bds fleet.BundleDeploymentList
	if err := c.List(ctx, &bds, client.MatchingLabelsSelector{Selector: owned.DeepCopySelector().Add(*inNamespace)}, client.UnsafeDisableDeepCopy); err != nil {
		return "", err
	}
	for i := range bds.Items {
		bd := &bds.Items[i]
		if !KeepDeployed(bd) {
			waiting = append(waiting, fmt.Sprintf("deployment %s/%s: %s", bd.Namespace, bd.Name, keepHeldBy(bd)))
		}
	}
	return keepMessage(waiting), nil
}

// keepHeldBy says why the agent has not deployed bd's keepResources yet.
// It runs once every Bundle has been processed with keepResources, so a
// deployment whose options (current and staged) still lack it was not
// written by that pass: its cluster is no longer targeted (a deployment
// is then kept only while its cluster is off schedule, and deleted with
// its release uninstalled once a window opens or the Bundle goes) or its
// target failed. Its paused and offSchedule flags are stale then, so
// that is told first. A paused deployment and one of a cluster off
// schedule are held back by the agent until that changes.
func keepHeldBy(bd *fleet.BundleDeployment) string {
	switch {
	case !bd.Spec.Options.KeepResources && !bd.Spec.StagedOptions.KeepResources:
		return "not updated since keepResources was set: its cluster is no longer targeted " +
			"(kept only while off schedule, then deleted and its release uninstalled) or its target has an error"
	case bd.Spec.Paused:
		return "paused"
	case bd.Spec.OffSchedule:
		return "off schedule (held until a Schedule window of its cluster opens)"
	}
	return "not deployed by its agent yet"
}

// KeepDeployed says whether deleting bd leaves its objects: its options
// say keepResources and the agent has deployed them, or it never deployed
// anything.
func KeepDeployed(bd *fleet.BundleDeployment) bool {
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

// SetKeeping tells on an owner's status why its deletion waits (msg from
// KeepBeforeDelete): not Ready and Reconciling, reason
// ReasonKeepingResources, and the Deleting display state. The caller
// writes the status when it changed.
func SetKeeping(st *fleet.StatusBase, generation int64, msg string) {
	for _, typ := range []string{fleet.ConditionReady, fleet.ConditionReconciling} {
		status := metav1.ConditionFalse
		if typ == fleet.ConditionReconciling {
			status = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: typ, Status: status, Reason: ReasonKeepingResources, Message: msg, ObservedGeneration: generation,
		})
	}
	st.Display.State, st.Display.Message, st.Display.Error = "Deleting", msg, false
}
