package bundle_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/apply"
	"github.com/fleetgo/fleet/internal/bundlereader"
)

// Rancher's fleet-examples multi-cluster/helm layout: customizations named
// like the GitRepo's targets, with Helm values. prod's customization
// selects only the gold tier, so a prod cluster of another tier is
// deployed by the GitRepo's prod target with the root values alone.
const sameNamesFleetYAML = `helm:
  values:
    greeting: hello
targetCustomizations:
- name: dev
  clusterSelector:
    matchLabels:
      env: dev
  helm:
    values:
      greeting: hello dev
- name: prod
  clusterSelector:
    matchLabels:
      env: prod
      tier: gold
  helm:
    values:
      greeting: hello prod
      password: pr0d-s3cret
`

// A GitRepo whose targets have the names of fleet.yaml customizations with
// values is read and applied as GitOps does, and every cluster gets the
// deployment (ID and values) the same Bundle with its values in the spec
// gives: the customizations' values go to the clusters they select, and
// not to those only the GitRepo's target of the same name selects.
func TestSameNamedGitRepoTargetsDeployAsInSpec(t *testing.T) {
	ctx := context.Background()
	ws := "ws-values-names"
	createNamespace(t, ctx, ws, nil)
	newCluster(t, ctx, ws, "nd", map[string]string{"env": "dev"}, time.Second)
	newCluster(t, ctx, ws, "ng", map[string]string{"env": "prod", "tier": "gold"}, time.Second)
	newCluster(t, ctx, ws, "np", map[string]string{"env": "prod"}, time.Second)
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "fleet.yaml"), []byte(sameNamesFleetYAML), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "cm.yaml"), []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n"), 0o644))

	// The GitRepo's targets, as the GitOps controller passes them: each
	// is a target and a restriction.
	var targets []fleet.BundleTarget
	var restrictions []fleet.BundleTargetRestriction
	for _, name := range []string{"dev", "prod"} {
		sel := &metav1.LabelSelector{MatchLabels: map[string]string{"env": name}}
		targets = append(targets, fleet.BundleTarget{Name: name, ClusterSelector: sel})
		restrictions = append(restrictions, fleet.BundleTargetRestriction{Name: name, ClusterSelector: sel.DeepCopy()})
	}
	read, err := bundlereader.Read(ctx, "multi", dir, nil, bundlereader.Options{
		Namespace: ws, Labels: map[string]string{fleet.RepoLabel: "multi"}, Targets: targets, TargetRestrictions: restrictions,
	})
	must(t, err)
	if len(read) != 1 {
		t.Fatalf("%d bundles read", len(read))
	}

	// The same Bundle with its values in the spec, created directly.
	inSpec := read[0].DeepCopy()
	inSpec.Name, inSpec.Labels = "multi-in-spec", nil
	must(t, env.Client.Create(ctx, inSpec))
	must(t, apply.Apply(ctx, env.Client, read, apply.Options{Namespace: ws}))
	stored := &fleet.Bundle{}
	must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ws, Name: read[0].Name}, stored))
	if stored.Spec.ValuesHash == "" {
		t.Fatal("the values were not moved into the values Secret")
	}

	want := map[string]map[string]interface{}{
		"nd": {"greeting": "hello dev"},
		"ng": {"greeting": "hello prod", "password": "pr0d-s3cret"},
		"np": {"greeting": "hello"},
	}
	valuesOn(t, ctx, ws, "multi-in-spec", want)
	valuesOn(t, ctx, ws, read[0].Name, want)
	eventually(t, 30*time.Second, func() error {
		a, b := deploymentIDs(t, ctx, ws, read[0].Name), deploymentIDs(t, ctx, ws, "multi-in-spec")
		if len(a) != 3 || fmt.Sprint(a) != fmt.Sprint(b) {
			return fmt.Errorf("deployment IDs from the values Secret %v, from the spec %v", a, b)
		}
		return nil
	})
	waitValuesOK(t, ctx, client.ObjectKeyFromObject(stored))
}
