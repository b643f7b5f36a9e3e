package controller

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/summary"
)

// Condition reasons set by this controller.
const (
	ReasonAccepted      = "Accepted"
	ReasonPolled        = "Polled"
	ReasonPollFailed    = "PollFailed"
	ReasonPollDisabled  = "PollingDisabled"
	ReasonSynced        = "Synced"
	ReasonSyncing       = "Syncing"
	ReasonFetchFailed   = "FetchFailed"
	ReasonBuildFailed   = "BuildFailed"
	ReasonApplyFailed   = "ApplyFailed"
	ReasonInvalidSpec   = "InvalidSpec"
	ReasonBundlesReady  = "BundlesReady"
	ReasonNotReady      = "BundlesNotReady"
	ReasonWaitingBundle = "WaitingForBundles"
	// ReasonBundleFailed is used when a rejected Bundle's Stalled
	// condition has no reason of its own; otherwise its reason (the Bundle
	// controller's InvalidBundle) is shown.
	ReasonBundleFailed = "BundleFailed"
	// ReasonRestricted: the namespace's GitRepoRestrictions refuse the
	// GitRepo (Rancher Fleet's event reason), so nothing was fetched.
	ReasonRestricted = "FailedToApplyRestrictions"
)

// syncOutcome is what the last poll and sync did; the status functions
// turn it into conditions without any I/O.
type syncOutcome struct {
	// PollErr is the error of the ref lookup (nil when it worked or was
	// not due).
	PollErr error
	// SyncErr is the error of fetch/build/apply; Stalled says retrying the
	// same commit will not help (a broken commit, bad spec or credentials).
	SyncErr error
	Stalled bool
	// SyncReason is the condition reason for SyncErr.
	SyncReason string
	// PollingDisabled reflects spec.disablePolling.
	PollingDisabled bool
}

// bundleStatus summarises the GitRepo's Bundles and their deployments.
type bundleStatus struct {
	Summary              fleet.BundleSummary
	ReadyClusters        int
	DesiredReadyClusters int
	ResourceCounts       fleet.ResourceCounts
	PerCluster           map[string]*fleet.ResourceCounts
	// Waiting names Bundles whose status does not yet reflect their spec.
	Waiting []string
	// Failed are Bundles the Bundle controller rejected whole for their
	// current generation (Stalled=True): they will not be processed until
	// they change, so they are errors, not waiting.
	Failed []failedBundle
	Count  int
	// Warnings are the ready Bundles' warnings (summary.BundleWarnings),
	// e.g. stale downstreamResources copies an agent could not delete.
	Warnings string
}

// failedBundle is a Bundle's Stalled condition.
type failedBundle struct {
	Name, Reason, Message string
}

// summarizeBundles adds up the Bundles' summaries (computed by the targeting
// controller) and the BundleDeployments' resource counts. It only reads
// the deployments, which may be the cache's own objects.
func summarizeBundles(bundles []fleet.Bundle, bds []*fleet.BundleDeployment) bundleStatus {
	var out bundleStatus
	out.Count = len(bundles)
	sort.Slice(bundles, func(i, j int) bool { return bundles[i].Name < bundles[j].Name })
	first := true
	ptrs := make([]*fleet.Bundle, 0, len(bundles))
	for i := range bundles {
		b := &bundles[i]
		ptrs = append(ptrs, b)
		// A Bundle's non-ready entries name clusters; the GitRepo's name
		// the Bundle (Rancher's "[Bundle <name>: <message>]").
		bsum := b.Status.Summary
		bsum.NonReadyResources = summary.NonReadyByBundle(b.Name, bsum.NonReadyResources)
		summary.Add(&out.Summary, bsum)
		if f, ok := bundleFailure(b); ok {
			out.Failed = append(out.Failed, f)
		} else if b.Status.ObservedGeneration != b.Generation {
			out.Waiting = append(out.Waiting, b.Name)
		}
		// A Bundle that targets no cluster says nothing about how many
		// clusters are ready (Fleet counts only DesiredReady > 0).
		if b.Status.Summary.DesiredReady == 0 {
			continue
		}
		if first || b.Status.Summary.Ready < out.ReadyClusters {
			out.ReadyClusters = b.Status.Summary.Ready
		}
		if b.Status.Summary.DesiredReady > out.DesiredReadyClusters {
			out.DesiredReadyClusters = b.Status.Summary.DesiredReady
		}
		first = false
	}
	out.Warnings = summary.BundleWarnings(ptrs)
	if len(out.Summary.NonReadyResources) > summary.MaxNonReadyResources {
		out.Summary.NonReadyResources = out.Summary.NonReadyResources[:summary.MaxNonReadyResources]
	}
	for _, bd := range bds {
		out.ResourceCounts.Add(bd.Status.ResourceCounts)
		id := bd.Labels[fleet.ClusterNamespaceLabel] + "/" + bd.Labels[fleet.ClusterLabel]
		if out.PerCluster == nil {
			out.PerCluster = map[string]*fleet.ResourceCounts{}
		}
		if out.PerCluster[id] == nil {
			out.PerCluster[id] = &fleet.ResourceCounts{}
		}
		out.PerCluster[id].Add(bd.Status.ResourceCounts)
	}
	return out
}

// bundleFailure reports a Bundle the Bundle controller rejected whole
// (summary.Rejection).
func bundleFailure(b *fleet.Bundle) (failedBundle, bool) {
	c := summary.Rejection(b)
	if c == nil {
		return failedBundle{}, false
	}
	return failedBundle{Name: b.Name, Reason: c.Reason, Message: c.Message}, true
}

// maxFailedBundlesShown caps the rejected Bundles named in the Ready message.
const maxFailedBundlesShown = 5

// failedMessage names the rejected Bundles and their errors; the reason is
// the first one's (the Bundle controller's, e.g. InvalidBundle).
func failedMessage(failed []failedBundle) (reason, msg string) {
	parts := make([]string, 0, min(len(failed), maxFailedBundlesShown))
	for _, f := range failed[:min(len(failed), maxFailedBundlesShown)] {
		parts = append(parts, fmt.Sprintf("bundle %s: %s", f.Name, f.Message))
	}
	msg = strings.Join(parts, "; ")
	if len(failed) > maxFailedBundlesShown {
		msg += fmt.Sprintf(" (and %d more)", len(failed)-maxFailedBundlesShown)
	}
	reason = failed[0].Reason
	if reason == "" {
		reason = ReasonBundleFailed
	}
	return reason, msg
}

// setBundleStatus writes the bundle roll-up into the status.
func setBundleStatus(st *fleet.GitRepoStatus, bs bundleStatus) {
	st.Summary = bs.Summary
	st.ReadyClusters = bs.ReadyClusters
	st.DesiredReadyClusters = bs.DesiredReadyClusters
	st.ResourceCounts = bs.ResourceCounts
	st.PerClusterResourceCounts = bs.PerCluster
	st.Display.ReadyBundleDeployments = summary.ReadyCount(bs.Summary)
}

// setConditions computes every condition this controller owns from the
// outcome of the last poll/sync and the bundle roll-up. Ready is True only
// when the last sync worked AND every deployment is ready, so a failing
// sync is never hidden behind healthy old deployments (rancher/fleet#4865).
func setConditions(st *fleet.GitRepoStatus, generation int64, o syncOutcome, bs bundleStatus) {
	// Messages quote Bundles, which quote agents: each is cut so that
	// the API server never refuses the status write.
	set := func(t string, s metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: t, Status: s, Reason: reason, Message: summary.ConditionMessage(msg), ObservedGeneration: generation,
		})
	}
	failure := o.SyncErr
	reason := o.SyncReason
	if failure == nil && o.PollErr != nil {
		failure, reason = o.PollErr, ReasonPollFailed
	}
	refused := o.SyncErr != nil && o.SyncReason == ReasonRestricted
	if failure != nil && o.Stalled && (o.SyncReason == ReasonInvalidSpec || refused) {
		set(fleet.ConditionAccepted, metav1.ConditionFalse, o.SyncReason, failure.Error())
	} else {
		set(fleet.ConditionAccepted, metav1.ConditionTrue, ReasonAccepted, "")
	}

	// A failure comes before "polling is disabled": with disablePolling a
	// webhook still makes the controller look the ref up.
	switch {
	case refused:
		set(fleet.ConditionGitPolling, metav1.ConditionFalse, ReasonRestricted, "not polled: "+o.SyncErr.Error())
	case o.PollErr != nil:
		set(fleet.ConditionGitPolling, metav1.ConditionFalse, ReasonPollFailed, o.PollErr.Error())
	case o.PollingDisabled:
		set(fleet.ConditionGitPolling, metav1.ConditionFalse, ReasonPollDisabled, "polling is disabled; waiting for webhooks")
	default:
		set(fleet.ConditionGitPolling, metav1.ConditionTrue, ReasonPolled, "")
	}

	switch {
	case failure != nil && o.Stalled:
		set(fleet.ConditionStalled, metav1.ConditionTrue, reason, failure.Error())
		set(fleet.ConditionReconciling, metav1.ConditionFalse, reason, "")
	case failure != nil:
		set(fleet.ConditionStalled, metav1.ConditionFalse, reason, "")
		set(fleet.ConditionReconciling, metav1.ConditionTrue, reason, "retrying: "+failure.Error())
	case len(bs.Failed) > 0:
		r, msg := failedMessage(bs.Failed)
		set(fleet.ConditionStalled, metav1.ConditionTrue, r, msg)
		set(fleet.ConditionReconciling, metav1.ConditionFalse, r, "")
	case len(bs.Waiting) > 0:
		set(fleet.ConditionStalled, metav1.ConditionFalse, ReasonSynced, "")
		set(fleet.ConditionReconciling, metav1.ConditionTrue, ReasonWaitingBundle, fmt.Sprintf("waiting for %d bundle(s) to be processed", len(bs.Waiting)))
	default:
		set(fleet.ConditionStalled, metav1.ConditionFalse, ReasonSynced, "")
		set(fleet.ConditionReconciling, metav1.ConditionFalse, ReasonSynced, "")
	}

	readyMsg := summary.ReadyMessage(bs.Summary, "Bundle")
	switch {
	case failure != nil:
		set(fleet.ConditionReady, metav1.ConditionFalse, reason, failure.Error())
		st.Display.State, st.Display.Message, st.Display.Error = "GitError", failure.Error(), true
	case len(bs.Failed) > 0:
		r, msg := failedMessage(bs.Failed)
		msg = summary.ConditionMessage(msg)
		set(fleet.ConditionReady, metav1.ConditionFalse, r, msg)
		st.Display.State, st.Display.Message, st.Display.Error = "Error", msg, true
	case !summary.IsReady(bs.Summary) || len(bs.Waiting) > 0:
		if readyMsg == "" {
			readyMsg = fmt.Sprintf("waiting for %d bundle(s) to be processed", len(bs.Waiting))
		}
		readyMsg = summary.ConditionMessage(summary.JoinMessages(readyMsg, bs.Warnings))
		set(fleet.ConditionReady, metav1.ConditionFalse, ReasonNotReady, readyMsg)
		st.Display.State, st.Display.Message, st.Display.Error = string(summary.WorstState(bs.Summary)), readyMsg, false
	default:
		// Warnings of ready Bundles leave the GitRepo Ready.
		warnings := summary.ConditionMessage(bs.Warnings)
		set(fleet.ConditionReady, metav1.ConditionTrue, ReasonBundlesReady, warnings)
		st.Display.State, st.Display.Message, st.Display.Error = string(fleet.Ready), warnings, false
	}
}
