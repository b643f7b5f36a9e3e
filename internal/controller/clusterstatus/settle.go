package clusterstatus

import (
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// HeartbeatOnly reports whether a Cluster update changed nothing but what
// the agent's heartbeat writes (status.agent, the node display) while the
// cluster's liveness stays the same: such an update changes nothing this
// package owns, so it needs no reconcile. The first check-in and a check-in
// after the cluster went offline do change liveness; a check-in with another
// interval (status.agent.checkinInterval) changes when the cluster goes
// offline, which the reconcile schedules. Pure.
func HeartbeatOnly(o, n *fleet.Cluster, now time.Time, threshold time.Duration) bool {
	if o.Generation != n.Generation || !equality.Semantic.DeepEqual(o.ObjectMeta.Labels, n.ObjectMeta.Labels) ||
		!equality.Semantic.DeepEqual(o.ObjectMeta.Annotations, n.ObjectMeta.Annotations) ||
		!o.DeletionTimestamp.Equal(n.DeletionTimestamp) || !equality.Semantic.DeepEqual(o.Spec, n.Spec) {
		return false
	}
	if !equality.Semantic.DeepEqual(o.Status.Agent.CheckinInterval, n.Status.Agent.CheckinInterval) {
		return false
	}
	os, ns := o.Status, n.Status
	os.Agent, ns.Agent = fleet.AgentStatus{}, fleet.AgentStatus{}
	os.Display.ReadyNodes, ns.Display.ReadyNodes = "", ""
	os.Display.SampleNode, ns.Display.SampleNode = "", ""
	if !equality.Semantic.DeepEqual(os, ns) {
		return false
	}
	return LivenessOf(o, now, threshold).Offline == LivenessOf(n, now, threshold).Offline
}

// WaitsForAgent reports whether the computed status shows BundleDeployments
// that the cluster's online agent has not applied yet: the first half of
// every rollout, which lasts about one round trip to the agent. Pure.
func WaitsForAgent(owned OwnedStatus, live Liveness) bool {
	return !live.Offline && owned.Summary.WaitApplied > 0
}

// HoldUntil returns until when a changed status of c is held back because
// it is a passing state (see Options.Settle), or the zero time to write it
// now. The passing states are: a cluster created less than settle ago
// whose agent has not checked in yet (in a burst of registrations the first
// check-in comes late; until then every view shows WaitCheckIn anyway), and
// BundleDeployments the online agent has not applied yet, for settle after
// waitingSince (when that started, see WaitsForAgent). A liveness change of
// a cluster that has been seen before is never held back. Pure.
func HoldUntil(c *fleet.Cluster, owned OwnedStatus, live Liveness, waitingSince time.Time, settle time.Duration) time.Time {
	switch {
	case live.NeverSeen:
		return c.CreationTimestamp.Add(settle)
	case WaitsForAgent(owned, live) && !waitingSince.IsZero():
		// Coming back online is news; waiting for the agent is not.
		if meta.IsStatusConditionTrue(c.Status.Conditions, fleet.ConditionOffline) {
			return time.Time{}
		}
		return waitingSince.Add(settle)
	}
	return time.Time{}
}

// CountsOnly reports whether writing owned would change only the counts
// of c's roll-up (summaries, ready bundles, resource counts, messages):
// its Ready and Offline conditions keep their status and reason and its
// state stays. Such a change can wait (Options.RollupInterval); any other
// is news. Pure.
func CountsOnly(c *fleet.Cluster, owned OwnedStatus) bool {
	same := func(want metav1.Condition) bool {
		have := meta.FindStatusCondition(c.Status.Conditions, want.Type)
		return have != nil && have.Status == want.Status && have.Reason == want.Reason
	}
	return same(owned.Ready) && same(owned.Offline) && c.Status.Display.State == owned.State
}
