// Package summary turns BundleDeployment states into the summaries, counts
// and Ready messages shown on Bundles, Clusters, ClusterGroups and GitRepos.
// Every function is pure so that each status can be table-tested and
// compared before it is written.
package summary

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// MaxNonReadyResources caps nonReadyResources so that a status never grows
// with the number of clusters.
const MaxNonReadyResources = 10

// maxDetails is how many modified and non-ready objects are named per entry.
const maxDetails = 4

// States in the order messages list them (worst first).
var States = []fleet.BundleState{fleet.ErrApplied, fleet.WaitApplied, fleet.Modified, fleet.OutOfSync, fleet.Pending, fleet.Offline, fleet.NotReady}

// DeploymentState derives a BundleDeployment's state as Fleet does, with
// Offline (set by the manager when the cluster's agent stopped checking in)
// taking precedence: nothing else about an unreachable cluster is current.
func DeploymentState(bd *fleet.BundleDeployment) fleet.BundleState {
	if meta.IsStatusConditionTrue(bd.Status.Conditions, fleet.ConditionOffline) {
		return fleet.Offline
	}
	return ReportedState(bd)
}

// ReportedState is a deployment's state from what its agent reported,
// without the Offline mark the manager puts on it while the cluster's agent
// is away. Callers that know the cluster's liveness use it: once the agent
// is back the mark is stale (the manager removes it shortly after), and
// counting it would show a cluster that just checked in as Offline.
func ReportedState(bd *fleet.BundleDeployment) fleet.BundleState {
	// A failed deploy is ErrApplied whether it was the first of this
	// deploymentID or a redeploy of the applied one (the agent's own
	// display says the same).
	if meta.IsStatusConditionFalse(bd.Status.Conditions, fleet.ConditionDeployed) {
		return fleet.ErrApplied
	}
	if bd.Status.AppliedDeploymentID != bd.Spec.DeploymentID {
		return fleet.WaitApplied
	}
	if !bd.Status.Ready {
		return fleet.NotReady
	}
	if bd.Spec.DeploymentID != bd.Spec.StagedDeploymentID {
		return fleet.OutOfSync
	}
	if !bd.Status.NonModified {
		return fleet.Modified
	}
	return fleet.Ready
}

// DeploymentMessage is the most useful human message of a deployment: the
// Deployed error, else the Offline mark's message, else the Ready message
// when not ready, cut to MaxAgentMessage.
func DeploymentMessage(bd *fleet.BundleDeployment) string {
	if m := deployedError(bd); m != "" {
		return m
	}
	if c := meta.FindStatusCondition(bd.Status.Conditions, fleet.ConditionOffline); c != nil && c.Status == "True" {
		return AgentMessage(c.Message)
	}
	return notReadyMessage(bd)
}

// ReportedMessage is DeploymentMessage without the Offline mark (see
// ReportedState).
func ReportedMessage(bd *fleet.BundleDeployment) string {
	if m := deployedError(bd); m != "" {
		return m
	}
	return notReadyMessage(bd)
}

func deployedError(bd *fleet.BundleDeployment) string {
	if c := meta.FindStatusCondition(bd.Status.Conditions, fleet.ConditionDeployed); c != nil && c.Status == "False" {
		return AgentMessage(c.Message)
	}
	return ""
}

func notReadyMessage(bd *fleet.BundleDeployment) string {
	if c := meta.FindStatusCondition(bd.Status.Conditions, fleet.ConditionReady); c != nil && c.Status == "False" {
		return AgentMessage(c.Message)
	}
	return ""
}

// Increment counts one deployment (nil = not created yet, Pending) under
// name in s. Non-ready entries beyond MaxNonReadyResources are counted but
// not listed.
func Increment(s *fleet.BundleSummary, name string, state fleet.BundleState, bd *fleet.BundleDeployment) {
	s.DesiredReady++
	switch state {
	case fleet.Ready:
		s.Ready++
		return
	case fleet.NotReady:
		s.NotReady++
	case fleet.WaitApplied:
		s.WaitApplied++
	case fleet.ErrApplied:
		s.ErrApplied++
	case fleet.OutOfSync:
		s.OutOfSync++
	case fleet.Modified:
		s.Modified++
	case fleet.Pending:
		s.Pending++
	case fleet.Offline:
		s.Offline++
	}
	if len(s.NonReadyResources) >= MaxNonReadyResources {
		return
	}
	r := fleet.NonReadyResource{Name: name, State: state}
	if bd != nil {
		// An Offline mark speaks only for a deployment counted Offline.
		if state == fleet.Offline {
			r.Message = DeploymentMessage(bd)
		} else {
			r.Message = ReportedMessage(bd)
		}
		r.ModifiedStatus = capped(bd.Status.ModifiedStatus)
		r.NonReadyStatus = capped(bd.Status.NonReadyStatus)
		// bd may be an informer cache's own object: the summary must not
		// share memory with it, or decoding an API response into the
		// summary's owner would write into the cache. The agent wrote
		// these details too: each is cut like its messages.
		for i := range r.NonReadyStatus {
			msgs := slices.Clone(r.NonReadyStatus[i].Summary.Message)
			for j := range msgs {
				msgs[j] = AgentMessage(msgs[j])
			}
			r.NonReadyStatus[i].Summary.Message = msgs
		}
		for i := range r.ModifiedStatus {
			r.ModifiedStatus[i].Patch = AgentMessage(r.ModifiedStatus[i].Patch)
		}
	}
	s.NonReadyResources = append(s.NonReadyResources, r)
}

func capped[T any](in []T) []T {
	if len(in) > maxDetails {
		in = in[:maxDetails]
	}
	return append([]T(nil), in...)
}

// Add adds b's counts to a and fills a's non-ready list from b's up to the
// cap.
func Add(a *fleet.BundleSummary, b fleet.BundleSummary) {
	a.NotReady += b.NotReady
	a.WaitApplied += b.WaitApplied
	a.ErrApplied += b.ErrApplied
	a.OutOfSync += b.OutOfSync
	a.Modified += b.Modified
	a.Ready += b.Ready
	a.Pending += b.Pending
	a.Offline += b.Offline
	a.DesiredReady += b.DesiredReady
	for _, r := range b.NonReadyResources {
		if len(a.NonReadyResources) >= MaxNonReadyResources {
			break
		}
		a.NonReadyResources = append(a.NonReadyResources, r)
	}
}

// Count returns the number of deployments in state.
func Count(s fleet.BundleSummary, state fleet.BundleState) int {
	switch state {
	case fleet.Ready:
		return s.Ready
	case fleet.NotReady:
		return s.NotReady
	case fleet.WaitApplied:
		return s.WaitApplied
	case fleet.ErrApplied:
		return s.ErrApplied
	case fleet.OutOfSync:
		return s.OutOfSync
	case fleet.Modified:
		return s.Modified
	case fleet.Pending:
		return s.Pending
	case fleet.Offline:
		return s.Offline
	}
	return 0
}

// IsReady reports whether every desired deployment is Ready.
func IsReady(s fleet.BundleSummary) bool { return s.Ready == s.DesiredReady }

// WorstState is the highest-ranked state with a non-zero count, Ready when
// all are ready (or there are none).
func WorstState(s fleet.BundleSummary) fleet.BundleState {
	worst := fleet.Ready
	for _, st := range States {
		if Count(s, st) > 0 && fleet.StateRank[st] > fleet.StateRank[worst] {
			worst = st
		}
	}
	return worst
}

// ReadyMessage is the human Ready message for a summary, one part per
// non-ready state: "<State>(<count>) [<Kind> <name>: <message>; ...]",
// parts sorted and joined with "; ". Empty when everything is ready.
func ReadyMessage(s fleet.BundleSummary, kind string) string {
	var parts []string
	for _, st := range States {
		n := Count(s, st)
		if n == 0 {
			continue
		}
		var entries []string
		for _, r := range s.NonReadyResources {
			if r.State == st {
				entries = append(entries, entryMessage(kind, r))
			}
		}
		part := fmt.Sprintf("%s(%d)", st, n)
		if len(entries) > 0 {
			part += " [" + strings.Join(entries, "; ") + "]"
		}
		parts = append(parts, part)
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}

func entryMessage(kind string, r fleet.NonReadyResource) string {
	msg := kind + " " + r.Name
	if r.Message != "" {
		msg += ": " + r.Message
	}
	var details []string
	for i, m := range r.ModifiedStatus {
		if i == maxDetails {
			break
		}
		obj := objectName(m.Kind, m.Namespace, m.Name)
		switch {
		case m.Create:
			details = append(details, obj+" missing")
		case m.Delete:
			details = append(details, obj+" extra")
		default:
			details = append(details, obj+" modified "+m.Patch)
		}
	}
	for i, n := range r.NonReadyStatus {
		if i == maxDetails {
			break
		}
		d := objectName(n.Kind, n.Namespace, n.Name) + " " + n.Summary.State
		if len(n.Summary.Message) > 0 {
			d += ": " + strings.Join(n.Summary.Message, ", ")
		}
		details = append(details, d)
	}
	if len(details) > 0 {
		msg += "; " + strings.Join(details, "; ")
	}
	return msg
}

func objectName(kind, ns, name string) string {
	kind = strings.ToLower(kind)
	if ns == "" {
		return kind + " " + name
	}
	return kind + " " + ns + "/" + name
}

// ReadyCount formats "ready/desired" for display columns.
func ReadyCount(s fleet.BundleSummary) string {
	return fmt.Sprintf("%d/%d", s.Ready, s.DesiredReady)
}

// Rejection is a copy of b's Stalled condition when the Bundle controller
// rejected b's current generation whole (bad input such as a repo URL no
// GitRepoRestriction allows, or an invalid clusterSelector), else nil. The
// Bundle's observedGeneration is not bumped then, yet it is not waiting to
// be processed: it stays so until it changes. A Stalled condition of an
// older generation is the Bundle waiting to be processed again.
func Rejection(b *fleet.Bundle) *metav1.Condition {
	if b == nil {
		return nil
	}
	c := meta.FindStatusCondition(b.Status.Conditions, fleet.ConditionStalled)
	if c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration < b.Generation {
		return nil
	}
	out := *c
	return &out
}

// NonReadyByBundle turns a Bundle's per-cluster non-ready entries into the
// entries of its owner's (GitRepo, HelmOp) summary, named after the Bundle,
// so the owner's Ready message lists Bundles, as Rancher Fleet's does
// ("[Bundle <name>: <message>]"), not clusters: one per state and message
// (the first cluster's details), so that clusters failing for different
// reasons each show theirs and a thousand failing alike show one. The
// owner's counts still count deployments. Entries are deep copies: the
// Bundle may be an informer cache's object.
func NonReadyByBundle(bundle string, in []fleet.NonReadyResource) []fleet.NonReadyResource {
	type key struct {
		state fleet.BundleState
		msg   string
	}
	var out []fleet.NonReadyResource
	seen := map[key]bool{}
	for i := range in {
		k := key{in[i].State, in[i].Message}
		if seen[k] {
			continue
		}
		seen[k] = true
		r := *in[i].DeepCopy()
		r.Name = bundle
		out = append(out, r)
	}
	return out
}
