package controller

import (
	"testing"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// TestKeepDeployed: a GitRepo with keepResources deletes its Bundles only
// once deleting each BundleDeployment leaves the objects: keepResources in
// the options the agent has deployed, or nothing deployed at all.
func TestKeepDeployed(t *testing.T) {
	bd := func(keep bool, id, applied, release string) *fleet.BundleDeployment {
		return &fleet.BundleDeployment{
			Spec:   fleet.BundleDeploymentSpec{DeploymentID: id, Options: fleet.BundleDeploymentOptions{KeepResources: keep}},
			Status: fleet.BundleDeploymentStatus{AppliedDeploymentID: applied, Release: release},
		}
	}
	for _, tc := range []struct {
		name string
		bd   *fleet.BundleDeployment
		want bool
	}{
		{name: "keep deployed", bd: bd(true, "c:2", "c:2", "ns/app:2"), want: true},
		{name: "keep not yet deployed: the release still says uninstall", bd: bd(true, "c:2", "c:1", "ns/app:1"), want: false},
		{name: "options without keep", bd: bd(false, "c:1", "c:1", "ns/app:1"), want: false},
		{name: "nothing ever deployed", bd: bd(true, "c:2", "", ""), want: true},
		{name: "nothing deployed, options without keep", bd: bd(false, "c:1", "", ""), want: false},
	} {
		if got := keepDeployed(tc.bd); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
