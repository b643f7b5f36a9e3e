package target

import (
	"reflect"
	"testing"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// TestMergeHelmTimeout: as in Rancher Fleet's options merge, a
// customization's positive helm.timeoutSeconds replaces the base's, 0 (not
// set) keeps it, and a negative one turns it off (0, so the agent does not
// wait) for the clusters the customization matches. maxHistory has no such
// "off": only a positive value replaces the base's.
func TestMergeHelmTimeout(t *testing.T) {
	helm := func(timeout, history int) *fleet.HelmOptions {
		return &fleet.HelmOptions{Chart: "c", TimeoutSeconds: timeout, MaxHistory: history}
	}
	for _, tc := range []struct {
		name         string
		base         *fleet.HelmOptions
		customs      []*fleet.HelmOptions // merged in order, as AllMatches does
		wantTimeout  int
		wantHistory  int
		wantHelmNil  bool
		wantChartSet bool
	}{
		{name: "no helm in the customization keeps the base", base: helm(300, 5), customs: []*fleet.HelmOptions{nil}, wantTimeout: 300, wantHistory: 5, wantChartSet: true},
		{name: "0 is not set and keeps the base", base: helm(300, 5), customs: []*fleet.HelmOptions{{}}, wantTimeout: 300, wantHistory: 5, wantChartSet: true},
		{name: "positive replaces", base: helm(300, 5), customs: []*fleet.HelmOptions{{TimeoutSeconds: 60, MaxHistory: 9}}, wantTimeout: 60, wantHistory: 9, wantChartSet: true},
		{name: "negative turns the base off", base: helm(300, 5), customs: []*fleet.HelmOptions{{TimeoutSeconds: -1}}, wantTimeout: 0, wantHistory: 5, wantChartSet: true},
		{name: "large negative turns it off too", base: helm(300, 5), customs: []*fleet.HelmOptions{{TimeoutSeconds: -3600}}, wantTimeout: 0, wantHistory: 5, wantChartSet: true},
		{name: "negative on a base without timeout", base: helm(0, 0), customs: []*fleet.HelmOptions{{TimeoutSeconds: -1}}, wantTimeout: 0, wantChartSet: true},
		{name: "negative on a base without helm", base: nil, customs: []*fleet.HelmOptions{{TimeoutSeconds: -1}}, wantTimeout: 0},
		{name: "negative maxHistory is not an off switch", base: helm(300, 5), customs: []*fleet.HelmOptions{{MaxHistory: -1}}, wantTimeout: 300, wantHistory: 5, wantChartSet: true},
		{name: "off, then a later customization that sets nothing", base: helm(300, 5), customs: []*fleet.HelmOptions{{TimeoutSeconds: -1}, {}}, wantTimeout: 0, wantHistory: 5, wantChartSet: true},
		{name: "off, then a later positive one wins", base: helm(300, 5), customs: []*fleet.HelmOptions{{TimeoutSeconds: -1}, {TimeoutSeconds: 90}}, wantTimeout: 90, wantHistory: 5, wantChartSet: true},
		{name: "positive, then off", base: helm(300, 5), customs: []*fleet.HelmOptions{{TimeoutSeconds: 90}, {TimeoutSeconds: -1}}, wantTimeout: 0, wantHistory: 5, wantChartSet: true},
		{name: "no helm anywhere", base: nil, customs: []*fleet.HelmOptions{nil}, wantHelmNil: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := fleet.BundleDeploymentOptions{DefaultNamespace: "base", Helm: tc.base.DeepCopy()}
			got := base
			for _, c := range tc.customs {
				got = Merge(got, fleet.BundleDeploymentOptions{Helm: c})
			}
			if tc.wantHelmNil {
				if got.Helm != nil {
					t.Fatalf("helm options %+v, want none", got.Helm)
				}
				return
			}
			if got.Helm == nil {
				t.Fatal("helm options lost")
			}
			if got.Helm.TimeoutSeconds != tc.wantTimeout || got.Helm.MaxHistory != tc.wantHistory {
				t.Errorf("timeoutSeconds %d, maxHistory %d; want %d, %d", got.Helm.TimeoutSeconds, got.Helm.MaxHistory, tc.wantTimeout, tc.wantHistory)
			}
			if tc.wantChartSet && got.Helm.Chart != "c" {
				t.Errorf("chart %q: the rest of the base's helm options were lost", got.Helm.Chart)
			}
			if tc.base != nil && !reflect.DeepEqual(base.Helm, tc.base) {
				t.Errorf("the base was modified: %+v", base.Helm)
			}
		})
	}
}
