package bundledeployment

import (
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/deployer"
	"github.com/fleetgo/fleet/internal/agent/drift"
)

func TestStateAndStatusSetters(t *testing.T) {
	newBD := func() *fleet.BundleDeployment {
		bd := &fleet.BundleDeployment{}
		bd.Spec.DeploymentID = "s-1:a"
		bd.Spec.StagedDeploymentID = "s-1:a"
		return bd
	}
	tests := []struct {
		name   string
		mutate func(bd *fleet.BundleDeployment)
		want   fleet.BundleState
		ready  bool
	}{
		{name: "nothing applied yet", mutate: func(*fleet.BundleDeployment) {}, want: fleet.WaitApplied},
		{name: "deploy error", mutate: func(bd *fleet.BundleDeployment) { setDeployError(bd, errors.New("boom")) }, want: fleet.ErrApplied},
		{name: "ready", mutate: func(bd *fleet.BundleDeployment) {
			setDeployed(bd, "ns/r:1")
			setMonitored(bd, drift.Result{Ready: true, NonModified: true})
		}, want: fleet.Ready, ready: true},
		{name: "not ready", mutate: func(bd *fleet.BundleDeployment) {
			setDeployed(bd, "ns/r:1")
			setMonitored(bd, drift.Result{Ready: false, NonModified: true, NonReady: []fleet.NonReadyStatus{{Kind: "Deployment", Name: "d"}}})
		}, want: fleet.NotReady},
		{name: "modified", mutate: func(bd *fleet.BundleDeployment) {
			setDeployed(bd, "ns/r:1")
			setMonitored(bd, drift.Result{Ready: true, NonModified: false, Modified: []fleet.ModifiedStatus{{Kind: "ConfigMap", Name: "c", Create: true}}})
		}, want: fleet.Modified},
		{name: "failed redeploy of the applied deploymentID", mutate: func(bd *fleet.BundleDeployment) {
			setDeployed(bd, "ns/r:1")
			setMonitored(bd, drift.Result{Ready: true, NonModified: true})
			setDeployError(bd, errors.New("downstreamResources: secret s: not found"))
			if bd.Status.Ready || bd.Status.Display.State != string(fleet.ErrApplied) {
				t.Errorf("status.ready %v, display %+v", bd.Status.Ready, bd.Status.Display)
			}
		}, want: fleet.ErrApplied},
		{name: "new deploymentID waits", mutate: func(bd *fleet.BundleDeployment) {
			setDeployed(bd, "ns/r:1")
			setMonitored(bd, drift.Result{Ready: true, NonModified: true})
			bd.Spec.DeploymentID = "s-2:a"
		}, want: fleet.WaitApplied, ready: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bd := newBD()
			tt.mutate(bd)
			if got := State(bd); got != tt.want {
				t.Fatalf("state %s, want %s", got, tt.want)
			}
			if got := meta.IsStatusConditionTrue(bd.Status.Conditions, fleet.ConditionReady); got != tt.ready {
				t.Fatalf("ready condition %v, want %v: %+v", got, tt.ready, bd.Status.Conditions)
			}
		})
	}
}

func TestStatusChangedIgnoresNoop(t *testing.T) {
	bd := &fleet.BundleDeployment{}
	bd.Spec.DeploymentID = "s-1:a"
	setDeployed(bd, "ns/r:1")
	setMonitored(bd, drift.Result{Ready: true, NonModified: true})
	old := bd.Status.DeepCopy()
	setDeployed(bd, "ns/r:1")
	setMonitored(bd, drift.Result{Ready: true, NonModified: true})
	if statusChanged(old, &bd.Status) {
		t.Fatal("recomputing the same status must not cause a write")
	}
}

type typesKey = types.NamespacedName

func TestBackoffGrowsAndIsPerDeploymentID(t *testing.T) {
	r := &Reconciler{failures: map[typesKey]*failure{}}
	k := typesKey{Namespace: "n", Name: "b"}
	d1 := r.recordFailure(k, "id1")
	d2 := r.recordFailure(k, "id1")
	d3 := r.recordFailure(k, "id1")
	if !(d1 < d2 && d2 < d3) || d1 < 4*1e9 {
		t.Fatalf("backoff not growing: %v %v %v", d1, d2, d3)
	}
	if r.backoffRemaining(k, "id2") != 0 {
		t.Fatal("a new deploymentID must not wait for the old one's backoff")
	}
	if r.backoffRemaining(k, "id1") <= 0 {
		t.Fatal("same deploymentID must wait")
	}
}

// TestReleaseApplied: after a restart the agent adopts the stored release
// only when it is the one applied for the BundleDeployment's deploymentID.
func TestReleaseApplied(t *testing.T) {
	bd := &fleet.BundleDeployment{
		Spec:   fleet.BundleDeploymentSpec{DeploymentID: "d1"},
		Status: fleet.BundleDeploymentStatus{AppliedDeploymentID: "d1", Release: "ns/app:2"},
	}
	tests := []struct {
		name string
		rel  deployer.Release
		want bool
	}{
		{"recorded, same deploymentID", deployer.Release{Namespace: "ns", Name: "app", Version: 4, DeploymentID: "d1"}, true},
		// d2 was deployed, its status write lost, and the spec came back
		// to d1: storage holds d2's objects.
		{"recorded, later deployment", deployer.Release{Namespace: "ns", Name: "app", Version: 3, DeploymentID: "d2"}, false},
		{"unrecorded, the revision the status names", deployer.Release{Namespace: "ns", Name: "app", Version: 2}, true},
		{"unrecorded, another revision", deployer.Release{Namespace: "ns", Name: "app", Version: 3}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := releaseApplied(bd, &tt.rel); got != tt.want {
				t.Errorf("releaseApplied = %v, want %v", got, tt.want)
			}
		})
	}
}
