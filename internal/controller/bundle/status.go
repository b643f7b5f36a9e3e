package bundle

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/summary"
	"github.com/fleetgo/fleet/internal/target"
)

// Condition reasons on Bundles.
const (
	ReasonReady        = "Ready"
	ReasonNotReady     = "NotReady"
	ReasonInvalid      = "InvalidBundle"
	ReasonTargetErrors = "TargetErrors"
	// ReasonDownstreamSource: a downstreamResources Secret/ConfigMap is
	// missing from the Bundle's namespace.
	ReasonDownstreamSource = "DownstreamResourceMissing"
	// ReasonWriteFailed: the manager could not write some of the bundle's
	// BundleDeployments (or their Secrets); it retries with backoff.
	ReasonWriteFailed = "WriteFailed"
	// ReasonInvalidName: the Bundle's name is longer than a label value
	// may be, so none of its BundleDeployments (labelled with it) can be
	// written; it is refused whole until it is re-created under a shorter
	// name.
	ReasonInvalidName = "InvalidName"
)

// maxErrorsShown caps the per-cluster errors listed in the Ready message.
const maxErrorsShown = 5

// statusInput is what one reconcile learnt.
type statusInput struct {
	Plans   []*target.Plan
	Failed  []*target.Target
	Rollout *target.Result
	SHA256  string
}

// PlanState is the state shown for one target: Pending before its
// deployment exists, Offline while its cluster is offline. The cluster
// decides: a deployment's own Offline mark is stale once the cluster is
// back online, until the manager removes it.
func PlanState(p *target.Plan) fleet.BundleState {
	switch {
	case p.Deployment == nil:
		return fleet.Pending
	case p.Target.Offline:
		return fleet.Offline
	}
	return summary.ReportedState(p.Deployment)
}

func incrementPlan(s *fleet.BundleSummary, p *target.Plan) {
	state := PlanState(p)
	bd := p.Deployment
	if bd != nil && bd.CreationTimestamp.IsZero() {
		bd = nil // just created: no agent status yet
	}
	summary.Increment(s, p.Target.Key(), state, bd)
}

// planWarnings are the warnings of the deployments (summary.Warning),
// such as stale downstreamResources copies an agent could not delete.
// An offline cluster's are left out: nothing its agent last reported is
// current.
func planWarnings(plans []*target.Plan) []summary.Warning {
	var out []summary.Warning
	for _, p := range plans {
		if p.Deployment == nil || p.Target.Offline {
			continue
		}
		if reason, msg, ok := summary.DeploymentWarning(p.Deployment); ok {
			out = append(out, summary.Warning{Name: p.Target.Key(), Reason: reason, Message: msg})
		}
	}
	return out
}

// setStatus computes the Bundle status from the reconcile's outcome. It is
// pure, so the caller can compare it with the stored one.
func setStatus(b *fleet.Bundle, in statusInput) {
	st := &b.Status
	var s fleet.BundleSummary
	for _, p := range in.Plans {
		incrementPlan(&s, p)
	}
	var errs []string
	for _, t := range in.Failed {
		n := len(s.NonReadyResources)
		summary.Increment(&s, t.Key(), fleet.ErrApplied, nil)
		if len(s.NonReadyResources) > n {
			s.NonReadyResources[n].Message = t.Err.Error()
		}
		if len(errs) < maxErrorsShown {
			errs = append(errs, fmt.Sprintf("cluster %s: %v", t.Key(), t.Err))
		}
	}
	st.Summary = s
	st.ResourcesSHA256Sum = in.SHA256
	st.MaxNew = in.Rollout.MaxNew
	st.NewlyCreated = in.Rollout.NewlyCreated
	st.MaxUnavailable = in.Rollout.MaxUnavailable
	st.MaxUnavailablePartitions = in.Rollout.MaxUnavailablePartitions
	st.Unavailable = in.Rollout.Unavailable
	st.UnavailablePartitions = in.Rollout.UnavailablePartitions
	st.PartitionStatus = nil
	for _, part := range in.Rollout.Partitions {
		ps := fleet.PartitionStatus{Name: part.Name, Count: len(part.Plans), MaxUnavailable: part.MaxUnavailable, Unavailable: part.Unavailable}
		for _, p := range part.Plans {
			incrementPlan(&ps.Summary, p)
		}
		st.PartitionStatus = append(st.PartitionStatus, ps)
	}
	st.Display.ReadyClusters = summary.ReadyCount(s)
	st.Display.State = string(summary.WorstState(s))
	cond := metav1.Condition{Type: fleet.ConditionReady, Status: metav1.ConditionTrue, Reason: ReasonReady, ObservedGeneration: b.Generation}
	// Warnings follow whatever keeps the Bundle from Ready; alone, they
	// are the message of a Ready=True condition.
	msg := summary.JoinMessages(summary.ReadyMessage(s, "Cluster"), summary.WarningMessage("Cluster", planWarnings(in.Plans)))
	cond.Message = msg
	if len(errs) > 0 {
		cond.Status, cond.Reason = metav1.ConditionFalse, ReasonTargetErrors
		more := ""
		if len(in.Failed) > len(errs) {
			more = fmt.Sprintf(" (and %d more)", len(in.Failed)-len(errs))
		}
		cond.Message = strings.Join(errs, "; ") + more
		if msg != "" {
			cond.Message += "; " + msg
		}
	} else if !summary.IsReady(s) {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, ReasonNotReady, msg
	}
	// It quotes agents: cut, or a status write the API server refuses
	// would freeze the Bundle's status for all its clusters.
	cond.Message = summary.ConditionMessage(cond.Message)
	meta.SetStatusCondition(&st.Conditions, cond)
	meta.RemoveStatusCondition(&st.Conditions, fleet.ConditionStalled)
	st.ObservedGeneration = b.Generation
}

// progressOnly reports whether a status change only moves the counts and
// messages of a rollout under way: same generation, same display state,
// and the same type, status and reason for every condition. Such a change
// may wait for the next status write (Options.StatusInterval); any other
// is written at once.
func progressOnly(old, cur *fleet.BundleStatus) bool {
	if old.ObservedGeneration != cur.ObservedGeneration || old.Display.State != cur.Display.State ||
		len(old.Conditions) != len(cur.Conditions) {
		return false
	}
	for _, c := range cur.Conditions {
		o := meta.FindStatusCondition(old.Conditions, c.Type)
		if o == nil || o.Status != c.Status || o.Reason != c.Reason {
			return false
		}
	}
	return true
}

// setError records bad input that stops the whole bundle.
func setError(b *fleet.Bundle, err error) {
	setRejected(b, ReasonInvalid, err)
}

// setRejected records why the whole bundle is refused: Ready=False and
// Stalled with reason, until the Bundle changes.
func setRejected(b *fleet.Bundle, reason string, err error) {
	meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{
		Type: fleet.ConditionReady, Status: metav1.ConditionFalse, Reason: reason, Message: err.Error(), ObservedGeneration: b.Generation,
	})
	meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{
		Type: fleet.ConditionStalled, Status: metav1.ConditionTrue, Reason: reason, Message: err.Error(), ObservedGeneration: b.Generation,
	})
	b.Status.Display.State = "Error"
}

// setSourceErrors reports missing downstreamResources sources (one entry per
// target) on the Ready condition; the rest of the status stays as computed.
func setSourceErrors(b *fleet.Bundle, errs []string) {
	setListedErrors(b, ReasonDownstreamSource, errs)
}

// setWriteErrors reports writes of this pass that failed (an admission
// webhook or quota refusing a BundleDeployment, a conflict, the API server
// away) on the Ready condition, and keeps the previous observedGeneration:
// this generation is not fully written yet, so what waits on it (the
// GitRepo roll-up, kubectl wait) must not see it as done.
func setWriteErrors(b *fleet.Bundle, errs []error, prevObservedGeneration int64) {
	msgs := make([]string, 0, len(errs))
	for _, err := range errs {
		msgs = append(msgs, err.Error())
	}
	setListedErrors(b, ReasonWriteFailed, msgs)
	b.Status.ObservedGeneration = prevObservedGeneration
}

// setListedErrors sets Ready=False with reason and the first errors
// (sorted, so that a retry failing the same way writes the same message),
// followed by the Ready message computed before.
func setListedErrors(b *fleet.Bundle, reason string, errs []string) {
	if len(errs) == 0 {
		return
	}
	slices.Sort(errs)
	more := ""
	if len(errs) > maxErrorsShown {
		more = fmt.Sprintf(" (and %d more)", len(errs)-maxErrorsShown)
		errs = errs[:maxErrorsShown]
	}
	msg := strings.Join(errs, "; ") + more
	if c := meta.FindStatusCondition(b.Status.Conditions, fleet.ConditionReady); c != nil && c.Message != "" {
		msg += "; " + c.Message
	}
	meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{
		Type: fleet.ConditionReady, Status: metav1.ConditionFalse, Reason: reason, Message: msg, ObservedGeneration: b.Generation,
	})
}
