package bundlereader

import (
	"context"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// TestOverrideTargetsEmptyList: as in Rancher Fleet, overrideTargets set
// to an empty list still replaces the GitRepo's targets and restrictions:
// the bundle gets the default target (or only its own targets) and no
// restrictions. Absent or null, the GitRepo's targets apply.
func TestOverrideTargetsEmptyList(t *testing.T) {
	gitRepoTarget := fleet.BundleTarget{Name: "prod", ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}
	gitRepoRestriction := fleet.BundleTargetRestriction{Name: "prod", ClusterSelector: gitRepoTarget.ClusterSelector}
	opts := Options{Targets: []fleet.BundleTarget{gitRepoTarget}, TargetRestrictions: []fleet.BundleTargetRestriction{gitRepoRestriction}}
	defaultTarget := []fleet.BundleTarget{{Name: "default", ClusterGroup: "default"}}
	custom := fleet.BundleTarget{Name: "dev", ClusterName: "dev-1"}
	for name, tc := range map[string]struct {
		fleetYAML        string
		wantTargets      []fleet.BundleTarget
		wantRestrictions []fleet.BundleTargetRestriction
	}{
		"empty list":                     {fleetYAML: "overrideTargets: []\n", wantTargets: defaultTarget},
		"empty list with customizations": {fleetYAML: "overrideTargets: []\ntargetCustomizations:\n- name: dev\n  clusterName: dev-1\n", wantTargets: []fleet.BundleTarget{custom}},
		"absent":                         {fleetYAML: "defaultNamespace: x\n", wantTargets: []fleet.BundleTarget{gitRepoTarget}, wantRestrictions: opts.TargetRestrictions},
		"null":                           {fleetYAML: "overrideTargets: null\n", wantTargets: []fleet.BundleTarget{gitRepoTarget}, wantRestrictions: opts.TargetRestrictions},
		"one entry, target and restriction": {fleetYAML: "overrideTargets:\n- name: dev\n  clusterName: dev-1\n", wantTargets: []fleet.BundleTarget{custom},
			wantRestrictions: []fleet.BundleTargetRestriction{{Name: "dev", ClusterName: "dev-1"}}},
	} {
		t.Run(name, func(t *testing.T) {
			dir := writeRepo(t, map[string]string{
				"fleet.yaml": tc.fleetYAML,
				"cm.yaml":    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app}\n",
			})
			bs, err := Read(context.Background(), "repo", dir, nil, opts)
			if err != nil {
				t.Fatal(err)
			}
			spec := bs[0].Spec
			if !reflect.DeepEqual(spec.Targets, tc.wantTargets) {
				t.Errorf("targets = %+v, want %+v", spec.Targets, tc.wantTargets)
			}
			if !reflect.DeepEqual(spec.TargetRestrictions, tc.wantRestrictions) {
				t.Errorf("restrictions = %+v, want %+v", spec.TargetRestrictions, tc.wantRestrictions)
			}
		})
	}
}
