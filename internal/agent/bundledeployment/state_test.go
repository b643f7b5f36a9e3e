package bundledeployment

import (
	"errors"
	"testing"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/drift"
)

// The agent's state (and display.state) of a BundleDeployment is the one
// the manager gives it: a deploymentID the manager holds back
// (stagedDeploymentID ahead of deploymentID) is OutOfSync, not Ready, so a
// bundle depending on it (default acceptedStates [Ready]) waits. The
// states are spelled out, not read from the manager's code, which State
// calls.
func TestStateAgreesWithManager(t *testing.T) {
	deployed := func(staged string, r drift.Result) func(bd *fleet.BundleDeployment) {
		return func(bd *fleet.BundleDeployment) {
			bd.Spec.StagedDeploymentID = staged
			setDeployed(bd, "ns/r:1")
			setMonitored(bd, r)
		}
	}
	ready := drift.Result{Ready: true, NonModified: true}
	tests := []struct {
		name   string
		mutate func(bd *fleet.BundleDeployment)
		want   fleet.BundleState
	}{
		{name: "staged equals deployed", mutate: deployed("s-1:a", ready), want: fleet.Ready},
		{name: "newer staged deploymentID held back", mutate: deployed("s-2:b", ready), want: fleet.OutOfSync},
		{name: "held back and modified", mutate: deployed("s-2:b", drift.Result{Ready: true}), want: fleet.OutOfSync},
		{name: "held back but not ready", mutate: deployed("s-2:b", drift.Result{NonModified: true}), want: fleet.NotReady},
		{name: "modified", mutate: deployed("s-1:a", drift.Result{Ready: true}), want: fleet.Modified},
		{name: "not applied yet", mutate: func(bd *fleet.BundleDeployment) {
			bd.Spec.StagedDeploymentID = "s-2:b"
			setWaiting(bd, ReasonWaitingDependency, "waiting for dep")
		}, want: fleet.WaitApplied},
		{name: "deploy error while held back", mutate: func(bd *fleet.BundleDeployment) {
			bd.Spec.StagedDeploymentID = "s-2:b"
			setDeployError(bd, errors.New("boom"))
		}, want: fleet.ErrApplied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bd := &fleet.BundleDeployment{}
			bd.Spec.DeploymentID = "s-1:a"
			tt.mutate(bd)
			if got := State(bd); got != tt.want {
				t.Errorf("State %s, want %s", got, tt.want)
			}
			// Every row ends with a status setter the agent calls, which
			// writes display.state: an empty one is a failure too.
			if bd.Status.Display.State != string(tt.want) {
				t.Errorf("display.state %s, want %s", bd.Status.Display.State, tt.want)
			}
		})
	}
}
