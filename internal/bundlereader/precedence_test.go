package bundlereader

import (
	"testing"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// TestLabelPrecedence pins Rancher Fleet's order (read.go applies the
// GitRepo's/--label values first, then fleet.yaml's `labels`): a fleet.yaml
// label beats a GitRepo label of the same key, because dependsOn.selector
// and BundleNamespaceMapping.bundleSelector select on these labels and a
// migrated repository must select the same Bundles. Reserved labels (owner,
// commit, ...) stay with the caller whatever fleet.yaml says.
func TestLabelPrecedence(t *testing.T) {
	cases := []struct {
		name      string
		fleetYAML string
		opts      map[string]string
		want      map[string]string
	}{
		{
			name:      "fleet.yaml wins a shared key",
			fleetYAML: "labels: {team: payments}\n",
			opts:      map[string]string{"team": "platform"},
			want:      map[string]string{"team": "payments"},
		},
		{
			name:      "disjoint keys are all kept",
			fleetYAML: "labels: {app: web}\n",
			opts:      map[string]string{"team": "platform"},
			want:      map[string]string{"app": "web", "team": "platform"},
		},
		{
			name:      "GitRepo label kept without fleet.yaml labels",
			fleetYAML: "namespace: x\n",
			opts:      map[string]string{"team": "platform"},
			want:      map[string]string{"team": "platform"},
		},
		{
			name:      "reserved labels stay the caller's",
			fleetYAML: "labels: {fleet.cattle.io/repo-name: other, fleet.cattle.io/commit: fake, team: payments}\n",
			opts:      map[string]string{fleet.RepoLabel: "mine", fleet.CommitLabel: "c1", "team": "platform"},
			want:      map[string]string{fleet.RepoLabel: "mine", fleet.CommitLabel: "c1", "team": "payments"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeRepo(t, map[string]string{"fleet.yaml": tc.fleetYAML, "cm.yaml": "x: y\n"})
			b, err := readOne(t, dir, Options{Labels: tc.opts})
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.want {
				if b.Labels[k] != v {
					t.Errorf("label %s = %q, want %q (all: %v)", k, b.Labels[k], v, b.Labels)
				}
			}
			if len(b.Labels) != len(tc.want) {
				t.Errorf("labels = %v, want %v", b.Labels, tc.want)
			}
		})
	}
}

// TestForceSyncGenerationFromCaller pins Rancher Fleet's rule that the
// Bundle's forceSyncGeneration is always the GitRepo's (fleet apply
// --sync-generation), 0 included: it feeds the deploymentID, so a fleet.yaml
// value surviving would give the same repository a different deploymentID
// than under Rancher Fleet.
func TestForceSyncGenerationFromCaller(t *testing.T) {
	cases := []struct {
		name      string
		fleetYAML string
		syncGen   int64
		want      int64
	}{
		{name: "GitRepo 0 overrides fleet.yaml", fleetYAML: "forceSyncGeneration: 3\n", syncGen: 0, want: 0},
		{name: "GitRepo value overrides fleet.yaml", fleetYAML: "forceSyncGeneration: 3\n", syncGen: 5, want: 5},
		{name: "GitRepo value without fleet.yaml value", fleetYAML: "namespace: x\n", syncGen: 2, want: 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeRepo(t, map[string]string{"fleet.yaml": tc.fleetYAML, "cm.yaml": "x: y\n"})
			b, err := readOne(t, dir, Options{SyncGeneration: tc.syncGen})
			if err != nil {
				t.Fatal(err)
			}
			if b.Spec.ForceSyncGeneration != tc.want {
				t.Errorf("forceSyncGeneration = %d, want %d", b.Spec.ForceSyncGeneration, tc.want)
			}
		})
	}
}
