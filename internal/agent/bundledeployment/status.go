package bundledeployment

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/drift"
	"github.com/fleetgo/fleet/internal/summary"
)

// Condition reasons the agent writes.
const (
	ReasonDeployed          = "Deployed"
	ReasonDeployError       = "DeployError"
	ReasonWaitingDependency = "WaitingForDependency"
	ReasonWaitingValues     = "WaitingForValues"
	ReasonReady             = "Ready"
	ReasonNotReady          = "NotReady"
	ReasonModified          = "Modified"
	ReasonMonitored         = "Monitored"
	// ReasonWaitingContent: the Content or the values Secret could not be
	// read because the API server is overloaded or unreachable; it is read
	// again shortly.
	ReasonWaitingContent = "WaitingForContent"
)

// State is the state of a BundleDeployment as Fleet summarises it: the
// manager's own derivation (summary.ReportedState), so that display.state,
// dependsOn and the Bundle's counts never disagree. A deploymentID the
// manager holds back (rollout, partitions: spec.stagedDeploymentID differs)
// is OutOfSync, which dependsOn's default acceptedStates [Ready] does not
// accept. A failed deploy is ErrApplied also when it redeployed the
// deploymentID already applied (downstreamResourcesGeneration bumped, a
// restarted agent that found no release to adopt): what runs may be the
// earlier deploy, but the bundle no longer deploys, and Ready would hide
// that.
func State(bd *fleet.BundleDeployment) fleet.BundleState {
	return summary.ReportedState(bd)
}

func setCondition(st *fleet.BundleDeploymentStatus, gen int64, typ string, ok bool, reason, msg string) {
	s := metav1.ConditionFalse
	if ok {
		s = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type: typ, Status: s, Reason: reason, Message: msg, ObservedGeneration: gen,
	})
}

// setDeployError records a failed deployment: Deployed and Ready False with
// Helm's message, and status.ready false, which is what the manager counts
// (as Rancher Fleet's deployErrToStatus does). The previously applied
// deploymentID and release stay as they were: nothing was removed, and the
// agent does not monitor them until a deploy succeeds, so the readiness
// reported before no longer holds.
func setDeployError(bd *fleet.BundleDeployment, err error) {
	msg := err.Error()
	if len(msg) > 1024 {
		msg = msg[:1024]
	}
	bd.Status.Ready = false
	setCondition(&bd.Status, bd.Generation, fleet.ConditionDeployed, false, ReasonDeployError, msg)
	setCondition(&bd.Status, bd.Generation, fleet.ConditionReady, false, ReasonDeployError, msg)
	setDisplay(bd)
}

// setWaiting records why nothing was deployed yet (dependency, values,
// content).
// status.ready follows the Ready condition for the same reason as in
// setDeployError: a redeploy that waits is not monitored meanwhile.
func setWaiting(bd *fleet.BundleDeployment, reason, msg string) {
	bd.Status.Ready = false
	setCondition(&bd.Status, bd.Generation, fleet.ConditionReady, false, reason, msg)
	setDisplay(bd)
}

// setDeployed records a successful install/upgrade.
func setDeployed(bd *fleet.BundleDeployment, release string) {
	st := &bd.Status
	st.AppliedDeploymentID = bd.Spec.DeploymentID
	st.DownstreamResourcesGeneration = bd.Spec.DownstreamResourcesGeneration
	st.Release = release
	gen := bd.Spec.Options.ForceSyncGeneration
	st.SyncGeneration = &gen
	setCondition(st, bd.Generation, fleet.ConditionInstalled, true, ReasonDeployed, "")
	setCondition(st, bd.Generation, fleet.ConditionDeployed, true, ReasonDeployed, "")
}

// setMonitored copies a drift evaluation into the status.
func setMonitored(bd *fleet.BundleDeployment, r drift.Result) {
	st := &bd.Status
	st.Ready, st.NonModified = r.Ready, r.NonModified
	st.NonReadyStatus, st.ModifiedStatus = r.NonReady, r.Modified
	st.IncompleteState = r.Incomplete
	st.Resources = r.Resources
	st.ResourceCounts = r.Counts
	setCondition(st, bd.Generation, fleet.ConditionMonitored, true, ReasonMonitored, "")
	switch {
	case st.AppliedDeploymentID == bd.Spec.DeploymentID && r.Ready && r.NonModified:
		setCondition(st, bd.Generation, fleet.ConditionReady, true, ReasonReady, "")
	case st.AppliedDeploymentID == bd.Spec.DeploymentID:
		reason := ReasonNotReady
		if !r.NonModified {
			reason = ReasonModified
		}
		setCondition(st, bd.Generation, fleet.ConditionReady, false, reason, readyMessage(r))
	}
	setDisplay(bd)
}

// readyMessage lists what is modified or not ready, briefly.
func readyMessage(r drift.Result) string {
	var parts []string
	for _, m := range r.Modified {
		what := "modified"
		if m.Create {
			what = "missing"
		}
		parts = append(parts, fmt.Sprintf("%s %s %s", what, strings.ToLower(m.Kind), objName(m.Namespace, m.Name)))
	}
	for _, n := range r.NonReady {
		msg := ""
		if len(n.Summary.Message) > 0 {
			msg = ": " + n.Summary.Message[0]
		}
		parts = append(parts, fmt.Sprintf("%s %s %s%s", strings.ToLower(n.Summary.State), strings.ToLower(n.Kind), objName(n.Namespace, n.Name), msg))
	}
	if r.Incomplete {
		parts = append(parts, "and more")
	}
	return strings.Join(parts, "; ")
}

func objName(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

func yesNo(b bool) string {
	if b {
		return "Yes"
	}
	return "No"
}

func setDisplay(bd *fleet.BundleDeployment) {
	st := &bd.Status
	st.Display = fleet.BundleDeploymentDisplay{
		Deployed:  yesNo(meta.IsStatusConditionTrue(st.Conditions, fleet.ConditionDeployed)),
		Monitored: yesNo(meta.IsStatusConditionTrue(st.Conditions, fleet.ConditionMonitored)),
		State:     string(State(bd)),
	}
}

// statusChanged tells whether a status patch is needed at all; condition
// times only change with their status, so equal means equal.
func statusChanged(old, cur *fleet.BundleDeploymentStatus) bool {
	return !equality.Semantic.DeepEqual(old, cur)
}
