package bundle

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/target"
)

// TestSetStatusWarnings: a deployment whose agent reports Deployed=True
// with a message (stale downstreamResources copies it could not delete)
// stays Ready and leaves the Bundle Ready; the Bundle's Ready message
// names the cluster and the reason, after whatever keeps the Bundle from
// Ready. An offline cluster's last report is not current and is left out.
func TestSetStatusWarnings(t *testing.T) {
	const stale = "deployed, but copies of downstreamResources no longer listed could not be deleted (retried): secret app/creds: forbidden"
	deployed := func(ready bool, reason, msg string) *fleet.BundleDeployment {
		return &fleet.BundleDeployment{Spec: fleet.BundleDeploymentSpec{DeploymentID: "new", StagedDeploymentID: "new"},
			Status: fleet.BundleDeploymentStatus{AppliedDeploymentID: "new", Ready: ready, NonModified: true, Conditions: []metav1.Condition{
				{Type: fleet.ConditionDeployed, Status: metav1.ConditionTrue, Reason: reason, Message: msg}}}}
	}
	warned := func() *fleet.BundleDeployment { return deployed(true, "StaleCopiesNotDeleted", stale) }
	fine := func() *fleet.BundleDeployment { return deployed(true, "Deployed", "") }
	for _, tc := range []struct {
		name            string
		plans           []*target.Plan
		status          metav1.ConditionStatus
		reason, message string
		state           fleet.BundleState
	}{
		{name: "all deployed cleanly", plans: []*target.Plan{plan("a", fine(), false)},
			status: metav1.ConditionTrue, reason: ReasonReady, message: "", state: fleet.Ready},
		{name: "stale copies on a ready cluster: Ready with a warning", plans: []*target.Plan{plan("a", warned(), false), plan("b", fine(), false)},
			status: metav1.ConditionTrue, reason: ReasonReady, message: "StaleCopiesNotDeleted(1) [Cluster ws/a: " + stale + "]", state: fleet.Ready},
		{name: "after the not-ready report", plans: []*target.Plan{plan("a", warned(), false), plan("b", deployed(false, "Deployed", ""), false)},
			status: metav1.ConditionFalse, reason: ReasonNotReady, message: "NotReady(1) [Cluster ws/b]; StaleCopiesNotDeleted(1) [Cluster ws/a: " + stale + "]", state: fleet.NotReady},
		{name: "offline cluster left out", plans: []*target.Plan{plan("a", warned(), true), plan("b", fine(), false)},
			status: metav1.ConditionFalse, reason: ReasonNotReady, message: "Offline(1) [Cluster ws/a]", state: fleet.Offline},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Generation: 1}}
			setStatus(b, statusInput{Plans: tc.plans, Rollout: &target.Result{}})
			c := meta.FindStatusCondition(b.Status.Conditions, fleet.ConditionReady)
			if c == nil || c.Status != tc.status || c.Reason != tc.reason || c.Message != tc.message {
				t.Fatalf("Ready = %+v\nwant %s %s %q", c, tc.status, tc.reason, tc.message)
			}
			if b.Status.Display.State != string(tc.state) {
				t.Errorf("display state %q, want %s", b.Status.Display.State, tc.state)
			}
		})
	}
}
