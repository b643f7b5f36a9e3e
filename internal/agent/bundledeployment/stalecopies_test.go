package bundledeployment

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

func TestMayHaveStaleCopies(t *testing.T) {
	listed := fleet.BundleDeploymentOptions{DownstreamResources: []fleet.DownstreamResource{{Kind: "Secret", Name: "s"}}}
	none := fleet.BundleDeploymentOptions{}
	fresh := &fleet.BundleDeployment{}
	applied := &fleet.BundleDeployment{Status: fleet.BundleDeploymentStatus{AppliedDeploymentID: "d1"}}
	failed := &fleet.BundleDeployment{Status: fleet.BundleDeploymentStatus{Conditions: []metav1.Condition{
		{Type: fleet.ConditionDeployed, Status: metav1.ConditionFalse, Reason: ReasonDeployError},
	}}}
	for _, tc := range []struct {
		name string
		st   *appliedState
		bd   *fleet.BundleDeployment
		opts fleet.BundleDeploymentOptions
		want bool
	}{
		{name: "entries listed now", st: &appliedState{options: none}, bd: applied, opts: listed, want: true},
		{name: "none before, none now", st: &appliedState{options: none}, bd: applied, opts: none, want: false},
		{name: "entries before, none now", st: &appliedState{options: listed}, bd: applied, opts: none, want: true},
		{name: "unknown, deployed before (restart)", bd: applied, opts: none, want: true},
		{name: "unknown, an attempt failed", bd: failed, opts: none, want: true},
		{name: "unknown, never attempted", bd: fresh, opts: none, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := mayHaveStaleCopies(tc.st, tc.bd, tc.opts); got != tc.want {
				t.Fatalf("mayHaveStaleCopies = %v, want %v", got, tc.want)
			}
		})
	}
}
