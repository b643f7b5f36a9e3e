package devenv

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/fleetgo/fleet/internal/bundlereader"
)

// TestExamplesAreBundles reads examples/ the way the GitRepo's bundles are
// built and checks the three bundles and their per-environment options.
func TestExamplesAreBundles(t *testing.T) {
	bundles, err := bundlereader.Read(context.Background(), GitRepoName, filepath.Join(repoRoot(), "examples"),
		ExampleBundlePaths, bundlereader.Options{Namespace: Workspace})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]int{}
	for i, b := range bundles {
		byName[b.Name] = i
	}
	for _, want := range []string{"examples-simple", "examples-kustomize", "examples-helm"} {
		if _, ok := byName[want]; !ok {
			t.Fatalf("bundles %v: %s missing", byName, want)
		}
	}
	if len(bundles) != 3 {
		t.Errorf("got %d bundles, want 3", len(bundles))
	}
	helm := bundles[byName["examples-helm"]]
	if helm.Spec.Helm == nil || helm.Spec.Helm.Chart == "" {
		t.Fatalf("examples-helm has no chart: %+v", helm.Spec.Helm)
	}
	envs := map[string]string{}
	for _, tg := range helm.Spec.Targets {
		if tg.ClusterSelector == nil || tg.Helm == nil || tg.Helm.Values == nil {
			continue
		}
		envs[tg.ClusterSelector.MatchLabels["env"]] = tg.Helm.Values.Data["greeting"].(string)
	}
	if envs["dev"] != "hello from dev" || envs["prod"] != "hello from prod" {
		t.Errorf("helm customizations by env = %v", envs)
	}
	kust := bundles[byName["examples-kustomize"]]
	if kust.Spec.Kustomize == nil || kust.Spec.Kustomize.Dir != "envs/dev" {
		t.Errorf("examples-kustomize kustomize options = %+v, want dir envs/dev", kust.Spec.Kustomize)
	}
	if n := len(bundles[byName["examples-simple"]].Spec.Resources); n != 2 {
		t.Errorf("examples-simple has %d resources, want 2", n)
	}
}
