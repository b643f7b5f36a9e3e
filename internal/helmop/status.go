package helmop

import (
	"fmt"
	"strings"
	"time"

	"github.com/Masterminds/semver/v3"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/summary"
)

// Condition reasons set by this controller.
const (
	ReasonAccepted       = "Accepted"
	ReasonInvalidSpec    = "InvalidSpec"
	ReasonPolled         = "Polled"
	ReasonPollingOff     = "PollingDisabled"
	ReasonBuildFailed    = "BuildFailed"
	ReasonBuilt          = "Built"
	ReasonWaitingBundle  = "WaitingForBundle"
	ReasonBundleNotReady = "BundleNotReady"
	ReasonBundleReady    = "BundleReady"
	// ReasonBundleFailed is used when the rejected Bundle's Stalled
	// condition has no reason of its own; otherwise its reason (the Bundle
	// controller's InvalidBundle) is shown.
	ReasonBundleFailed = "BundleFailed"
)

// outcome is what the controller knows of the last build; computeStatus
// turns it and the Bundle into the status without any I/O.
type outcome struct {
	// Err is the last build's error (nil after a success); Input says
	// the spec or a Secret has to change before a build can work.
	Err   error
	Input bool
	// Polled is when the chart version was last resolved, Version what
	// it resolved to (zero and empty before the first success).
	Polled  time.Time
	Version string
	// Polling says the version is re-resolved on an interval.
	Polling bool
	// Built says the current generation was built successfully.
	Built bool
	// Kept are the Bundles of older names pruneRenamed keeps until the
	// Bundle named after the HelmOp has taken their deployments over.
	Kept []keptBundle
}

// computeStatus sets every status field this controller owns. Ready is True
// only when the last build worked and the Bundle is ready on all its
// clusters, so a failing download is never hidden behind healthy old
// deployments.
func computeStatus(st *fleet.HelmOpStatus, generation int64, o outcome, b *fleet.Bundle) {
	// Messages quote the Bundle, which quotes agents: each is cut so that
	// the API server never refuses the status write.
	set := func(t string, s metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: t, Status: s, Reason: reason, Message: summary.ConditionMessage(msg), ObservedGeneration: generation,
		})
	}
	if o.Built {
		st.ObservedGeneration = generation
	}
	if o.Version != "" {
		st.Version = o.Version
	}
	if !o.Polled.IsZero() {
		t := metav1.NewTime(o.Polled.Truncate(time.Second))
		st.LastPollingTime = &t
	}

	if o.Err != nil && o.Input {
		set(fleet.ConditionAccepted, metav1.ConditionFalse, ReasonInvalidSpec, o.Err.Error())
	} else {
		set(fleet.ConditionAccepted, metav1.ConditionTrue, ReasonAccepted, "")
	}
	switch {
	case o.Err != nil:
		set(fleet.ConditionPolled, metav1.ConditionFalse, ReasonBuildFailed, o.Err.Error())
	case o.Polling:
		set(fleet.ConditionPolled, metav1.ConditionTrue, ReasonPolled, "")
	default:
		set(fleet.ConditionPolled, metav1.ConditionFalse, ReasonPollingOff, "the chart version is exact or polling is off")
	}

	var bs fleet.BundleSummary
	// rejected is the Bundle controller refusing the current generation of
	// the Bundle whole (Stalled=True, observedGeneration not bumped): it
	// stays so until the Bundle changes, so it is an error, not waiting.
	rejected := bundleRejection(b)
	waiting := rejected == nil && (b == nil || b.Status.ObservedGeneration != b.Generation)
	if b != nil {
		// The Bundle's non-ready entries name clusters; the HelmOp's name
		// the Bundle (Rancher's "[Bundle <name>: <message>]").
		bs = b.Status.Summary
		bs.NonReadyResources = summary.NonReadyByBundle(b.Name, bs.NonReadyResources)
	}
	st.Summary = bs
	st.ReadyClusters, st.DesiredReadyClusters = bs.Ready, bs.DesiredReady
	st.Display.ReadyBundleDeployments = summary.ReadyCount(bs)

	switch {
	case o.Err != nil && o.Input:
		set(fleet.ConditionStalled, metav1.ConditionTrue, ReasonInvalidSpec, o.Err.Error())
		set(fleet.ConditionReconciling, metav1.ConditionFalse, ReasonInvalidSpec, "")
	case o.Err != nil:
		set(fleet.ConditionStalled, metav1.ConditionFalse, ReasonBuildFailed, "")
		set(fleet.ConditionReconciling, metav1.ConditionTrue, ReasonBuildFailed, "retrying: "+o.Err.Error())
	case rejected != nil:
		set(fleet.ConditionStalled, metav1.ConditionTrue, rejected.Reason, rejected.Message)
		set(fleet.ConditionReconciling, metav1.ConditionFalse, rejected.Reason, "")
	case waiting:
		set(fleet.ConditionStalled, metav1.ConditionFalse, ReasonBuilt, "")
		set(fleet.ConditionReconciling, metav1.ConditionTrue, ReasonWaitingBundle, "waiting for the bundle to be processed")
	default:
		set(fleet.ConditionStalled, metav1.ConditionFalse, ReasonBuilt, "")
		set(fleet.ConditionReconciling, metav1.ConditionFalse, ReasonBuilt, "")
	}

	r := readyStatus(o, bs, rejected, waiting)
	// Notes that are no failure follow: a Bundle of an older name kept
	// during the rename hand-over (on any outcome: it is what still
	// deploys), and the Bundle's warnings when the build worked.
	if o.Err == nil && rejected == nil && !waiting && b != nil {
		r.msg = summary.JoinMessages(r.msg, summary.BundleWarnings([]*fleet.Bundle{b}))
	}
	r.msg = summary.ConditionMessage(summary.JoinMessages(r.msg, renameMessage(o.Kept)))
	set(fleet.ConditionReady, r.status, r.reason, r.msg)
	st.Display.State, st.Display.Message, st.Display.Error = r.state, r.msg, r.err
}

// readyState is the Ready condition and display computed by readyStatus.
type readyState struct {
	status             metav1.ConditionStatus
	reason, msg, state string
	err                bool
}

// readyStatus is Ready as the last build and the Bundle (summarised in bs)
// make it, before the notes computeStatus adds.
func readyStatus(o outcome, bs fleet.BundleSummary, rejected *metav1.Condition, waiting bool) readyState {
	switch {
	case o.Err != nil:
		reason := ReasonBuildFailed
		if o.Input {
			reason = ReasonInvalidSpec
		}
		return readyState{status: metav1.ConditionFalse, reason: reason, msg: o.Err.Error(), state: "Error", err: true}
	case rejected != nil:
		return readyState{status: metav1.ConditionFalse, reason: rejected.Reason, msg: rejected.Message, state: "Error", err: true}
	case waiting:
		return readyState{status: metav1.ConditionFalse, reason: ReasonWaitingBundle, msg: "waiting for the bundle to be processed", state: string(fleet.WaitApplied)}
	case !summary.IsReady(bs):
		msg := summary.ReadyMessage(bs, "Bundle")
		if msg == "" {
			msg = fmt.Sprintf("%s ready", summary.ReadyCount(bs))
		}
		return readyState{status: metav1.ConditionFalse, reason: ReasonBundleNotReady, msg: msg, state: string(summary.WorstState(bs))}
	}
	return readyState{status: metav1.ConditionTrue, reason: ReasonBundleReady, state: string(fleet.Ready)}
}

// bundleRejection is the Bundle's Stalled condition when the Bundle
// controller rejected its current generation whole (summary.Rejection),
// with ReasonBundleFailed when it has no reason; nil otherwise.
func bundleRejection(b *fleet.Bundle) *metav1.Condition {
	c := summary.Rejection(b)
	if c != nil && c.Reason == "" {
		c.Reason = ReasonBundleFailed
	}
	return c
}

// pollingInterval is how often op's chart version is re-resolved, or 0:
// only with a pollingInterval, and only when the version can move (a
// range, "*" or empty, not an exact version) and the chart is not a
// fixed .tgz URL. The interval is at least floor.
func pollingInterval(op *fleet.HelmOp, floor time.Duration) time.Duration {
	iv := op.Spec.PollingInterval
	h := op.Spec.Helm
	if iv == nil || iv.Duration <= 0 || h == nil {
		return 0
	}
	if _, err := semver.StrictNewVersion(h.Version); err == nil {
		return 0
	}
	if strings.HasSuffix(h.Chart, ".tgz") {
		return 0
	}
	return max(iv.Duration, floor)
}
